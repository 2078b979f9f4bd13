#pragma once
// Byte accounting of what a rank holds, per category: the live bytes now and the peak.
// Persistent buffers are added when allocated; transient ones (ZeRO-2/3 full gradients,
// ZeRO-3 gathered parameters) are added and removed by callbacks that run in task-graph order,
// so the peak is what the graph really had alive at once.
#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace starzero {

enum class MemoryCategory : std::uint8_t { params, grads, optimizer, temporaries };
inline constexpr std::size_t kMemoryCategories = 4;
std::string_view memory_category_name(MemoryCategory c);

// Where the bytes are meant to live: the compute device (a GPU; on a CPU-only run the same RAM),
// host memory (ZeRO-Offload: pinned RAM) or a StarPU disk node (the NVMe tier).
enum class MemoryPlace : std::uint8_t { device, host, disk };
inline constexpr std::size_t kMemoryPlaces = 3;
std::string_view memory_place_name(MemoryPlace p);

class MemoryLedger {
 public:
  using Place = MemoryPlace;
  void add(MemoryCategory c, std::int64_t bytes, Place p = Place::device);
  void remove(MemoryCategory c, std::int64_t bytes, Place p = Place::device) { add(c, -bytes, p); }
  std::int64_t live(MemoryCategory c, Place p = Place::device) const { return slots_[index(c, p)].live.load(); }
  std::int64_t peak(MemoryCategory c, Place p = Place::device) const { return slots_[index(c, p)].peak.load(); }
  // Peak of the count of live items (e.g. gathered full layers) tracked with add_item/remove_item.
  void add_item(MemoryCategory c) { bump(slots_[index(c)].items, slots_[index(c)].peak_items, 1); }
  void remove_item(MemoryCategory c) { slots_[index(c)].items.fetch_sub(1); }
  std::int64_t peak_items(MemoryCategory c) const { return slots_[index(c)].peak_items.load(); }
  // All categories together in one place: the peak of their sum (not the sum of the
  // per-category peaks, which need not coincide).
  std::int64_t peak_total(Place p) const { return totals_[std::size_t(p)].peak.load(); }

 private:
  static std::size_t index(MemoryCategory c, Place p = Place::device) {
    return static_cast<std::size_t>(p) * kMemoryCategories + static_cast<std::size_t>(c);
  }
  static void bump(std::atomic<std::int64_t>& value, std::atomic<std::int64_t>& peak, std::int64_t delta);
  struct Slot {
    std::atomic<std::int64_t> live{0}, peak{0}, items{0}, peak_items{0};
  };
  std::array<Slot, kMemoryCategories * kMemoryPlaces> slots_{};
  std::array<Slot, kMemoryPlaces> totals_{};
};

}  // namespace starzero
