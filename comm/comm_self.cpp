// SelfComm: one rank, so every collective is a copy (or nothing) and no byte is sent.
// memmove, not memcpy: in-place use (shard aliasing full) is allowed.
#include <cstring>

#include "comm/comm.hpp"

namespace starzero {

namespace {

void copy_elements(void* destination, const void* source, std::size_t count, DType dtype) {
  if (destination != source && count > 0) {
    std::memmove(destination, source, count * dtype_size(dtype));
  }
}

}  // namespace

std::uint64_t SelfComm::do_all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* /*stream*/) {
  copy_elements(full, shard, count, dtype);
  return 0;
}

std::uint64_t SelfComm::do_reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype,
                                          void* /*stream*/) {
  copy_elements(shard, full, count, dtype);
  return 0;
}

std::uint64_t SelfComm::do_all_reduce(void* /*data*/, std::size_t /*count*/, DType /*dtype*/, void* /*stream*/) {
  return 0;
}

std::uint64_t SelfComm::do_broadcast(void* /*data*/, std::size_t /*count*/, DType /*dtype*/, int /*root*/,
                                     void* /*stream*/) {
  return 0;
}

}  // namespace starzero
