#pragma once
// Communicators: the collectives ZeRO needs (all-gather, reduce-scatter, all-reduce, broadcast,
// barrier) behind one interface, with per-operation byte counters.
//
//   SelfComm  one rank: collectives are copies, nothing is sent.
//   MpiComm   Open MPI, explicit ring algorithms over MPI_Sendrecv so that the counters count
//             exactly the bytes this rank sends. Host memory only.
//   NcclComm  NCCL on a CUDA stream (only when built with CUDA); bootstrapped over an MpiComm.
//             Its counters hold NCCL's ring volume (a formula, not a measurement).
//   SimRingComm  starzero-sim's --sim-ranks N: rank 0 of N ranks that do not exist.
//             Nothing moves (a simulation computes no values); its counters hold the ring volume
//             as NcclComm's do, and the collective tasks' simulated durations come from the same
//             volume (tasks/collectives.cpp).
//
// Ordering rule (docs/architecture.md, "The order token"): every rank must issue the collectives of
// one communicator in the same order, and one communicator's calls must be serialised (never two
// at once on the same object). Different communicator objects may be used concurrently from
// different threads (MpiComm: each duplicates the world communicator, so their messages never
// mix; NcclComm: beware that NCCL itself can deadlock two communicators used concurrently).
//
// Buffer layout of the sharded collectives: `count` is the logical (unpadded) element count;
// s = shard_count(count) = ceil(count / size()); `full` holds size() * s elements (padded, as
// the partition plan pads layers) and `shard` holds s elements; rank r's shard is the elements
// [r*s, (r+1)*s) of `full`. all_reduce works on exactly `count` elements (no padding).
//
// `stream` is a cudaStream_t for NcclComm; SelfComm and MpiComm ignore it (host memory, and
// the call returns when the collective is complete).
//
// Errors: std::invalid_argument for bad arguments (null buffer, root out of range),
// std::runtime_error when MPI, NCCL or CUDA report a failure.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include <mpi.h>

#include "runtime/dtype.hpp"
#include "runtime/sharding.hpp"

#if STARZERO_WITH_CUDA
struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t
#endif

namespace starzero {

enum class CommOp : std::uint8_t { all_gather, reduce_scatter, all_reduce, broadcast, barrier };
inline constexpr std::size_t kCommOpCount = 5;
std::string_view comm_op_name(CommOp op);

struct CommOpStats {
  std::uint64_t bytes_sent = 0;  // payload bytes this rank sent (barrier: always 0)
  std::uint64_t calls = 0;
};

// A snapshot of a communicator's counters.
struct CommStats {
  std::array<CommOpStats, kCommOpCount> ops{};
  const CommOpStats& operator[](CommOp op) const { return ops[static_cast<std::size_t>(op)]; }
  std::uint64_t total_bytes_sent() const;
  std::uint64_t total_calls() const;
};

class Communicator {
 public:
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view name() const = 0;  // "self", "mpi", "nccl", "simulated"
  // Whether the buffers of its collectives live on the GPU (NCCL: the collective tasks run on
  // CUDA workers) rather than in host memory.
  virtual bool on_device() const { return false; }

  // ceil(count / size()): elements per shard in the padded layout.
  std::size_t shard_count(std::size_t count) const;

  // full[r*s, (r+1)*s) = shard of rank r, for every r. `shard` may alias full + rank()*s.
  void all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* stream = nullptr);
  // shard = sum over ranks of full[rank()*s, (rank()+1)*s). `shard` may alias full + rank()*s.
  void reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype, void* stream = nullptr);
  // In place, sum, any count.
  void all_reduce(void* data, std::size_t count, DType dtype, void* stream = nullptr);
  // In place: every rank ends with root's `count` elements.
  void broadcast(void* data, std::size_t count, DType dtype, int root, void* stream = nullptr);
  void barrier();

  // Counters are atomic: stats() and reset_stats() may run on any thread at any time.
  CommStats stats() const;
  void reset_stats();

 protected:
  void record(CommOp op, std::uint64_t bytes_sent);

 private:
  // Each returns the payload bytes this rank sent. Arguments are already checked.
  virtual std::uint64_t do_all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* stream) = 0;
  virtual std::uint64_t do_reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype,
                                          void* stream) = 0;
  virtual std::uint64_t do_all_reduce(void* data, std::size_t count, DType dtype, void* stream) = 0;
  virtual std::uint64_t do_broadcast(void* data, std::size_t count, DType dtype, int root, void* stream) = 0;
  virtual void do_barrier() = 0;

  struct AtomicCounters {
    std::atomic<std::uint64_t> bytes_sent{0};
    std::atomic<std::uint64_t> calls{0};
  };
  std::array<AtomicCounters, kCommOpCount> counters_{};
};

// ---- one rank --------------------------------------------------------------------------------
class SelfComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view name() const override { return "self"; }

 private:
  std::uint64_t do_all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_all_reduce(void* data, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_broadcast(void* data, std::size_t count, DType dtype, int root, void* stream) override;
  void do_barrier() override {}
};

// ---- simulated ranks (starzero-sim) ----------------------------------------------------------
// Rank 0 of `size` ranks of a simulated data-parallel job. Every collective returns at once and
// touches no buffer; it counts the bytes rank 0 would send in a ring (as NcclComm does).
// `on_device`: the collectives stand for NCCL's on the GPUs (the tasks run on CUDA workers), else
// for MPI's on host buffers.
class SimRingComm final : public Communicator {
 public:
  SimRingComm(int size, bool on_device);
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string_view name() const override { return "simulated"; }
  bool on_device() const override { return on_device_; }
  // Counts one collective of `count` elements as if it had run, when its task is submitted: a
  // simulation runs no task function.
  void count_submitted(CommOp op, std::size_t count, DType dtype);

 private:
  std::uint64_t do_all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_all_reduce(void* data, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_broadcast(void* data, std::size_t count, DType dtype, int root, void* stream) override;
  void do_barrier() override {}

  int size_;
  bool on_device_;
};

// ---- MPI -------------------------------------------------------------------------------------
namespace detail {
class MpiEnvironment;  // shared MPI_Init_thread / MPI_Finalize guard (comm_mpi.cpp)

// Owns one MPI communicator handle (MPI_Comm_free on destruction).
class MpiCommHandle {
 public:
  MpiCommHandle() = default;
  explicit MpiCommHandle(MPI_Comm comm) : comm_(comm) {}
  MpiCommHandle(const MpiCommHandle&) = delete;
  MpiCommHandle& operator=(const MpiCommHandle&) = delete;
  ~MpiCommHandle();
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};
}  // namespace detail

struct MpiCommOptions {
  // Largest single MPI message (MPI counts are int); longer transfers are split. Tests make it
  // tiny to exercise the splitting.
  std::size_t max_message_bytes = std::size_t{1} << 30;
  // Broadcast forwards along its chain in pieces of this size, so the ranks work as a pipeline.
  std::size_t broadcast_piece_bytes = std::size_t{1} << 20;
};

class MpiComm final : public Communicator {
 public:
  // Duplicates MPI_COMM_WORLD. Initialises MPI (MPI_THREAD_MULTIPLE) if nobody has; then MPI is
  // finalised when the last MpiComm goes away, and cannot be initialised again in this process.
  // Collective: every rank constructs its MpiComm objects in the same order.
  explicit MpiComm(MpiCommOptions options = {});
  // Duplicates `parent` (MPI_COMM_NULL: MPI_COMM_WORLD), initialising MPI as above if needed.
  explicit MpiComm(MPI_Comm parent, MpiCommOptions options = {});
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }

  // Rank and rank count among the processes on this node (to pick a GPU).
  int node_local_rank() const { return node_local_rank_; }
  int node_local_size() const { return node_local_size_; }
  MPI_Comm native() const { return comm_.get(); }

 private:
  std::uint64_t do_all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_all_reduce(void* data, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_broadcast(void* data, std::size_t count, DType dtype, int root, void* stream) override;
  void do_barrier() override;

  struct RingLayout;
  std::uint64_t ring_exchange(const std::byte* send, std::size_t send_count, std::byte* receive,
                              std::size_t receive_count, std::size_t max_block_count, DType dtype) const;
  std::uint64_t ring_reduce_scatter(const std::byte* input, std::byte* result, const RingLayout& layout,
                                    DType dtype) const;
  std::uint64_t ring_all_gather(std::byte* data, const RingLayout& layout, DType dtype) const;

  // Declared first so it is destroyed last: MPI_Finalize must follow MPI_Comm_free.
  std::shared_ptr<detail::MpiEnvironment> environment_;
  MpiCommOptions options_;  // checked before comm_ duplicates anything
  detail::MpiCommHandle comm_;
  int rank_ = 0;
  int size_ = 1;
  int node_local_rank_ = 0;
  int node_local_size_ = 1;
};

// ---- NCCL ------------------------------------------------------------------------------------
#if STARZERO_WITH_CUDA
class NcclComm final : public Communicator {
 public:
  // Collective over `bootstrap`: rank 0 creates the NCCL id, MPI broadcasts it, every rank joins
  // with ncclCommInitRank on `cuda_device` (which becomes the calling thread's current device).
  // The bootstrap communicator is kept (barrier uses it).
  NcclComm(std::shared_ptr<MpiComm> bootstrap, int cuda_device);
  ~NcclComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "nccl"; }
  bool on_device() const override { return true; }
  int cuda_device() const { return cuda_device_; }

 private:
  // Buffers are device memory on cuda_device(); `stream` is a cudaStream_t (nullptr: default
  // stream). The calls only enqueue work; synchronise the stream before reading the result.
  std::uint64_t do_all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_all_reduce(void* data, std::size_t count, DType dtype, void* stream) override;
  std::uint64_t do_broadcast(void* data, std::size_t count, DType dtype, int root, void* stream) override;
  // A host-side barrier over the bootstrap MPI communicator; it does not wait for GPU work.
  void do_barrier() override;

  struct NcclCommDestroyer {
    void operator()(ncclComm* comm) const noexcept;
  };
  std::shared_ptr<MpiComm> bootstrap_;
  std::unique_ptr<ncclComm, NcclCommDestroyer> comm_;
  int rank_ = 0;
  int size_ = 1;
  int cuda_device_ = 0;
};
#endif

// "self", "mpi" or "nccl" (NCCL: an MpiComm bootstrap; device = node-local rank modulo the
// visible CUDA devices). Throws std::runtime_error for an unknown kind, or "nccl" without CUDA.
std::unique_ptr<Communicator> make_communicator(std::string_view kind);

namespace detail {
// Ring volumes shared by the MPI measurement and the NCCL formula: the elements rank `rank` of
// `size` sends in a ring all-reduce of `count` elements split in blocks of ceil(count/size)
// (reduce-scatter phase: every block but its own; all-gather phase: every block but rank+1's).
std::uint64_t ring_all_reduce_elements_sent(std::size_t count, int size, int rank);
// Elements a rank forwards in a chain broadcast root -> root+1 -> ... (the last one sends none).
std::uint64_t chain_broadcast_elements_sent(std::size_t count, int size, int rank, int root);
}  // namespace detail

}  // namespace starzero
