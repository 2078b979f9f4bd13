// SimRingComm: the collectives of ranks that exist only in a simulation. Nothing is sent or
// copied; each call returns the bytes rank 0 sends in the ring algorithm NCCL and MpiComm use.
#include <stdexcept>
#include <string>

#include "comm/comm.hpp"

namespace starzero {

SimRingComm::SimRingComm(int size, bool on_device) : size_(size), on_device_(on_device) {
  if (size < 1) throw std::invalid_argument("SimRingComm: " + std::to_string(size) + " ranks");
}

void SimRingComm::count_submitted(CommOp op, std::size_t count, DType dtype) {
  switch (op) {
    case CommOp::all_gather: record(op, do_all_gather(nullptr, nullptr, count, dtype, nullptr)); break;
    case CommOp::reduce_scatter: record(op, do_reduce_scatter(nullptr, nullptr, count, dtype, nullptr)); break;
    case CommOp::all_reduce: record(op, do_all_reduce(nullptr, count, dtype, nullptr)); break;
    case CommOp::broadcast: record(op, do_broadcast(nullptr, count, dtype, 0, nullptr)); break;
    case CommOp::barrier: record(op, 0); break;
  }
}

std::uint64_t SimRingComm::do_all_gather(const void* /*shard*/, void* /*full*/, std::size_t count, DType dtype,
                                               void* /*stream*/) {
  return std::uint64_t(size_ - 1) * shard_count(count) * dtype_size(dtype);
}

std::uint64_t SimRingComm::do_reduce_scatter(const void* /*full*/, void* /*shard*/, std::size_t count,
                                                   DType dtype, void* /*stream*/) {
  return std::uint64_t(size_ - 1) * shard_count(count) * dtype_size(dtype);
}

std::uint64_t SimRingComm::do_all_reduce(void* /*data*/, std::size_t count, DType dtype, void* /*stream*/) {
  return detail::ring_all_reduce_elements_sent(count, size_, 0) * dtype_size(dtype);
}

std::uint64_t SimRingComm::do_broadcast(void* /*data*/, std::size_t count, DType dtype, int root,
                                              void* /*stream*/) {
  return detail::chain_broadcast_elements_sent(count, size_, 0, root) * dtype_size(dtype);
}

}  // namespace starzero
