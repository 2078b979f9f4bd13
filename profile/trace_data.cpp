#include "profile/trace_data.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "runtime/files.hpp"

namespace starzero::profile {
namespace {

// ---- lines and numbers -------------------------------------------------------------------------

// A text file read line by line, counting lines. A last line without its newline means the
// file was cut while it was written: that is an error, not a short line.
class TextLines {
 public:
  explicit TextLines(std::filesystem::path path) : path_(std::move(path)), in_(path_) {
    if (!std::filesystem::is_regular_file(path_)) throw_format_error(path_, "no such file");
    if (!in_) throw_format_error(path_, "cannot open");
  }
  bool next(std::string& line) {
    if (!std::getline(in_, line)) {
      if (in_.bad()) throw_format_error(path_, "read error after line " + std::to_string(number_));
      return false;
    }
    ++number_;
    if (in_.eof()) fail("truncated: the last line has no newline");
    return true;
  }
  std::size_t number() const { return number_; }
  const std::filesystem::path& path() const { return path_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw_format_error(path_, "line " + std::to_string(number_) + ": " + what);
  }

 private:
  std::filesystem::path path_;
  std::ifstream in_;
  std::size_t number_ = 0;
};

template <class Number>
std::optional<Number> parse_number(std::string_view text) {
  Number value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

template <class Number>
Number number_field(const TextLines& lines, std::string_view key, std::string_view text) {
  const std::optional<Number> value = parse_number<Number>(text);
  if (!value) lines.fail(std::string(key) + ": '" + std::string(text.substr(0, 40)) + "' is not a number");
  return *value;
}

// The space-separated words of `text`.
std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t') ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

// ---- rec files (tasks.rec, trace.rec): "Key: value" lines, records separated by blank lines ----

struct Field {
  std::string key;
  std::string value;
};

class Record {
 public:
  void clear() { size_ = 0; }
  bool empty() const { return size_ == 0; }
  void add(std::string_view key, std::string_view value) {
    if (size_ == fields_.size()) fields_.emplace_back();
    fields_[size_].key.assign(key);
    fields_[size_].value.assign(value);
    ++size_;
  }
  const std::string* find(std::string_view key) const {
    for (std::size_t i = 0; i < size_; ++i)
      if (fields_[i].key == key) return &fields_[i].value;
    return nullptr;
  }

 private:
  std::vector<Field> fields_;  // reused from record to record: no allocation per line
  std::size_t size_ = 0;
};

// Calls on_record(record, lines) for each record; '#' lines are comments. StarPU ends every
// record with a blank line, so a file that ends inside a record was cut.
template <class OnRecord>
void for_each_record(const std::filesystem::path& path, OnRecord on_record) {
  TextLines lines(path);
  Record record;
  std::string line;
  while (lines.next(line)) {
    if (line.empty()) {
      if (!record.empty()) on_record(record, lines);
      record.clear();
      continue;
    }
    if (line.front() == '#') continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) lines.fail("expected 'Key: value', got '" + line.substr(0, 40) + "'");
    std::string_view value = std::string_view(line).substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    record.add(std::string_view(line).substr(0, colon), value);
  }
  if (!record.empty()) lines.fail("truncated: the last record has no closing blank line");
}

// ---- paje.trace ---------------------------------------------------------------------------------

// The words of a Paje event line; a double-quoted value is one word (quotes dropped).
void split_paje_fields(std::string_view line, std::vector<std::string_view>& fields) {
  fields.clear();
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i >= line.size()) break;
    if (line[i] == '"') {
      const std::size_t close = line.find('"', i + 1);
      const std::size_t end = close == std::string_view::npos ? line.size() : close;
      fields.push_back(line.substr(i + 1, end - i - 1));
      i = end + 1;
      continue;
    }
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    fields.push_back(line.substr(i, j - i));
    i = j;
  }
}

// One %EventDef of the header: its Paje event name and its field names, in order.
struct EventDefinition {
  std::string event;
  std::vector<std::string> fields;
  // The position of `field` in an event line (after the event id), or -1.
  int position(std::string_view field) const {
    for (std::size_t i = 0; i < fields.size(); ++i)
      if (fields[i] == field) return int(i) + 1;
    return -1;
  }
};

struct Container {
  std::string type;  // StarPU's container types: W worker, T thread, Mn memory node, Mm memory manager
  std::string parent;
  std::string name;
};

// The number at the end of a container alias: StarPU names them <prefix>w<worker>,
// <prefix>mn<node>, <prefix>mm<node>.
std::optional<int> trailing_number(std::string_view alias) {
  std::size_t digits = alias.size();
  while (digits > 0 && alias[digits - 1] >= '0' && alias[digits - 1] <= '9') --digits;
  return parse_number<int>(alias.substr(digits));
}

struct OpenLink {
  double start_ms;
  std::string src_alias;
  std::uint64_t bytes;
};

// What read_paje_trace keeps from line to line.
struct PajeReader {
  std::unordered_map<std::string, EventDefinition> definitions;  // by event id
  std::unordered_map<std::string, Container> containers;         // by alias
  std::set<std::string, std::less<>> transfer_link_types;        // link types between memory managers
  std::unordered_map<std::string, OpenLink> open_links;          // by type and key
  std::string defining;                                          // the event id of the %EventDef being read
  PajeTrace trace;
};

// A header line, after its '%': %EventDef NAME ID, a field of the event being defined, %EndEventDef.
void read_header_line(std::string_view header, PajeReader& reader, const TextLines& lines) {
  const std::vector<std::string_view> words = split_words(header);
  if (words.empty()) return;
  if (words[0] == "EventDef") {
    if (words.size() != 3) lines.fail("%EventDef needs a name and an id");
    reader.defining = std::string(words[2]);
    reader.definitions[reader.defining] = {std::string(words[1]), {}};
  } else if (words[0] == "EndEventDef") {
    reader.defining.clear();
  } else if (!reader.defining.empty()) {
    reader.definitions[reader.defining].fields.emplace_back(words[0]);
  }
}

// An event line's fields by their %EventDef names.
struct EventFields {
  const EventDefinition& def;
  const std::vector<std::string_view>& values;  // values[0]: the event id
  const TextLines& lines;
  std::string_view operator()(std::string_view name) const {
    const int at = def.position(name);
    if (at < 0) lines.fail(def.event + " %EventDef lacks the field " + std::string(name));
    return values[std::size_t(at)];
  }
};

// A PajeStartLink or PajeEndLink: a transfer between memory managers when a started one ends.
void read_link_event(const EventFields& field, PajeReader& reader, const TextLines& lines) {
  const std::string_view type = field("Type");
  if (!reader.transfer_link_types.contains(type)) return;  // work stealing, MPI
  const double time_ms = number_field<double>(lines, "Time", field("Time"));
  std::string key = std::string(type) + '\t' + std::string(field("Key"));
  if (field.def.event == "PajeStartLink") {
    const std::uint64_t bytes = number_field<std::uint64_t>(lines, "Value", field("Value"));
    reader.open_links[std::move(key)] = {time_ms, std::string(field("StartContainer")), bytes};
    return;
  }
  const auto open = reader.open_links.find(key);
  if (open == reader.open_links.end()) return;  // StarPU's made-up end of a transfer that never started
  const auto src = reader.containers.find(open->second.src_alias);
  const auto dst = reader.containers.find(std::string(field("EndContainer")));
  if (src == reader.containers.end() || dst == reader.containers.end())
    lines.fail("a transfer between memory nodes that were never created");
  reader.trace.transfers.push_back({trailing_number(open->second.src_alias).value_or(-1),
                                    trailing_number(dst->first).value_or(-1), open->second.start_ms, time_ms,
                                    open->second.bytes, std::string(type)});
  reader.open_links.erase(open);
}

// An event line (split into `fields`): containers, memory use, link types and transfers; other
// events change nothing.
void read_event(const std::vector<std::string_view>& fields, PajeReader& reader, const TextLines& lines) {
  const auto definition = reader.definitions.find(std::string(fields[0]));
  if (definition == reader.definitions.end()) lines.fail("event id " + std::string(fields[0]) + " has no %EventDef");
  const EventDefinition& def = definition->second;
  if (fields.size() != def.fields.size() + 1)
    lines.fail(def.event + ": " + std::to_string(fields.size() - 1) + " fields, its %EventDef has " +
               std::to_string(def.fields.size()));
  const EventFields field{def, fields, lines};
  if (def.event == "PajeCreateContainer") {
    reader.containers[std::string(field("Alias"))] = {std::string(field("Type")), std::string(field("Container")),
                                                      std::string(field("Name"))};
  } else if (def.event == "PajeSetVariable") {
    if (field("Type") != "use") return;
    const auto container = reader.containers.find(std::string(field("Container")));
    if (container == reader.containers.end() || container->second.type != "Mm") return;
    const std::optional<int> node = trailing_number(container->first);
    if (!node) return;
    const double bytes = number_field<double>(lines, "Value", field("Value")) * double(1 << 20);
    double& peak = reader.trace.peak_used_bytes[*node];
    peak = std::max(peak, bytes);
  } else if (def.event == "PajeDefineLinkType") {
    if (field("StartContainerType") == "Mm" && field("EndContainerType") == "Mm")
      reader.transfer_link_types.emplace(field("Alias"));
  } else if (def.event == "PajeStartLink" || def.event == "PajeEndLink") {
    read_link_event(field, reader, lines);
  }
}

// The memory nodes (memory managers) and the workers, with their memory node, among the
// containers; both sorted.
void add_nodes_and_workers(const std::unordered_map<std::string, Container>& containers, PajeTrace& trace,
                           const TextLines& lines) {
  for (const auto& [alias, container] : containers) {
    if (container.type == "Mm") {
      if (const std::optional<int> node = trailing_number(alias)) trace.memory_nodes.push_back(*node);
    } else if (container.type == "W") {
      PajeWorker worker;
      worker.id = trailing_number(alias).value_or(-1);
      if (worker.id < 0) lines.fail("worker container '" + alias + "' has no worker number");
      worker.name = container.name;
      const auto thread = containers.find(container.parent);
      if (thread != containers.end()) {
        const auto node = containers.find(thread->second.parent);
        if (node != containers.end() && node->second.type == "Mn")
          worker.memory_node = trailing_number(node->first).value_or(-1);
      }
      trace.workers.push_back(std::move(worker));
    }
  }
  std::sort(trace.memory_nodes.begin(), trace.memory_nodes.end());
  std::sort(trace.workers.begin(), trace.workers.end(),
            [](const PajeWorker& a, const PajeWorker& b) { return a.id < b.id; });
}

}  // namespace

bool is_overhead_state(std::string_view name, std::string_view category) {
  if (category == "Task") return false;
  static const std::set<std::string_view, std::less<>> not_overhead = {"Overhead", "Executing", "Sleeping",
                                                                       "Idle",     "Nothing",   "End"};
  return !not_overhead.contains(name);
}

std::vector<TaskRecord> read_tasks_rec(const std::filesystem::path& path) {
  std::vector<TaskRecord> tasks;
  std::unordered_set<std::string> job_ids;
  for_each_record(path, [&](const Record& r, const TextLines& lines) {
    TaskRecord task;
    const std::string* job_id = r.find("JobId");
    if (!job_id || job_id->empty()) lines.fail("task record without a JobId");
    task.job_id = *job_id;
    if (!job_ids.insert(task.job_id).second) lines.fail("JobId " + task.job_id + " appears twice");
    if (const std::string* name = r.find("Name"))
      task.name = *name;
    else if (const std::string* model = r.find("Model"))
      task.name = *model;
    else
      task.name = "unnamed";
    if (const std::string* model = r.find("Model")) task.model = *model;
    if (const std::string* deps = r.find("DependsOn"))
      for (std::string_view id : split_words(*deps)) task.depends_on.emplace_back(id);
    if (const std::string* gflop = r.find("GFlop")) {
      const double value = number_field<double>(lines, "GFlop", *gflop);
      if (!(value >= 0) || !std::isfinite(value)) lines.fail("GFlop: '" + gflop->substr(0, 40) + "' is not >= 0");
      task.flops = value * 1e9;
    }
    const std::string* sizes = r.find("Sizes");
    const std::string* modes = r.find("Modes");
    if (sizes && modes) {
      const std::vector<std::string_view> size_words = split_words(*sizes), mode_words = split_words(*modes);
      if (size_words.size() != mode_words.size())
        lines.fail("task " + task.job_id + " (" + task.name + ") has " + std::to_string(size_words.size()) +
                   " Sizes but " + std::to_string(mode_words.size()) + " Modes");
      double bytes = 0;
      for (std::size_t i = 0; i < size_words.size(); ++i) {
        const double accesses = double(std::count(mode_words[i].begin(), mode_words[i].end(), 'R') +
                                       std::count(mode_words[i].begin(), mode_words[i].end(), 'W'));
        bytes += accesses * double(number_field<std::uint64_t>(lines, "Sizes", size_words[i]));
      }
      task.data_bytes = bytes;
    }
    if (const std::string* iteration = r.find("Iteration")) {
      const std::vector<std::string_view> levels = split_words(*iteration);
      if (levels.empty()) lines.fail("Iteration: no value");
      task.step = number_field<long>(lines, "Iteration", levels.front());
    }
    const std::string* start = r.find("StartTime");
    const std::string* end = r.find("EndTime");
    if (start || end) {
      const std::string* worker = r.find("WorkerId");
      if (!start || !end || !worker)
        lines.fail("task " + task.job_id + " (" + task.name + ") ran but lacks its StartTime, EndTime or WorkerId");
      task.start_ms = number_field<double>(lines, "StartTime", *start);
      task.end_ms = number_field<double>(lines, "EndTime", *end);
      task.worker = number_field<int>(lines, "WorkerId", *worker);
      if (task.worker < 0 || task.end_ms < task.start_ms)
        lines.fail("task " + task.job_id + " (" + task.name + "): bad WorkerId or EndTime before StartTime");
    }
    tasks.push_back(std::move(task));
  });
  return tasks;
}

std::map<int, WorkerStateIntervals> read_trace_rec(const std::filesystem::path& path) {
  // Each worker has two state streams: its thread's (T = the thread id) and the worker's own
  // (T = -1: the task, FetchingInput, ...). Each is a Paje state stack: SetState replaces the
  // top, PushState/PopState nest. A state lasts until the stream's next event.
  struct Stream {
    std::vector<std::pair<std::string, bool>> stack;  // state name, is overhead
    double since_ms = 0;
  };
  std::map<std::pair<int, bool>, Stream> streams;  // (worker, thread stream?)
  std::map<int, WorkerStateIntervals> states;
  for_each_record(path, [&](const Record& r, const TextLines& lines) {
    const std::string* event = r.find("E");
    const std::string* worker_text = r.find("W");
    const std::string* time_text = r.find("S");
    if (!event || !worker_text || !time_text) lines.fail("state record without its E, W or S field");
    const int worker = number_field<int>(lines, "W", *worker_text);
    const double time_ms = number_field<double>(lines, "S", *time_text);
    if (worker < 0) return;  // an application thread
    const std::string* thread = r.find("T");
    Stream& stream = streams[{worker, thread && *thread != "-1"}];
    WorkerStateIntervals& out = states[worker];
    if (!stream.stack.empty() && time_ms > stream.since_ms) {
      const auto& [state, overhead] = stream.stack.back();
      if (overhead) out.overhead.push_back({stream.since_ms, time_ms});
      if (state == "Sleeping") out.sleeping.push_back({stream.since_ms, time_ms});
    }
    stream.since_ms = time_ms;
    const std::string* name = r.find("N");
    const std::string* category = r.find("C");
    const auto state = [&] {
      if (!name) lines.fail(*event + " without a state name (N)");
      return std::pair<std::string, bool>(*name, is_overhead_state(*name, category ? *category : ""));
    };
    if (*event == "SetState") {
      if (stream.stack.empty())
        stream.stack.push_back(state());
      else
        stream.stack.back() = state();
    } else if (*event == "PushState") {
      stream.stack.push_back(state());
    } else if (*event == "PopState") {
      if (!stream.stack.empty()) stream.stack.pop_back();
    }  // other events (ProgEvent, ...) change no state
  });
  return states;
}

PajeTrace read_paje_trace(const std::filesystem::path& path) {
  TextLines lines(path);
  PajeReader reader;
  std::string line;
  std::vector<std::string_view> fields;
  while (lines.next(line)) {
    if (!line.empty() && line.front() == '%') {
      read_header_line(std::string_view(line).substr(1), reader, lines);
      continue;
    }
    split_paje_fields(line, fields);
    if (!fields.empty()) read_event(fields, reader, lines);
  }
  add_nodes_and_workers(reader.containers, reader.trace, lines);
  if (reader.definitions.empty()) throw_format_error(path, "not a Paje trace (no %EventDef header)");
  return std::move(reader.trace);
}

std::map<std::string, double> read_executed_durations(const std::filesystem::path& path) {
  std::map<std::string, double> ms_by_job;
  if (!std::filesystem::exists(path)) return ms_by_job;
  for_each_record(path, [&](const Record& r, TextLines& lines) {
    const std::string* job = r.find("JobId");
    const std::string* us = r.find("ExecutedUs");
    if (!job || job->empty() || !us) lines.fail("a record needs JobId and ExecutedUs");
    const std::optional<double> value = parse_number<double>(*us);
    if (!value || !(*value >= 0) || !std::isfinite(*value)) lines.fail("ExecutedUs is not a duration: '" + *us + "'");
    if (!ms_by_job.emplace(*job, *value / 1e3).second) lines.fail("JobId " + *job + " appears twice");
  });
  return ms_by_job;
}

TraceData read_trace_data(const std::filesystem::path& dir) {
  TraceData data;
  data.dir = dir;
  data.tasks = read_tasks_rec(dir / "tasks.rec");
  data.worker_states = read_trace_rec(dir / "trace.rec");
  data.paje = read_paje_trace(dir / "paje.trace");
  data.executed_ms = read_executed_durations(dir / "durations.rec");
  return data;
}

}  // namespace starzero::profile
