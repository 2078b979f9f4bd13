#include "comm/ranks.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace starzero {

int DataParallelRanks::world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(name)) return std::max(1, std::atoi(v));
  return 1;
}

int DataParallelRanks::world_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* v = std::getenv(name)) return std::max(0, std::atoi(v));
  return 0;
}

// The MPI communicators exist exactly when the ranks are mpirun's (several, not simulated): every
// collective below goes through MPI only then.
DataParallelRanks::DataParallelRanks() {
  if (world_size() <= 1) return;
  engine_ = std::make_unique<MpiComm>();
  control_ = std::make_unique<MpiComm>();
  rank_ = engine_->rank();
  size_ = engine_->size();
}

DataParallelRanks DataParallelRanks::in_sim(int ranks) {
  if (ranks < 1) throw std::invalid_argument("simulated ranks: " + std::to_string(ranks));
  DataParallelRanks in_sim;
  in_sim.size_ = ranks;
  in_sim.sim_ = true;
  return in_sim;
}

void DataParallelRanks::use_sim_collectives(bool on_device) {
  if (sim_ && size_ > 1) nccl_ = std::make_unique<SimRingComm>(size_, on_device);
}

Communicator* DataParallelRanks::engine_comm() const {
  return nccl_ ? nccl_.get() : static_cast<Communicator*>(engine_.get());
}

void DataParallelRanks::use_nccl([[maybe_unused]] int cuda_device) {
  if (size_ <= 1 || sim_) return;  // one rank has no collectives
#if STARZERO_WITH_CUDA
  nccl_ = std::make_unique<NcclComm>(std::make_shared<MpiComm>(), cuda_device);
#else
  throw std::runtime_error("NCCL collectives need a build with CUDA");
#endif
}

void DataParallelRanks::sum(std::vector<float>& values) const {
  if (sim_)
    for (float& v : values) v *= float(size_);
  else if (control_)
    control_->all_reduce(values.data(), values.size(), DType::f32);
}

double DataParallelRanks::average(double value) const {
  std::vector<float> v{float(value)};
  sum(v);
  return control_ ? double(v[0]) / size_ : value;
}

std::vector<std::int64_t> DataParallelRanks::gather_to_leader(const std::vector<std::int64_t>& mine) const {
  if (size_ == 1) return mine;
  if (sim_) {
    std::vector<std::int64_t> all;
    for (int r = 0; r < size_; ++r) all.insert(all.end(), mine.begin(), mine.end());
    return all;
  }
  std::vector<std::int64_t> all(leader() ? mine.size() * std::size_t(size_) : 0);
  MPI_Gather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, 0,
             control_->native());
  return all;
}

std::int64_t DataParallelRanks::from_leader(std::int64_t value) const {
  if (control_) MPI_Bcast(&value, 1, MPI_INT64_T, 0, control_->native());
  return value;
}

void DataParallelRanks::barrier() const {
  if (control_) MPI_Barrier(control_->native());
}

void DataParallelRanks::abort(int exit_code) const {
  if (control_) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

std::filesystem::path DataParallelRanks::trace_dir(const std::filesystem::path& dir) const {
  return control_ ? dir / ("rank" + std::to_string(rank_)) : dir;
}

}  // namespace starzero
