#include "runtime/activity.hpp"

#include <starpu.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

namespace starzero::activity {

namespace {

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Slot {
  std::mutex mutex;
  std::string thread, what;
  long long since_ns = 0;
};

// Slots live as long as the process (threads come and go; StarPU's workers are re-created per
// session), so a snapshot never reads a freed one. Threads beyond the table are not shown.
constexpr std::size_t kSlots = 1024;
std::array<Slot, kSlots> slots;
std::atomic<std::size_t> used{0};
std::atomic<bool> main_taken{false};

Slot* my_slot() {
  thread_local Slot* slot = []() -> Slot* {
    const std::size_t index = used.fetch_add(1);
    if (index >= kSlots) return nullptr;
    Slot& s = slots[index];
    const std::lock_guard lock(s.mutex);
    const int worker = starpu_worker_get_id();
    char name[64] = "";
    if (worker >= 0) starpu_worker_get_name(worker, name, sizeof name);
    bool expected = false;
    s.thread = worker >= 0               ? std::string(name)
               : main_taken.compare_exchange_strong(expected, true) ? "main"
                                                                     : "thread " + std::to_string(index);
    return &s;
  }();
  return slot;
}

}  // namespace

Scope::Scope(std::string what) {
  Slot* s = my_slot();
  if (!s) return;
  const std::lock_guard lock(s->mutex);
  previous_ = std::exchange(s->what, std::move(what));
  previous_since_ns_ = std::exchange(s->since_ns, now_ns());
}

Scope::~Scope() {
  Slot* s = my_slot();
  if (!s) return;
  const std::lock_guard lock(s->mutex);
  s->what = std::move(previous_);
  s->since_ns = previous_since_ns_;
}

std::vector<Entry> snapshot() {
  std::vector<Entry> out;
  const long long now = now_ns();
  const std::size_t n = std::min(used.load(), kSlots);
  for (std::size_t i = 0; i < n; ++i) {
    Slot& s = slots[i];
    const std::lock_guard lock(s.mutex);
    out.push_back({s.thread, s.what, s.what.empty() ? 0.0 : double(now - s.since_ns) * 1e-9});
  }
  return out;
}

}  // namespace starzero::activity
