#pragma once
// The data-parallel ranks of a run: mpirun's world (one MpiComm for the engine's collective
// tasks, one for this thread's own reductions), or a single rank without MPI. This is the one
// place outside the communicators that talks to MPI: programs gather, wait and abort through it.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.hpp"

namespace starzero {

class DataParallelRanks {
 public:
  // Ranks under mpirun (from its environment), else 1; MPI starts only with several.
  static int world_size();
  // This process's rank under mpirun (from its environment, before MPI starts), else 0.
  static int world_rank();
  DataParallelRanks();
  // starzero-sim's --sim-ranks N: this process is rank 0 of N ranks that exist only in the
  // simulation; no MPI. Its collectives (use_sim_collectives) move nothing and last what a
  // ring over the platform's link would; values reduced over ranks are this rank's times N (sum)
  // or its own (average, from_leader), and gather_to_leader repeats its own N times: the ranks
  // are taken to be alike.
  static DataParallelRanks in_sim(int ranks);
  DataParallelRanks(DataParallelRanks&&) = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool leader() const { return rank_ == 0; }
  // This rank among the ranks on its machine (to pick a GPU), and how many there are.
  int local_rank() const { return control_ ? control_->node_local_rank() : 0; }
  int local_size() const { return control_ ? control_->node_local_size() : 1; }
  // The engine's collectives: NCCL after use_nccl, else MPI (nullptr with one rank).
  Communicator* engine_comm() const;
  // MPI over the same ranks, for collectives on host buffers outside tasks (nullptr: one rank).
  Communicator* host_comm() const { return engine_.get(); }
  bool uses_nccl() const { return nccl_ != nullptr && !sim_; }
  // Switches the engine's collectives to NCCL on `cuda_device` (collective: every rank calls it).
  // Throws without CUDA support in this build.
  void use_nccl(int cuda_device);
  // Simulated ranks: their collectives, as NCCL's on the GPUs (on_device) or MPI's on host buffers.
  void use_sim_collectives(bool on_device);
  bool is_sim() const { return sim_; }

  // Over all ranks, on this thread's own communicator (every rank gets the result).
  void sum(std::vector<float>& values) const;
  double average(double value) const;
  // Every rank's `mine` (all the same length), concatenated in rank order, on the leader; the
  // other ranks get an empty vector. Collective.
  std::vector<std::int64_t> gather_to_leader(const std::vector<std::int64_t>& mine) const;
  // The leader's `value` on every rank. Collective.
  std::int64_t from_leader(std::int64_t value) const;
  // Returns once every rank has called it.
  void barrier() const;
  // Ends every rank of the job now (one rank's error would leave the others waiting in a
  // collective forever) with `exit_code`. With one rank it returns: the caller unwinds.
  void abort(int exit_code) const;

  // Where this rank's trace goes inside a --trace folder: the folder itself with one rank,
  // <dir>/rank<r> with several.
  std::filesystem::path trace_dir(const std::filesystem::path& dir) const;

 private:
  std::unique_ptr<MpiComm> engine_, control_;
  std::unique_ptr<Communicator> nccl_;  // or the simulated ranks' communicator
  int rank_ = 0, size_ = 1;
  bool sim_ = false;
};

}  // namespace starzero
