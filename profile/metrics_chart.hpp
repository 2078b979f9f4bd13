#pragma once
// `starzero plot`: the curves of a metrics file (`starzero train --metrics FILE.jsonl`,
// train/metrics.hpp): training loss per step with the validation loss, and throughput, drawn by
// gnuplot into one SVG.
#include <cstdint>
#include <filesystem>
#include <map>

namespace starzero::profile {

// A metrics file's curves by step. A step written twice (a resumed run appends) keeps its last
// line. Lines of other events are skipped; unknown keys are ignored.
struct MetricsCurves {
  struct Step {
    double loss = 0, tokens_per_second = 0;
  };
  std::map<std::uint64_t, Step> steps;
  std::map<std::uint64_t, double> validation;
  int runs = 0;  // "start" lines: runs that appended to the file
};

// FileFormatError naming the file and line for a line that is not a JSON object, or a step or
// validation line without its numbers; also when the file has no step line at all.
MetricsCurves read_metrics(const std::filesystem::path& file);

// Draws the curves into `svg` (written atomically). Throws when gnuplot is missing or fails.
void write_metrics_chart(const MetricsCurves& curves, const std::string& title, const std::filesystem::path& svg);

}  // namespace starzero::profile
