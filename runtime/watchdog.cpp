#include "runtime/watchdog.hpp"

#include <cstdio>

#include "runtime/activity.hpp"

namespace starzero {

namespace {

// "  main: step 4: ... (12.3 s)\n  CPU 0: task all_reduce_grad_sumsq (12.2 s)\n  CPU 1: idle\n"
std::string threads_report() {
  std::string text;
  for (const activity::Entry& e : activity::snapshot()) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, " (%.1f s)", e.seconds);
    text += "  " + e.thread + ": " + (e.what.empty() ? std::string("idle") : e.what + seconds) + "\n";
  }
  return text;
}

}  // namespace

Watchdog::Watchdog(std::chrono::milliseconds timeout, Report on_timeout)
    : timeout_(timeout),
      on_timeout_(std::move(on_timeout)),
      last_(std::chrono::steady_clock::now()),
      thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::progress(std::string what) {
  const std::lock_guard lock(mutex_);
  last_ = std::chrono::steady_clock::now();
  last_what_ = std::move(what);
}

void Watchdog::watch() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const auto deadline = last_ + timeout_;
    if (std::chrono::steady_clock::now() < deadline) {
      wake_.wait_until(lock, deadline);
      continue;
    }
    const std::string last = last_what_;
    lock.unlock();
    on_timeout_(last, threads_report());
    return;  // on_timeout ends the process; if it returns, the watchdog is done
  }
}

}  // namespace starzero
