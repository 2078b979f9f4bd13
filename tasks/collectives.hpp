#pragma once
// Collectives as StarPU tasks (docs/architecture.md, "The order token"). Every collective task
// also takes the communicator's order token in RW mode, so StarPU runs them in submission order;
// every rank submits them in the same order, so no rank can wait on a collective another rank
// has not reached. The MPI communicator runs in a CPU task on host buffers; NCCL runs in a CUDA
// task on the worker's stream.
#include <starpu.h>

#include <string>

#include "comm/comm.hpp"

namespace starzero::tasks {

// The order token: one per communicator, registered for the communicator's lifetime.
class CollectiveOrder {
 public:
  explicit CollectiveOrder(Communicator& comm);
  ~CollectiveOrder();
  CollectiveOrder(const CollectiveOrder&) = delete;
  CollectiveOrder& operator=(const CollectiveOrder&) = delete;
  Communicator& comm() const { return comm_; }
  starpu_data_handle_t token() const { return token_; }

 private:
  Communicator& comm_;
  int token_value_ = 0;
  starpu_data_handle_t token_ = nullptr;
};

// full (count padded to comm.size() · shard) <- shards of every rank.
void submit_all_gather(const CollectiveOrder& order, starpu_data_handle_t shard, starpu_data_handle_t full,
                       std::size_t count, DType dtype, const std::string& name);
// shard <- sum over ranks of this rank's block of full.
void submit_reduce_scatter(const CollectiveOrder& order, starpu_data_handle_t full, starpu_data_handle_t shard,
                           std::size_t count, DType dtype, const std::string& name);
// In place on a full buffer whose block rank·s is this rank's shard (ZeRO-1/2: the parameters
// AdamW updated in place, the gradient reduced into its own block).
void submit_all_gather_in_place(const CollectiveOrder& order, starpu_data_handle_t full, std::size_t count, DType dtype,
                                const std::string& name);
void submit_reduce_scatter_in_place(const CollectiveOrder& order, starpu_data_handle_t full, std::size_t count,
                                    DType dtype, const std::string& name);
// data <- sum over ranks (in place, whole vector).
void submit_all_reduce(const CollectiveOrder& order, starpu_data_handle_t data, DType dtype, const std::string& name);

}  // namespace starzero::tasks
