#pragma once
// A stuck run must not hang forever (a rank stopped, a collective whose partner is gone, a kernel
// that loops): the Watchdog's thread calls on_timeout once when progress() has not been called
// for `timeout`, with a report of what every thread of this process does (runtime/activity.hpp).
// on_timeout is expected to end the process (under mpirun: the whole job).
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace starzero {

class Watchdog {
 public:
  using Report = std::function<void(const std::string& last_progress, const std::string& threads)>;
  Watchdog(std::chrono::milliseconds timeout, Report on_timeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Something finished (`what`: "step 12"); the timeout starts again.
  void progress(std::string what);

 private:
  void watch();

  std::chrono::milliseconds timeout_;
  Report on_timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::chrono::steady_clock::time_point last_;
  std::string last_what_ = "the start";
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace starzero
