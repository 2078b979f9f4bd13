#include "runtime/priorities.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace starzero {

// ---- StepGraph ------------------------------------------------------------------------------

void StepGraph::conflicts(const Accesses& a, bool writes, std::vector<std::size_t>& into) const {
  if (a.writer) into.push_back(*a.writer);
  if (writes) into.insert(into.end(), a.readers.begin(), a.readers.end());
}

void StepGraph::note(Accesses& a, std::size_t task, bool writes) {
  if (writes) {
    a.writer = task;
    a.readers.clear();
  } else {
    a.readers.push_back(task);
  }
}

std::size_t StepGraph::add(const SubmittedTask& task) {
  const std::size_t index = tasks_.size();
  std::vector<std::size_t> preds;
  for (std::size_t b = 0; b < task.handles.size(); ++b) {
    const starpu_data_handle_t h = task.handles[b];
    const starpu_data_access_mode mode = task.modes[b];
    if ((mode & (STARPU_RW | STARPU_REDUX)) == 0) continue;  // scratch buffers carry no data
    const bool writes = (mode & (STARPU_W | STARPU_REDUX)) != 0;
    Accesses& own = accesses_[h];
    conflicts(own, writes, preds);
    // A piece: after the last writer of the handle it is a piece of (and its readers, if it
    // writes), and of that one's whole in turn (a block of columns of a tile). Sibling pieces keep
    // their own histories, so tiles of one tensor do not wait for each other.
    for (auto whole = whole_of_.find(h); whole != whole_of_.end(); whole = whole_of_.find(whole->second))
      conflicts(accesses_[whole->second], writes, preds);
    // A handle with pieces (the whole of a split tensor, or a tile split again): after every
    // piece's accesses, their pieces' too, and each piece after it.
    const auto visit_pieces = [&](const auto& self, starpu_data_handle_t of) -> void {
      const auto pieces = pieces_of_.find(of);
      if (pieces == pieces_of_.end()) return;
      for (const starpu_data_handle_t p : pieces->second) {
        Accesses& piece = accesses_[p];
        conflicts(piece, writes, preds);
        note(piece, index, writes);
        self(self, p);
      }
    };
    visit_pieces(visit_pieces, h);
    note(own, index, writes);
  }
  std::sort(preds.begin(), preds.end());
  preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
  tasks_.push_back({task.expected_us, std::move(preds)});
  return index;
}

void StepGraph::add_piece(starpu_data_handle_t piece, starpu_data_handle_t whole) {
  whole_of_[piece] = whole;
  pieces_of_[whole].push_back(piece);
}

void StepGraph::forget_pieces(starpu_data_handle_t whole) {
  const auto pieces = pieces_of_.find(whole);
  if (pieces == pieces_of_.end()) return;
  for (const starpu_data_handle_t p : pieces->second) {
    whole_of_.erase(p);
    accesses_.erase(p);
  }
  pieces_of_.erase(pieces);
}

std::vector<double> StepGraph::upward_ranks() const {
  // Submission order is a topological order: predecessors always come first.
  std::vector<double> rank(tasks_.size(), 0.0);
  for (std::size_t i = tasks_.size(); i-- > 0;) {
    rank[i] += tasks_[i].expected_us;
    for (std::size_t p : tasks_[i].predecessors) rank[p] = std::max(rank[p], rank[i]);
  }
  return rank;
}

void StepGraph::clear() {
  tasks_.clear();
  accesses_.clear();
}

// ---- TaskPriorities ---------------------------------------------------------------------------

TaskPriorities& TaskPriorities::instance() {
  static TaskPriorities priorities;
  return priorities;
}

void TaskPriorities::configure(PriorityScheme scheme) {
  const std::lock_guard lock(mutex_);
  scheme_ = scheme;
  in_step_ = false;
  graph_.clear();
  keys_.clear();
  occurrences_.clear();
  ranks_.clear();
  largest_rank_us_ = 0;
}

std::string TaskPriorities::key(std::string_view name, int occurrence) {
  return std::string(name) + "#" + std::to_string(occurrence);
}

int TaskPriorities::prioritise(const SubmittedTask& task) {
  if (scheme_ == PriorityScheme::none) return 0;
  const std::lock_guard lock(mutex_);
  if (!in_step_) return 0;  // evaluation, sampling, start-up: no step to rank them in
  const std::string name(task.name);
  std::string k = key(name, occurrences_[name]++);
  graph_.add(task);
  const auto known = ranks_.find(k);
  keys_.push_back(std::move(k));
  return known == ranks_.end() ? 0 : to_priority(known->second, largest_rank_us_);
}

void TaskPriorities::add_piece(starpu_data_handle_t piece, starpu_data_handle_t whole) {
  const std::lock_guard lock(mutex_);
  graph_.add_piece(piece, whole);
}

void TaskPriorities::forget_pieces(starpu_data_handle_t whole) {
  const std::lock_guard lock(mutex_);
  graph_.forget_pieces(whole);
}

void TaskPriorities::begin_step() {
  const std::lock_guard lock(mutex_);
  if (scheme_ == PriorityScheme::none) return;
  in_step_ = true;
  graph_.clear();
  keys_.clear();
  occurrences_.clear();
}

void TaskPriorities::end_step() {
  const std::lock_guard lock(mutex_);
  if (scheme_ == PriorityScheme::none || !in_step_) return;
  in_step_ = false;
  const std::vector<double> ranks = graph_.upward_ranks();
  ranks_.clear();
  largest_rank_us_ = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    ranks_[keys_[i]] = ranks[i];
    largest_rank_us_ = std::max(largest_rank_us_, ranks[i]);
  }
  graph_.clear();
}

std::optional<double> TaskPriorities::rank_us(std::string_view name, int occurrence) const {
  const std::lock_guard lock(mutex_);
  const auto found = ranks_.find(key(name, occurrence));
  if (found == ranks_.end()) return std::nullopt;
  return found->second;
}

int TaskPriorities::to_priority(double rank_us, double largest_rank_us) {
  const long long lowest = starpu_sched_get_min_priority();
  const long long highest = starpu_sched_get_max_priority();
  if (highest <= lowest) return int(lowest);
  // Ranks in whole µs fit any range of at least 1e7 (10 s of critical path); a narrower range
  // (heteroprio's buckets) gets the ranks scaled onto it.
  if (highest - lowest >= 10'000'000) return int(std::clamp<long long>(std::llround(rank_us), lowest, highest));
  if (largest_rank_us <= 0) return int(lowest);
  const double scaled = std::floor(rank_us / largest_rank_us * double(highest - lowest + 1));
  return int(std::clamp<long long>(lowest + (long long)scaled, lowest, highest));
}

// ---- expected durations ---------------------------------------------------------------------

double roofline_us(double flops, double bytes) {
  // One core of a current server: ~30 GFLOP/s in SGEMM, ~10 GB/s of memory traffic. Only
  // the relative sizes of tasks matter to the ranks until the performance models calibrate.
  constexpr double flops_per_us = 30e3, bytes_per_us = 10e3;
  return std::max(flops / flops_per_us, bytes / bytes_per_us);
}

double expected_task_us(starpu_task* task, double fallback_us) {
  if (!task->cl || !task->cl->model) return fallback_us;
  double best = std::numeric_limits<double>::infinity();
  const unsigned workers = starpu_worker_get_count();
  // One query per kind of worker (all CPU workers share a perf arch, each GPU has its own).
  std::vector<starpu_perfmodel_arch*> seen;
  for (unsigned w = 0; w < workers; ++w) {
    if (!starpu_worker_can_execute_task(w, task, 0)) continue;
    starpu_perfmodel_arch* arch = starpu_worker_get_perf_archtype(int(w), STARPU_NMAX_SCHED_CTXS);
    if (std::find(seen.begin(), seen.end(), arch) != seen.end()) continue;
    seen.push_back(arch);
    const double us = starpu_task_expected_length(task, arch, 0);
    if (std::isfinite(us) && us >= 0) best = std::min(best, us);
  }
  return std::isfinite(best) ? best : fallback_us;
}

}  // namespace starzero
