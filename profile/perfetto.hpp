#pragma once
// `starzero trace DIR --perfetto FILE`: the traced run as Chrome trace-event JSON, which
// Perfetto (ui.perfetto.dev) and chrome://tracing open. One process per rank; in it one track
// per worker and one per transfer link (memory node pair), tasks and transfers as complete
// events ("ph": "X"), the steps' starts as instant events, and name metadata so every track is
// labelled. The format and its fields: docs/trace-report.md, "Perfetto".
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "profile/report_format.hpp"

namespace starzero::profile {

// The trace-event JSON of every rank ({"traceEvents": [...], "displayTimeUnit": "ms"}). Times
// are tasks.rec's and paje.trace's own, in µs (ts = StartTime × 1000, dur = (EndTime − StartTime)
// × 1000). Events that overlap in time on one track (concurrent transfers on a link) go to extra
// tracks of that link ("RAM->GPU0 #2"), as a track's complete events must nest.
nlohmann::ordered_json perfetto_json(const std::vector<RankReport>& ranks);

// Writes perfetto_json(ranks) to `path`, atomically. Throws std::invalid_argument when the file
// cannot be written there (its folder is missing or not writable, or `path` is a folder);
// std::system_error when writing fails later (a full disk).
void write_perfetto_json(const std::vector<RankReport>& ranks, const std::filesystem::path& path);

}  // namespace starzero::profile
