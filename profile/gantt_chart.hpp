#pragma once
// The Gantt chart of `starzero trace --svg`, drawn by gnuplot: one lane per worker and per
// transfer link, tasks coloured by kind (no outline; boxes at least a pixel or two wide), step starts
// as dashed vertical lines, the critical path of each step as a thin dark band under its tasks.
#include <filesystem>
#include <string>
#include <vector>

#include "profile/report_format.hpp"

namespace starzero::profile {

// A stable colour for a task kind (0xRRGGBB): from a hash of the name, the same in every run.
unsigned kind_colour(const std::string& kind);

// Writes the chart of every rank (lanes of rank r are labelled "r<r> ..." when there are
// several; each rank's time starts at its own first task) to svg_path, atomically. Runs
// `gnuplot` from PATH on a data file and a script in a temporary directory. Throws
// std::runtime_error when gnuplot is missing or fails, std::invalid_argument when the folder of
// svg_path does not exist.
// `title` names the run (its DIR).
void write_gantt_svg(const std::vector<RankReport>& ranks, const std::filesystem::path& svg_path,
                     const std::string& title);

}  // namespace starzero::profile
