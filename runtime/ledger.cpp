#include "runtime/ledger.hpp"

namespace starzero {

std::string_view memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::params: return "parameters";
    case MemoryCategory::grads: return "gradients";
    case MemoryCategory::optimizer: return "optimizer state";
    case MemoryCategory::temporaries: return "temporary full params";
  }
  return "?";
}

std::string_view memory_place_name(MemoryPlace p) {
  switch (p) {
    case MemoryPlace::device: return "device";
    case MemoryPlace::host: return "host";
    case MemoryPlace::disk: return "disk";
  }
  return "?";
}

void MemoryLedger::bump(std::atomic<std::int64_t>& value, std::atomic<std::int64_t>& peak, std::int64_t delta) {
  const std::int64_t now = value.fetch_add(delta) + delta;
  std::int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

void MemoryLedger::add(MemoryCategory c, std::int64_t bytes, Place p) {
  bump(slots_[index(c, p)].live, slots_[index(c, p)].peak, bytes);
  bump(totals_[std::size_t(p)].live, totals_[std::size_t(p)].peak, bytes);
}

}  // namespace starzero
