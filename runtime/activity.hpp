#pragma once
// What each thread of this process is doing now, for the watchdog's report (runtime/watchdog.hpp):
// every codelet's task records its name on the worker that runs it (runtime/codelet.hpp), and
// the training loop records what the main thread waits for. A scope per thread, nesting: the
// innermost shows. Cheap enough for every task (one uncontended lock at start and end).
#include <string>
#include <vector>

namespace starzero::activity {

// The calling thread does `what` until the scope ends.
class Scope {
 public:
  explicit Scope(std::string what);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::string previous_;
  long long previous_since_ns_ = 0;
};

struct Entry {
  std::string thread;  // "main", "CPU 0" (StarPU's worker name), "thread 3"
  std::string what;    // empty: idle (no scope open)
  double seconds = 0;  // since the scope opened
};
// Every thread that ever opened a scope, in the order they first did.
std::vector<Entry> snapshot();

}  // namespace starzero::activity
