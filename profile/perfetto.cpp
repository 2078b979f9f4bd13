#include "profile/perfetto.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "profile/task_kinds.hpp"
#include "profile/trace_report.hpp"
#include "runtime/files.hpp"

namespace starzero::profile {
namespace {

using json = nlohmann::ordered_json;

std::string transfer_type_name(const std::string& type) {
  if (type == "F") return "fetch";
  if (type == "PF") return "prefetch";
  if (type == "IF") return "idle fetch";
  return type;
}

json metadata(const char* name, int pid, std::optional<int> tid, json args) {
  json event = {{"name", name}, {"ph", "M"}, {"pid", pid}};
  if (tid) event["tid"] = *tid;
  event["args"] = std::move(args);
  return event;
}

// A track's metadata: its label and its place (tid order) in the process.
void add_track(int pid, int tid, const std::string& label, std::vector<json>& out) {
  out.push_back(metadata("thread_name", pid, tid, {{"name", label}}));
  out.push_back(metadata("thread_sort_index", pid, tid, {{"sort_index", tid}}));
}

// One labelled group of events (a worker's tasks, a link's transfers) split over as few tracks
// as keep every track's events disjoint: an event goes to the first track whose last event
// ended by its start. Events are (start ms, end ms, event index).
struct TrackGroup {
  std::string label;
  std::vector<std::pair<std::pair<double, double>, std::size_t>> events;
};

// Appends the group's tracks' metadata and its events (pid and tid set) to `out`; `next_tid`
// gives the tracks their tids.
void place_group(TrackGroup& group, std::vector<json>& events, int pid, int& next_tid, std::vector<json>& out) {
  std::stable_sort(group.events.begin(), group.events.end(),
                   [](const auto& a, const auto& b) { return a.first.first < b.first.first; });
  std::vector<double> track_end;  // per track of the group: its last event's end
  std::vector<int> tids;
  for (const auto& [span, index] : group.events) {
    std::size_t track = 0;
    while (track < track_end.size() && track_end[track] > span.first) ++track;
    if (track == track_end.size()) {
      track_end.push_back(span.second);
      tids.push_back(next_tid++);
      const std::string label = track == 0 ? group.label : group.label + " #" + std::to_string(track + 1);
      add_track(pid, tids.back(), label, out);
    }
    track_end[track] = span.second;
    json& event = events[index];
    event["pid"] = pid;
    event["tid"] = tids[track];
  }
  if (tids.empty()) {  // a worker that ran nothing still gets its labelled track
    add_track(pid, next_tid++, group.label, out);
  }
}

// The rank's task events, appended to `events` and grouped by worker in `workers`; `step_start`
// gets each step's first task start (ms).
void add_task_events(const RankReport& rank, std::vector<json>& events, std::map<int, TrackGroup>& workers,
                     std::map<long, double>& step_start) {
  const TraceData& data = rank.data;
  std::set<std::size_t> critical;
  for (const StepReport& s : rank.report.steps) critical.insert(s.critical_path.begin(), s.critical_path.end());
  for (std::size_t i = 0; i < data.tasks.size(); ++i) {
    const TaskRecord& t = data.tasks[i];
    if (!t.executed()) continue;
    TrackGroup& group = workers[t.worker];
    if (group.label.empty()) group.label = "worker " + std::to_string(t.worker);
    json args = {{"step", t.step ? json(*t.step) : json(nullptr)},
                 {"job_id", t.job_id},
                 {"kind", task_kind(t.name)},
                 {"worker", t.worker},
                 {"critical_path", critical.contains(i)}};
    if (!t.model.empty()) args["model"] = t.model;
    if (t.flops) args["flops"] = *t.flops;
    group.events.push_back({{t.start_ms, t.end_ms}, events.size()});
    events.push_back({{"name", t.name},
                      {"cat", "task"},
                      {"ph", "X"},
                      {"ts", t.start_ms * 1e3},
                      {"dur", (t.end_ms - t.start_ms) * 1e3},
                      {"args", std::move(args)}});
    if (t.step) {
      auto [it, fresh] = step_start.emplace(*t.step, t.start_ms);
      if (!fresh) it->second = std::min(it->second, t.start_ms);
    }
  }
}

// The trace's transfer events, appended to `events`; their groups by (source, destination) node.
std::map<std::pair<int, int>, TrackGroup> add_transfer_events(const PajeTrace& paje, std::vector<json>& events) {
  const std::vector<std::string> node_names = memory_node_names(paje);
  const auto node_name = [&](int node) {
    return node >= 0 && std::size_t(node) < node_names.size() ? node_names[std::size_t(node)]
                                                              : "node" + std::to_string(node);
  };
  std::map<std::pair<int, int>, TrackGroup> links;
  for (const Transfer& t : paje.transfers) {
    TrackGroup& group = links[{t.src_node, t.dst_node}];
    if (group.label.empty()) group.label = node_name(t.src_node) + "->" + node_name(t.dst_node);
    group.events.push_back({{t.start_ms, t.end_ms}, events.size()});
    events.push_back({{"name", transfer_type_name(t.type)},
                      {"cat", "transfer"},
                      {"ph", "X"},
                      {"ts", t.start_ms * 1e3},
                      {"dur", (t.end_ms - t.start_ms) * 1e3},
                      {"args",
                       {{"bytes", t.bytes},
                        {"type", t.type},
                        {"src", node_name(t.src_node)},
                        {"dst", node_name(t.dst_node)}}}});
  }
  return links;
}

// One rank as process `pid` named `process`: its tracks' metadata, its tasks and transfers, and
// a mark at each step's first task start.
void append_rank_events(const RankReport& rank, int pid, const std::string& process, std::vector<json>& out) {
  out.push_back(metadata("process_name", pid, std::nullopt, {{"name", process}}));
  out.push_back(metadata("process_sort_index", pid, std::nullopt, {{"sort_index", pid}}));

  // The events, their pid and tid set once their track is known.
  std::vector<json> events;
  std::map<int, TrackGroup> workers;  // by worker id
  for (const PajeWorker& w : rank.data.paje.workers) workers[w.id].label = w.name;
  std::map<long, double> step_start;  // ms
  add_task_events(rank, events, workers, step_start);
  std::map<std::pair<int, int>, TrackGroup> links = add_transfer_events(rank.data.paje, events);

  // Tracks: the steps first, then the workers by id, then the links by (source, destination).
  int next_tid = 1;
  const int steps_tid = next_tid++;
  add_track(pid, steps_tid, "steps", out);
  for (auto& [id, group] : workers) place_group(group, events, pid, next_tid, out);
  for (auto& [link, group] : links) place_group(group, events, pid, next_tid, out);
  for (json& event : events) out.push_back(std::move(event));
  for (const auto& [step, start_ms] : step_start)
    out.push_back({{"name", "step " + std::to_string(step)},
                   {"cat", "step"},
                   {"ph", "i"},
                   {"s", "p"},
                   {"ts", start_ms * 1e3},
                   {"pid", pid},
                   {"tid", steps_tid},
                   {"args", {{"step", step}}}});
}

}  // namespace

json perfetto_json(const std::vector<RankReport>& ranks) {
  std::vector<json> out;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const std::string process = ranks.size() > 1 ? "rank " + std::to_string(ranks[r].report.rank.value_or(int(r)))
                                                 : "starzero " + ranks[r].data.dir.string();
    append_rank_events(ranks[r], int(r) + 1, process, out);
  }
  json trace = {{"traceEvents", json::array()}, {"displayTimeUnit", "ms"}};
  for (json& event : out) trace["traceEvents"].push_back(std::move(event));
  return trace;
}

void write_perfetto_json(const std::vector<RankReport>& ranks, const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  const fs::path folder = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  if (!fs::is_directory(folder))
    throw std::invalid_argument("--perfetto " + path.string() + ": no such directory " + folder.string());
  if (fs::is_directory(path)) throw std::invalid_argument("--perfetto " + path.string() + ": is a directory");
  if (::access(folder.c_str(), W_OK) != 0)
    throw std::invalid_argument("--perfetto " + path.string() + ": cannot write in " + folder.string() + ": " +
                                std::generic_category().message(errno));
  const json trace = perfetto_json(ranks);
  try {
    write_file_atomically(path, [&](std::ostream& out) { out << trace.dump() << '\n'; });
  } catch (const std::system_error& e) {
    // A read-only file system, or permissions access() does not see: the output cannot be
    // written there, which is bad input. A full disk is not.
    const int code = e.code().value();
    if (code == EACCES || code == EPERM || code == EROFS || code == ENOENT || code == ENOTDIR || code == EISDIR)
      throw std::invalid_argument("--perfetto " + path.string() + ": " + e.what());
    throw;
  }
}

}  // namespace starzero::profile
