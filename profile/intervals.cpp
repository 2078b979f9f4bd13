#include "profile/intervals.hpp"

#include <algorithm>

namespace starzero::profile {

IntervalUnion merge_intervals(std::vector<Interval> intervals) {
  std::erase_if(intervals, [](const Interval& i) { return i.length() <= 0; });
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  IntervalUnion merged;
  for (const Interval& i : intervals) {
    if (!merged.empty() && i.begin <= merged.back().end)
      merged.back().end = std::max(merged.back().end, i.end);
    else
      merged.push_back(i);
  }
  return merged;
}

double covered_length(const Interval& interval, const IntervalUnion& covered) {
  if (interval.length() <= 0) return 0.0;
  // The first piece that ends after the interval begins; pieces are disjoint and sorted, so
  // their ends are sorted too.
  auto it = std::upper_bound(covered.begin(), covered.end(), interval.begin,
                             [](double t, const Interval& piece) { return t < piece.end; });
  double length = 0;
  for (; it != covered.end() && it->begin < interval.end; ++it)
    length += std::min(it->end, interval.end) - std::max(it->begin, interval.begin);
  return length;
}

double length_within(const IntervalUnion& parts, const Interval& window) { return covered_length(window, parts); }

IntervalUnion subtract_intervals(const IntervalUnion& from, const IntervalUnion& removed) {
  IntervalUnion out;
  auto cut = removed.begin();
  for (Interval piece : from) {
    while (cut != removed.end() && cut->end <= piece.begin) ++cut;
    for (auto c = cut; c != removed.end() && c->begin < piece.end; ++c) {
      if (c->begin > piece.begin) out.push_back({piece.begin, c->begin});
      piece.begin = std::max(piece.begin, c->end);
      if (piece.begin >= piece.end) break;
    }
    if (piece.length() > 0) out.push_back(piece);
  }
  return out;
}

}  // namespace starzero::profile
