#pragma once
// The trace report as text: markdown tables for a person, JSON (keys in docs/trace-report.md)
// for scripts.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "profile/trace_data.hpp"
#include "profile/trace_report.hpp"

namespace starzero::profile {

// One rank's report as it appears in the output, with the tasks its critical paths name.
struct RankReport {
  TraceData data;
  TraceReport report;
};

// One report: the object of docs/trace-report.md; several ranks: {"ranks": [{"rank": r, ...}]}.
nlohmann::ordered_json report_json(const std::vector<RankReport>& ranks);

// Markdown: a title, then per rank (a "## Rank r" section when there are several) the steps,
// workers, task kinds, transfers, overlap and critical paths.
std::string report_markdown(const std::vector<RankReport>& ranks);

}  // namespace starzero::profile
