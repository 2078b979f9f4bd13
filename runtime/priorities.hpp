#pragma once
// Task priorities (`--priorities`): which scheme gives every submitted task its STARPU_PRIORITY.
// The schemes, what they compute and which StarPU policies read priorities at all:
// docs/scheduling.md.
//
//   none           every task has priority 0 (StarPU's default).
//   critical-path  a task's upward rank: the longest chain of expected task durations from the
//                  task to the end of its training step, through the dependencies that the
//                  data accesses imply (StarPU's sequential consistency). Expected durations come
//                  from the codelets' history-based performance models (the fastest worker kind
//                  that can run the task), else from a roofline estimate of the declared FLOPs
//                  and bytes. Each step's graph is recorded as it is submitted; its ranks are
//                  the priorities of the same tasks (same name, same occurrence in the step) in
//                  the following steps, so the first step runs at priority 0.
#include <starpu.h>

#include <cstddef>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace starzero {

enum class PriorityScheme { none, critical_path };

const char* priority_scheme_name(PriorityScheme scheme);
// "none" or "critical-path"; nullopt for anything else.
std::optional<PriorityScheme> parse_priority_scheme(std::string_view text);
// "none, critical-path": for messages and --help.
std::string priority_scheme_names();

// One task as the critical-path scheme sees it: its expected duration and its buffers.
struct SubmittedTask {
  std::string_view name;
  double expected_us = 0;
  std::span<const starpu_data_handle_t> handles;
  std::span<const starpu_data_access_mode> modes;
};

// The DAG of one step, built from data accesses in submission order, and its upward ranks.
// Pieces of a split tensor (Tensor::split) are related to their whole handle: an access to a
// piece conflicts with accesses to the whole, not with its sibling pieces. A piece may have pieces
// of its own (Tensor::split_columns): the relation holds at every level.
class StepGraph {
 public:
  // Records a task; returns its index (submission order within the step).
  std::size_t add(const SubmittedTask& task);
  void add_piece(starpu_data_handle_t piece, starpu_data_handle_t whole);
  // The whole handle's pieces are gone (StarPU may reuse their addresses).
  void forget_pieces(starpu_data_handle_t whole);
  // The tasks index `i` depends on (direct predecessors, no duplicates).
  const std::vector<std::size_t>& predecessors(std::size_t i) const { return tasks_[i].predecessors; }
  std::size_t size() const { return tasks_.size(); }
  // Longest path from each task to the end of the step, its own duration included (µs).
  std::vector<double> upward_ranks() const;
  // Forgets the tasks and the access history (piece relations stay).
  void clear();

 private:
  struct Task {
    double expected_us;
    std::vector<std::size_t> predecessors;
  };
  // Who last wrote a handle and who read it since.
  struct Accesses {
    std::optional<std::size_t> writer;
    std::vector<std::size_t> readers;
  };
  void conflicts(const Accesses& a, bool writes, std::vector<std::size_t>& into) const;
  static void note(Accesses& a, std::size_t task, bool writes);

  std::vector<Task> tasks_;
  std::unordered_map<starpu_data_handle_t, Accesses> accesses_;
  std::unordered_map<starpu_data_handle_t, starpu_data_handle_t> whole_of_;
  std::unordered_map<starpu_data_handle_t, std::vector<starpu_data_handle_t>> pieces_of_;
};

// The process's priority scheme. Session sets it; submit() (runtime/codelet.hpp) asks it for
// each task's priority; StepMark (runtime/session.hpp) opens and closes steps.
class TaskPriorities {
 public:
  static TaskPriorities& instance();

  void configure(PriorityScheme scheme);
  PriorityScheme scheme() const { return scheme_; }
  bool records() const { return scheme_ == PriorityScheme::critical_path; }

  // The priority of the task about to be submitted, and (critical-path, inside a step) records it.
  int prioritise(const SubmittedTask& task);
  void add_piece(starpu_data_handle_t piece, starpu_data_handle_t whole);
  void forget_pieces(starpu_data_handle_t whole);
  void begin_step();
  // Computes the step's ranks; they become the next step's priorities.
  void end_step();

  // The rank (µs) the next step gives the `occurrence`-th task named `name`; nullopt if unknown.
  std::optional<double> rank_us(std::string_view name, int occurrence = 0) const;
  // Maps a rank to the scheduler's priority range (starpu_sched_get_min/max_priority): ranks
  // in µs where the range is wide (dmda, prio, lws, modular-*), else scaled linearly onto it.
  static int to_priority(double rank_us, double largest_rank_us);

 private:
  static std::string key(std::string_view name, int occurrence);

  mutable std::mutex mutex_;
  PriorityScheme scheme_ = PriorityScheme::none;
  bool in_step_ = false;
  StepGraph graph_;
  std::vector<std::string> keys_;                     // the step's tasks, by key
  std::unordered_map<std::string, int> occurrences_;  // name -> tasks so named so far in the step
  std::unordered_map<std::string, double> ranks_;     // key -> rank (µs), from the last step
  double largest_rank_us_ = 0;
};

// The expected duration (µs) of a built task on the fastest kind of worker that can run it,
// from its performance model; `roofline_us` where no model is calibrated for it.
double expected_task_us(starpu_task* task, double roofline_us);
// FLOPs and bytes turned into time at a nominal CPU core's rate (docs/scheduling.md).
double roofline_us(double flops, double bytes);

}  // namespace starzero
