#include "profile/trace_command.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "profile/gantt_chart.hpp"
#include "profile/perfetto.hpp"
#include "profile/report_format.hpp"
#include "runtime/files.hpp"

namespace starzero::profile {

std::vector<std::pair<std::optional<int>, std::filesystem::path>> find_trace_folders(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw_format_error(dir, "no such directory");
  if (fs::exists(dir / "tasks.rec")) return {{std::nullopt, dir}};
  std::vector<std::pair<std::optional<int>, fs::path>> ranks;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !name.starts_with("rank")) continue;
    int rank = -1;
    const char* digits = name.data() + 4;
    const auto [end, ec] = std::from_chars(digits, name.data() + name.size(), rank);
    if (ec != std::errc() || end != name.data() + name.size() || digits == end) continue;
    if (fs::exists(entry.path() / "tasks.rec")) ranks.emplace_back(rank, entry.path());
  }
  if (ranks.empty())
    throw_format_error(dir, "no tasks.rec here nor in rank<r>/ folders (run `starzero train --trace DIR`)");
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

std::optional<sim::RunBoundFigures> read_run_bound(const std::filesystem::path& folder) {
  const std::filesystem::path path = folder / sim::kRunBoundFile;
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_format_error(path, "cannot open");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return sim::run_bound_from_json(text.str());
  } catch (const std::invalid_argument& e) {
    throw_format_error(path, e.what());
  }
}

void print_trace_report(const TraceCommandOptions& options, std::ostream& out) {
  std::vector<RankReport> ranks;
  for (const auto& [rank, folder] : find_trace_folders(options.dir)) {
    RankReport r;
    r.data = read_trace_data(folder);
    r.report = analyze_trace(r.data, {options.steady_from, read_run_bound(folder)});
    r.report.rank = rank;
    ranks.push_back(std::move(r));
  }
  if (options.perfetto) write_perfetto_json(ranks, *options.perfetto);
  if (options.svg) write_gantt_svg(ranks, *options.svg, options.dir.string());
  if (options.json)
    out << report_json(ranks).dump(2) << '\n';
  else
    out << report_markdown(ranks);
  out.flush();
}

}  // namespace starzero::profile
