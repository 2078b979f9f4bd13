#pragma once
// Time intervals and the few set operations the trace report needs: union, the length of an
// interval covered by a union, and the part of one union outside another.
#include <vector>

namespace starzero::profile {

struct Interval {
  double begin = 0;
  double end = 0;
  double length() const { return end > begin ? end - begin : 0.0; }
};

// A union of intervals: sorted by begin, disjoint, none empty.
using IntervalUnion = std::vector<Interval>;

// The union of `intervals` (any order, may overlap; empty ones are dropped).
IntervalUnion merge_intervals(std::vector<Interval> intervals);

// The length of `interval` that `covered` covers. O(log n + the intervals it meets).
double covered_length(const Interval& interval, const IntervalUnion& covered);

// The total length of `parts` inside `window`.
double length_within(const IntervalUnion& parts, const Interval& window);

// `from` without `removed`.
IntervalUnion subtract_intervals(const IntervalUnion& from, const IntervalUnion& removed);

}  // namespace starzero::profile
