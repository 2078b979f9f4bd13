// NcclComm: NCCL collectives on the caller's CUDA stream, bootstrapped over an MpiComm.
//
// Byte counters: NCCL does not report what it sends, so each call adds the volume of NCCL's ring
// algorithm for this rank (the same formulas MpiComm measures): all-gather and reduce-scatter
// (N-1) * shard bytes; all-reduce (count - chunk(r)) + (count - chunk(r+1)) elements with chunks
// of ceil(count/N), summing to 2 (N-1) count over the ranks; broadcast count for every rank of
// the chain but the last. These are formulas, not measurements (NCCL may pick a tree algorithm,
// or NVLS/CollNet, and then moves different amounts).
#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

#include "comm/comm.hpp"

namespace starzero {

namespace {

void check_nccl(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return;
  std::string message = std::string("NcclComm: ") + call + " failed: " + ncclGetErrorString(result);
  // ncclGetLastError ignores its argument and returns the thread's last detailed message.
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && *detail != '\0') message += std::string(" (") + detail + ")";
  throw std::runtime_error(message);
}

std::string cuda_error_text(cudaError_t error, const char* call) {
  return std::string(call) + " failed: " + cudaGetErrorName(error) + ": " + cudaGetErrorString(error);
}

ncclDataType_t nccl_type(DType dtype) { return dtype == DType::f32 ? ncclFloat : ncclBfloat16; }

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string("NcclComm bootstrap: ") + call +
                           " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

}  // namespace

void NcclComm::NcclCommDestroyer::operator()(ncclComm* comm) const noexcept {
  // Destroy waits for the communicator's outstanding operations; nothing to do on failure.
  if (comm != nullptr) ncclCommDestroy(comm);
}

NcclComm::NcclComm(std::shared_ptr<MpiComm> bootstrap, int cuda_device)
    : bootstrap_(std::move(bootstrap)), cuda_device_(cuda_device) {
  if (!bootstrap_) throw std::invalid_argument("NcclComm: the bootstrap MpiComm is null");
  rank_ = bootstrap_->rank();
  size_ = bootstrap_->size();

  // Local failures (no such device, no NCCL id) are agreed on before any rank blocks in a
  // collective, so that every rank throws instead of some of them hanging.
  std::string local_error;
  if (const cudaError_t error = cudaSetDevice(cuda_device_); error != cudaSuccess) {
    local_error = cuda_error_text(error, ("cudaSetDevice(" + std::to_string(cuda_device_) + ")").c_str());
  }
  ncclUniqueId id{};
  if (local_error.empty() && rank_ == 0) {
    if (const ncclResult_t result = ncclGetUniqueId(&id); result != ncclSuccess) {
      local_error = std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(result);
    }
  }
  int local_ok = local_error.empty() ? 1 : 0;
  int all_ok = 0;
  check_mpi(MPI_Allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, bootstrap_->native()), "MPI_Allreduce");
  if (!all_ok) {
    throw std::runtime_error("NcclComm: " + (local_error.empty()
                                                 ? std::string("set-up failed on another rank")
                                                 : local_error + " (rank " + std::to_string(rank_) + ")"));
  }
  check_mpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, bootstrap_->native()), "MPI_Bcast");

  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, size_, id, rank_), "ncclCommInitRank");
  comm_.reset(comm);
}

NcclComm::~NcclComm() = default;

std::uint64_t NcclComm::do_all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* stream) {
  const std::size_t shard_elements = shard_count(count);
  if (shard_elements == 0) return 0;
  check_nccl(ncclAllGather(shard, full, shard_elements, nccl_type(dtype), comm_.get(), as_stream(stream)),
             "ncclAllGather");
  return static_cast<std::uint64_t>(size_ - 1) * shard_elements * dtype_size(dtype);
}

std::uint64_t NcclComm::do_reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype, void* stream) {
  const std::size_t shard_elements = shard_count(count);
  if (shard_elements == 0) return 0;
  check_nccl(ncclReduceScatter(full, shard, shard_elements, nccl_type(dtype), ncclSum, comm_.get(), as_stream(stream)),
             "ncclReduceScatter");
  return static_cast<std::uint64_t>(size_ - 1) * shard_elements * dtype_size(dtype);
}

std::uint64_t NcclComm::do_all_reduce(void* data, std::size_t count, DType dtype, void* stream) {
  if (count == 0) return 0;
  check_nccl(ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, comm_.get(), as_stream(stream)),
             "ncclAllReduce");
  return detail::ring_all_reduce_elements_sent(count, size_, rank_) * dtype_size(dtype);
}

std::uint64_t NcclComm::do_broadcast(void* data, std::size_t count, DType dtype, int root, void* stream) {
  if (count == 0) return 0;
  check_nccl(ncclBroadcast(data, data, count, nccl_type(dtype), root, comm_.get(), as_stream(stream)), "ncclBroadcast");
  return detail::chain_broadcast_elements_sent(count, size_, rank_, root) * dtype_size(dtype);
}

void NcclComm::do_barrier() { bootstrap_->barrier(); }

// The factory's "nccl": one GPU per process, chosen by the node-local rank.
std::unique_ptr<Communicator> make_nccl_communicator() {
  auto bootstrap = std::make_shared<MpiComm>();
  int device_count = 0;
  if (const cudaError_t error = cudaGetDeviceCount(&device_count); error != cudaSuccess) {
    device_count = 0;  // no driver or no GPU: the NcclComm constructor reports it on every rank
  }
  const int device = device_count > 0 ? bootstrap->node_local_rank() % device_count : 0;
  return std::make_unique<NcclComm>(std::move(bootstrap), device);
}

}  // namespace starzero
