// Communicator base: argument checks, byte/call counters, the factory and the ring-volume
// formulas shared by the MPI and NCCL communicators.
#include "comm/comm.hpp"

#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace starzero {

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_gather: return "all_gather";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::broadcast: return "broadcast";
    case CommOp::barrier: return "barrier";
  }
  return "unknown";
}

std::uint64_t CommStats::total_bytes_sent() const {
  std::uint64_t total = 0;
  for (const CommOpStats& op : ops) total += op.bytes_sent;
  return total;
}

std::uint64_t CommStats::total_calls() const {
  std::uint64_t total = 0;
  for (const CommOpStats& op : ops) total += op.calls;
  return total;
}

namespace {

void require_buffer(const void* buffer, std::size_t count, const std::string& operation, const char* what) {
  if (buffer == nullptr && count > 0) {
    throw std::invalid_argument("Communicator::" + operation + ": " + what + " is null but count is " +
                                std::to_string(count));
  }
}

// Collectives move and sum floating-point tensors only (token ids never cross ranks).
void require_float(DType dtype, const std::string& operation) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    throw std::invalid_argument("Communicator::" + operation + ": dtype " + std::string(dtype_name(dtype)) +
                                " is not supported (fp32 or bf16)");
  }
}

// A buffer argument of a collective, with its name for the error message.
struct NamedBuffer {
  const char* name;
  const void* buffer;
};

// The checks of every collective: a floating-point dtype, then no null buffer unless count is 0.
void require_arguments(CommOp op, DType dtype, std::size_t count, std::initializer_list<NamedBuffer> buffers) {
  const std::string operation(comm_op_name(op));
  require_float(dtype, operation);
  for (const NamedBuffer& b : buffers) require_buffer(b.buffer, count, operation, b.name);
}

}  // namespace

std::size_t Communicator::shard_count(std::size_t count) const {
  return starzero::shard_count(count, static_cast<std::size_t>(size()));
}

void Communicator::all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* stream) {
  require_arguments(CommOp::all_gather, dtype, count, {{"shard", shard}, {"full", full}});
  record(CommOp::all_gather, do_all_gather(shard, full, count, dtype, stream));
}

void Communicator::reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype, void* stream) {
  require_arguments(CommOp::reduce_scatter, dtype, count, {{"full", full}, {"shard", shard}});
  record(CommOp::reduce_scatter, do_reduce_scatter(full, shard, count, dtype, stream));
}

void Communicator::all_reduce(void* data, std::size_t count, DType dtype, void* stream) {
  require_arguments(CommOp::all_reduce, dtype, count, {{"data", data}});
  record(CommOp::all_reduce, do_all_reduce(data, count, dtype, stream));
}

void Communicator::broadcast(void* data, std::size_t count, DType dtype, int root, void* stream) {
  require_arguments(CommOp::broadcast, dtype, count, {{"data", data}});
  if (root < 0 || root >= size()) {
    throw std::invalid_argument("Communicator::broadcast: root " + std::to_string(root) +
                                " is not a rank of a communicator of size " + std::to_string(size()));
  }
  record(CommOp::broadcast, do_broadcast(data, count, dtype, root, stream));
}

void Communicator::barrier() {
  do_barrier();
  record(CommOp::barrier, 0);
}

CommStats Communicator::stats() const {
  CommStats snapshot;
  for (std::size_t op = 0; op < kCommOpCount; ++op) {
    snapshot.ops[op].bytes_sent = counters_[op].bytes_sent.load(std::memory_order_relaxed);
    snapshot.ops[op].calls = counters_[op].calls.load(std::memory_order_relaxed);
  }
  return snapshot;
}

void Communicator::reset_stats() {
  for (AtomicCounters& counter : counters_) {
    counter.bytes_sent.store(0, std::memory_order_relaxed);
    counter.calls.store(0, std::memory_order_relaxed);
  }
}

void Communicator::record(CommOp op, std::uint64_t bytes_sent) {
  AtomicCounters& counter = counters_[static_cast<std::size_t>(op)];
  counter.bytes_sent.fetch_add(bytes_sent, std::memory_order_relaxed);
  counter.calls.fetch_add(1, std::memory_order_relaxed);
}

#if STARZERO_WITH_CUDA
std::unique_ptr<Communicator> make_nccl_communicator();  // comm_nccl.cpp
#endif

std::unique_ptr<Communicator> make_communicator(std::string_view kind) {
  if (kind == "self") return std::make_unique<SelfComm>();
  if (kind == "mpi") return std::make_unique<MpiComm>();
  if (kind == "nccl") {
#if STARZERO_WITH_CUDA
    return make_nccl_communicator();
#else
    throw std::runtime_error(
        "communicator \"nccl\": NCCL support was not compiled in "
        "(configure with CUDA: -DSTARZERO_CUDA=ON)");
#endif
  }
  throw std::runtime_error("unknown communicator \"" + std::string(kind) + "\" (expected self, mpi or nccl)");
}

namespace detail {

std::uint64_t ring_all_reduce_elements_sent(std::size_t count, int size, int rank) {
  if (size <= 1) return 0;
  const auto ranks = static_cast<std::size_t>(size);
  const std::size_t block = (count + ranks - 1) / ranks;
  auto block_length = [&](int b) {
    const std::size_t begin = std::min(count, static_cast<std::size_t>(b) * block);
    return std::min(count, begin + block) - begin;
  };
  return (count - block_length(rank)) + (count - block_length((rank + 1) % size));
}

std::uint64_t chain_broadcast_elements_sent(std::size_t count, int size, int rank, int root) {
  const int position = ((rank - root) % size + size) % size;
  return position == size - 1 ? 0 : count;
}

}  // namespace detail

}  // namespace starzero
