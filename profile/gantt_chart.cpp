#include "profile/gantt_chart.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "profile/gnuplot.hpp"
#include "profile/task_kinds.hpp"
#include "runtime/files.hpp"

namespace starzero::profile {
namespace {

constexpr std::size_t kKindsInLegend = 12;
constexpr double kTaskHalfHeight = 0.36;
constexpr double kTransferHalfHeight = 0.3;
// The critical path: a thin dark band under each of its tasks, in the gap below the task's box
// (an outline would hide the colour of a narrow task).
constexpr double kCriticalBandOffset = -0.43;
constexpr double kCriticalBandHalfHeight = 0.04;
constexpr unsigned kCriticalBandColour = 0x202020;
// A box is drawn at least this fraction of the time axis wide (one to two pixels of the chart), so
// the colour of a task far shorter than a pixel still shows.
constexpr double kMinBoxWidth = 0.0014;
constexpr double kRankGap = 0.6;  // extra space above each rank's lanes after the first, for the step labels

std::string colour_text(unsigned rgb) {
  char text[16];
  std::snprintf(text, sizeof text, "#%06x", rgb & 0xffffffu);
  return text;
}

unsigned transfer_colour(const std::string& type) {
  if (type == "F") return 0xd62728;   // fetch: a task waits for it
  if (type == "PF") return 0x1f77b4;  // prefetch
  return 0x7f7f7f;                    // idle fetch
}

std::string transfer_type_name(const std::string& type) {
  if (type == "F") return "fetch";
  if (type == "PF") return "prefetch";
  if (type == "IF") return "idle fetch";
  return type;
}

struct Lanes {
  std::vector<std::pair<std::string, double>> labels;  // ytics
  double next = 0;                                     // lanes go down from 0
  double add(const std::string& label) {
    labels.emplace_back(label, next);
    return std::exchange(next, next - 1);
  }
};

// A box from begin_s to end_s (at least min_width wide, centred on the interval) on `lane`.
void write_box(std::ostream& out, double begin_s, double end_s, double min_width, double lane, double half_height,
               unsigned colour) {
  out << 0.5 * (begin_s + end_s) << ' ' << lane << ' ' << 0.5 * std::max(end_s - begin_s, min_width) << ' '
      << half_height << ' ' << colour << '\n';
}

// What the chart's script draws, gathered over the ranks: a box a line in each data file.
struct ChartData {
  explicit ChartData(const std::filesystem::path& folder)
      : tasks(folder / "tasks.dat"), transfers(folder / "transfers.dat"), critical(folder / "critical.dat") {
    for (std::ofstream* out : {&tasks, &transfers, &critical}) out->precision(9);
  }
  std::ofstream tasks, transfers, critical;
  std::size_t task_boxes = 0, transfer_boxes = 0, critical_boxes = 0;
  std::ostringstream steps_script;  // step lines and labels
  std::map<std::string, double> kind_time;
  std::set<std::string> transfer_types;
  Lanes lanes;
  double min_width = 0;  // of a box, seconds
};

// The time axis: to the last task or transfer end of any rank, each rank from its first task.
double time_axis_end(const std::vector<RankReport>& ranks) {
  double x_max = 0;
  for (const RankReport& rank : ranks) {
    for (const TaskRecord& t : rank.data.tasks)
      if (t.executed()) x_max = std::max(x_max, (t.end_ms - rank.report.origin_ms) * 1e-3);
    for (const Transfer& t : rank.data.paje.transfers)
      x_max = std::max(x_max, (t.end_ms - rank.report.origin_ms) * 1e-3);
  }
  return x_max;
}

// The rank's lanes (its workers, then its links, labels after `prefix`) and what goes on them:
// tasks, transfers, the critical path's bands and the step lines.
void add_rank(const RankReport& rank, const std::string& prefix, ChartData& chart) {
  const TraceReport& report = rank.report;
  const std::vector<TaskRecord>& tasks = rank.data.tasks;
  const double top = chart.lanes.next;
  const auto seconds_of = [&](double ms) { return (ms - report.origin_ms) * 1e-3; };
  std::map<int, double> lane_of_worker;
  for (const WorkerReport& w : report.workers) lane_of_worker[w.id] = chart.lanes.add(prefix + w.name);
  std::map<std::pair<int, int>, double> lane_of_link;
  const std::vector<std::string> node_names = memory_node_names(rank.data.paje);
  const auto node_name = [&](int node) {
    return node >= 0 && std::size_t(node) < node_names.size() ? node_names[std::size_t(node)] : "?";
  };
  for (const Transfer& t : rank.data.paje.transfers) lane_of_link.try_emplace({t.src_node, t.dst_node}, 0.0);
  for (auto& [link, lane] : lane_of_link)
    lane = chart.lanes.add(prefix + node_name(link.first) + "->" + node_name(link.second));
  const double bottom = chart.lanes.next + 1;

  std::map<long, double> step_start;
  for (const TaskRecord& t : tasks) {
    if (!t.executed()) continue;
    const std::string kind = task_kind(t.name);
    chart.kind_time[kind] += t.duration_ms();
    write_box(chart.tasks, seconds_of(t.start_ms), seconds_of(t.end_ms), chart.min_width, lane_of_worker[t.worker],
              kTaskHalfHeight, kind_colour(kind));
    ++chart.task_boxes;
    if (t.step) {
      auto [it, fresh] = step_start.emplace(*t.step, t.start_ms);
      if (!fresh) it->second = std::min(it->second, t.start_ms);
    }
  }
  for (const Transfer& t : rank.data.paje.transfers) {
    chart.transfer_types.insert(t.type);
    write_box(chart.transfers, seconds_of(t.start_ms), seconds_of(t.end_ms), chart.min_width,
              lane_of_link[{t.src_node, t.dst_node}], kTransferHalfHeight, transfer_colour(t.type));
    ++chart.transfer_boxes;
  }
  for (const StepReport& s : report.steps)
    for (std::size_t i : s.critical_path) {
      const TaskRecord& t = tasks[i];
      write_box(chart.critical, seconds_of(t.start_ms), seconds_of(t.end_ms), chart.min_width,
                lane_of_worker[t.worker] + kCriticalBandOffset, kCriticalBandHalfHeight, kCriticalBandColour);
      ++chart.critical_boxes;
    }
  for (const auto& [step, start_ms] : step_start) {
    const double x = seconds_of(start_ms);
    chart.steps_script << "set arrow from " << x << ',' << bottom - 0.5 << " to " << x << ',' << top + 0.5
                       << " nohead dt 2 lw 1 lc rgb '#404040' front\n";
    chart.steps_script << "set label " << gnuplot_quoted("step " + std::to_string(step)) << " at " << x << ','
                       << top + 0.58 << " left font ',8'\n";
  }
}

// The plot command's items: the data files that have boxes, then the legend (the kinds with
// the most time, the critical path, the transfer types).
std::vector<std::string> plot_items(const ChartData& chart) {
  std::vector<std::string> plots;
  if (chart.task_boxes)
    plots.push_back("'tasks.dat' using 1:2:3:4:5 with boxxyerror fs solid 1.0 noborder lc rgb variable notitle");
  if (chart.transfer_boxes)
    plots.push_back("'transfers.dat' using 1:2:3:4:5 with boxxyerror fs solid 0.85 noborder lc rgb variable notitle");
  if (chart.critical_boxes)
    plots.push_back("'critical.dat' using 1:2:3:4:5 with boxxyerror fs solid 1.0 noborder lc rgb variable notitle");
  std::vector<std::pair<std::string, double>> top_kinds(chart.kind_time.begin(), chart.kind_time.end());
  std::stable_sort(top_kinds.begin(), top_kinds.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (top_kinds.size() > kKindsInLegend) top_kinds.resize(kKindsInLegend);
  for (const auto& [kind, time] : top_kinds)
    plots.push_back("keyentry with boxes fs solid 1.0 lc rgb '" + colour_text(kind_colour(kind)) + "' title " +
                    gnuplot_quoted(kind));
  if (chart.critical_boxes)
    plots.push_back("keyentry with boxes fs solid 1.0 lc rgb '" + colour_text(kCriticalBandColour) +
                    "' title 'critical path'");
  for (const std::string& type : chart.transfer_types)
    plots.push_back("keyentry with boxes fs solid 0.85 lc rgb '" + colour_text(transfer_colour(type)) + "' title " +
                    gnuplot_quoted("transfer: " + transfer_type_name(type)));
  return plots;
}

// chart.gp in `folder`: plots the data files there into `svg`.
void write_chart_script(const std::filesystem::path& folder, const ChartData& chart, double x_max,
                        const std::filesystem::path& svg, const std::string& title) {
  const std::size_t lane_count = chart.lanes.labels.size();
  std::ofstream script(folder / "chart.gp");
  script.precision(9);
  script << "set terminal svg size 1400," << 150 + 24 * lane_count
         << " noenhanced font 'Sans,10' background '#ffffff'\n"
         << "set output " << gnuplot_quoted(svg.string()) << "\n"
         << "set title " << gnuplot_quoted("starzero trace " + title) << "\n"
         << "set xlabel 'seconds since the first task'\n"
         << "set xrange [0:" << std::max(x_max, 1e-6) * 1.01 << "]\n"
         << "set yrange [" << chart.lanes.next + 0.5 << ":0.9]\n"
         << "set ytics scale 0 (";
  for (std::size_t i = 0; i < lane_count; ++i)
    script << (i ? ", " : "") << gnuplot_quoted(chart.lanes.labels[i].first) << ' ' << chart.lanes.labels[i].second;
  script << ")\n"
         << "set grid xtics lc rgb '#dddddd'\n"
         << "set key outside right top vertical Left reverse samplen 1.5\n"
         << chart.steps_script.str();
  const std::vector<std::string> plots = plot_items(chart);
  script << "cd " << gnuplot_quoted(folder.string()) << "\nplot ";
  for (std::size_t i = 0; i < plots.size(); ++i) script << (i ? ", \\\n     " : "") << plots[i];
  script << "\nunset output\n";
  script.close();
  if (!script) throw std::runtime_error("cannot write gnuplot's script in " + folder.string());
}

}  // namespace

unsigned kind_colour(const std::string& kind) {
  std::uint32_t hash = 2166136261u;  // FNV-1a
  for (unsigned char c : kind) hash = (hash ^ c) * 16777619u;
  const double hue = double(hash % 360u);
  const double saturation = 0.45 + double((hash >> 9) % 40u) / 100.0;
  const double value = 0.70 + double((hash >> 17) % 25u) / 100.0;
  // HSV to RGB: the hue's 60-degree sector decides which channels get the chroma and the
  // intermediate value.
  const double chroma = value * saturation;
  const double h = hue / 60.0;
  const double x = chroma * (1.0 - std::fabs(std::fmod(h, 2.0) - 1.0));
  const std::array<std::array<double, 3>, 6> sectors = {
      {{chroma, x, 0}, {x, chroma, 0}, {0, chroma, x}, {0, x, chroma}, {x, 0, chroma}, {chroma, 0, x}}};
  const auto& [r, g, b] = sectors[std::min<std::size_t>(std::size_t(h), 5)];
  const double m = value - chroma;
  const auto byte = [&](double channel) { return unsigned(std::lround((channel + m) * 255.0)) & 0xffu; };
  return (byte(r) << 16) | (byte(g) << 8) | byte(b);
}

void write_gantt_svg(const std::vector<RankReport>& ranks, const std::filesystem::path& svg_path,
                     const std::string& title) {
  const std::filesystem::path folder = svg_path.parent_path().empty() ? "." : svg_path.parent_path();
  if (!std::filesystem::is_directory(folder))
    throw std::invalid_argument("--svg " + svg_path.string() + ": no such directory " + folder.string());
  const GnuplotScratch scratch;
  ChartData chart(scratch.path());
  const double x_max = time_axis_end(ranks);
  chart.min_width = std::max(x_max, 1e-6) * kMinBoxWidth;
  for (const RankReport& rank : ranks) {
    if (&rank != &ranks.front()) chart.lanes.next -= kRankGap;
    add_rank(rank, ranks.size() > 1 ? "r" + std::to_string(rank.report.rank.value_or(0)) + " " : "", chart);
  }
  for (std::ofstream* out : {&chart.tasks, &chart.transfers, &chart.critical}) {
    out->close();
    if (!*out) throw std::runtime_error("cannot write gnuplot's data in " + scratch.path().string());
  }

  const std::filesystem::path svg = scratch.path() / "chart.svg";
  write_chart_script(scratch.path(), chart, x_max, svg, title);
  run_gnuplot(scratch.path() / "chart.gp", scratch.path() / "gnuplot.log");
  install_svg(svg, svg_path);
}

}  // namespace starzero::profile
