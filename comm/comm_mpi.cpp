// MpiComm: ring collectives over MPI_Sendrecv on a private duplicate of the world communicator.
//
// Ring (N ranks, rank r, next = r+1, previous = r-1, all mod N), data split in N chunks:
//   reduce-scatter  N-1 steps; step k sends chunk r-k-1 and receives chunk r-k-2, adding this
//                   rank's own contribution to it; after the last step chunk r is fully reduced.
//                   So chunk b is summed in the order x[b+1] + x[b+2] + ... + x[b] (mod N).
//   all-gather      N-1 steps; step k sends chunk r-k and receives chunk r-k-1.
//   all-reduce      reduce-scatter then all-gather over chunks of ceil(count/N) elements, the last
//                   chunks shorter (possibly empty), so no padding is needed.
//   broadcast       a chain root -> root+1 -> ... -> root-1 in pieces: each step forwards the
//                   previous piece while receiving the next one (a pipeline).
// bf16 sums are done in fp32 and rounded to bf16 at every hop, as NCCL does.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "comm/comm.hpp"

namespace starzero {

namespace {

constexpr int kRingTag = 1;
constexpr int kBroadcastTag = 2;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int code, const char* call) {
  if (code != MPI_SUCCESS) {
    throw std::runtime_error(std::string("MpiComm: ") + call + " failed: " + mpi_error_text(code));
  }
}

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "thread level " + std::to_string(level);
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

int ring_index(long long value, int size) {
  const long long wrapped = value % size;
  return static_cast<int>(wrapped < 0 ? wrapped + size : wrapped);
}

// result[i] = received[i] + own[i]. `result` may alias either input (element-wise, in order).
void add_elements(const std::byte* received, const std::byte* own, std::byte* result, std::size_t count, DType dtype) {
  if (dtype == DType::f32) {
    const auto* received_values = reinterpret_cast<const float*>(received);
    const auto* own_values = reinterpret_cast<const float*>(own);
    auto* result_values = reinterpret_cast<float*>(result);
    for (std::size_t i = 0; i < count; ++i) result_values[i] = received_values[i] + own_values[i];
  } else {
    const auto* received_values = reinterpret_cast<const bf16_bits*>(received);
    const auto* own_values = reinterpret_cast<const bf16_bits*>(own);
    auto* result_values = reinterpret_cast<bf16_bits*>(result);
    for (std::size_t i = 0; i < count; ++i) {
      result_values[i] = float_to_bf16(bf16_to_float(received_values[i]) + bf16_to_float(own_values[i]));
    }
  }
}

}  // namespace

// ---- MPI initialisation, shared by every MpiComm of the process ------------------------------
namespace detail {

class MpiEnvironment {
 public:
  explicit MpiEnvironment(bool initialised_here) : initialised_here_(initialised_here) {}
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  ~MpiEnvironment() {
    if (initialised_here_ && !mpi_finalized()) MPI_Finalize();
  }

  // The live environment, initialising MPI first if nobody has.
  static std::shared_ptr<MpiEnvironment> acquire() {
    static std::mutex mutex;
    static std::weak_ptr<MpiEnvironment> current;
    const std::lock_guard lock(mutex);
    if (auto environment = current.lock()) return environment;

    if (mpi_finalized()) {
      throw std::runtime_error(
          "MpiComm: MPI was already finalised (it finalises when the last MpiComm that "
          "initialised it is destroyed, and cannot be initialised twice): keep one MpiComm "
          "alive for the whole program");
    }
    int initialised = 0;
    MPI_Initialized(&initialised);
    int provided = MPI_THREAD_SINGLE;
    bool initialised_here = false;
    if (!initialised) {
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
      initialised_here = true;
    } else {
      check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      if (initialised_here) MPI_Finalize();
      // Collectives run inside StarPU worker threads, concurrently with other MPI calls.
      throw std::runtime_error("MpiComm: MPI_THREAD_MULTIPLE is required but MPI provides " +
                               thread_level_name(provided));
    }
    auto environment = std::make_shared<MpiEnvironment>(initialised_here);
    current = environment;
    return environment;
  }

 private:
  bool initialised_here_;
};

MpiCommHandle::~MpiCommHandle() {
  if (comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_);
}

}  // namespace detail

// ---- chunk layout ------------------------------------------------------------------------------
// `count` elements in chunks of `chunk` elements; chunk b covers [begin(b), begin(b)+length(b)).
struct MpiComm::RingLayout {
  std::size_t count;
  std::size_t chunk;
  std::size_t begin(int b) const { return std::min(count, static_cast<std::size_t>(b) * chunk); }
  std::size_t length(int b) const { return std::min(count, begin(b) + chunk) - begin(b); }
};

// ---- construction ------------------------------------------------------------------------------
namespace {

// MPI_COMM_NULL stands for MPI_COMM_WORLD, which is only usable once MPI is initialised.
MPI_Comm duplicate_communicator(MPI_Comm parent) {
  MPI_Comm duplicate = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(parent == MPI_COMM_NULL ? MPI_COMM_WORLD : parent, &duplicate), "MPI_Comm_dup");
  return duplicate;
}

MpiCommOptions checked_options(MpiCommOptions options) {
  if (options.max_message_bytes < sizeof(float) || options.max_message_bytes > static_cast<std::size_t>(INT_MAX)) {
    throw std::invalid_argument("MpiComm: max_message_bytes must be in [4, INT_MAX], got " +
                                std::to_string(options.max_message_bytes));
  }
  if (options.broadcast_piece_bytes == 0) {
    throw std::invalid_argument("MpiComm: broadcast_piece_bytes must be positive");
  }
  return options;
}

}  // namespace

MpiComm::MpiComm(MpiCommOptions options) : MpiComm(MPI_COMM_NULL, options) {}

MpiComm::MpiComm(MPI_Comm parent, MpiCommOptions options)
    : environment_(detail::MpiEnvironment::acquire()),
      options_(checked_options(options)),
      comm_(duplicate_communicator(parent)) {
  // Errors come back as codes (turned into exceptions) instead of aborting the job.
  check_mpi(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_.get(), &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_.get(), &size_), "MPI_Comm_size");

  MPI_Comm node_comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm_.get(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm),
            "MPI_Comm_split_type");
  const detail::MpiCommHandle node(node_comm);
  check_mpi(MPI_Comm_rank(node.get(), &node_local_rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(node.get(), &node_local_size_), "MPI_Comm_size");
}

MpiComm::~MpiComm() = default;

// ---- ring building blocks ----------------------------------------------------------------------
// One ring hop: send `send_count` elements to the next rank while receiving `receive_count` from
// the previous one, split into messages of at most max_message_bytes. Every rank loops over the
// same number of messages (from the largest chunk, `max_chunk_count`), so that the zero-length
// messages of shorter chunks still pair up with their receives.
std::uint64_t MpiComm::ring_exchange(const std::byte* send, std::size_t send_count, std::byte* receive,
                                     std::size_t receive_count, std::size_t max_chunk_count, DType dtype) const {
  const std::size_t element_bytes = dtype_size(dtype);
  const std::size_t piece_count = options_.max_message_bytes / element_bytes;
  const int next = ring_index(rank_ + 1, size_);
  const int previous = ring_index(rank_ - 1, size_);
  std::uint64_t bytes_sent = 0;
  for (std::size_t offset = 0; offset < max_chunk_count; offset += piece_count) {
    const std::size_t send_now = send_count > offset ? std::min(piece_count, send_count - offset) : 0;
    const std::size_t receive_now = receive_count > offset ? std::min(piece_count, receive_count - offset) : 0;
    check_mpi(
        MPI_Sendrecv(send_now > 0 ? send + offset * element_bytes : send, static_cast<int>(send_now * element_bytes),
                     MPI_BYTE, next, kRingTag, receive_now > 0 ? receive + offset * element_bytes : receive,
                     static_cast<int>(receive_now * element_bytes), MPI_BYTE, previous, kRingTag, comm_.get(),
                     MPI_STATUS_IGNORE),
        "MPI_Sendrecv");
    bytes_sent += send_now * element_bytes;
  }
  return bytes_sent;
}

// Reduces every rank's `input` (layout.count elements) and writes chunk rank_ of the sum to
// `result`. `result` may alias input's chunk rank_: that chunk is never sent, and is read and
// written element by element in the last step only.
std::uint64_t MpiComm::ring_reduce_scatter(const std::byte* input, std::byte* result, const RingLayout& layout,
                                           DType dtype) const {
  const std::size_t element_bytes = dtype_size(dtype);
  if (size_ == 1) {
    if (result != input && layout.count > 0) std::memmove(result, input, layout.count * element_bytes);
    return 0;
  }
  // Two chunk buffers: one receives this step's partial sum while the other is being sent.
  const std::size_t chunk_bytes = layout.chunk * element_bytes;
  const auto scratch = std::make_unique_for_overwrite<std::byte[]>(2 * chunk_bytes);
  std::byte* incoming = scratch.get();
  std::byte* outgoing = scratch.get() + chunk_bytes;
  std::uint64_t bytes_sent = 0;
  for (int step = 0; step < size_ - 1; ++step) {
    const int send_chunk = ring_index(static_cast<long long>(rank_) - step - 1, size_);
    const int receive_chunk = ring_index(static_cast<long long>(rank_) - step - 2, size_);
    // Step 0 starts the ring with this rank's own contribution; later steps forward partial sums.
    const std::byte* send = step == 0 ? input + layout.begin(send_chunk) * element_bytes : outgoing;
    bytes_sent +=
        ring_exchange(send, layout.length(send_chunk), incoming, layout.length(receive_chunk), layout.chunk, dtype);
    const bool last_step = step == size_ - 2;  // receive_chunk == rank_
    add_elements(incoming, input + layout.begin(receive_chunk) * element_bytes, last_step ? result : incoming,
                 layout.length(receive_chunk), dtype);
    std::swap(incoming, outgoing);
  }
  return bytes_sent;
}

// In place: chunk rank_ of `data` is filled; afterwards every chunk is.
std::uint64_t MpiComm::ring_all_gather(std::byte* data, const RingLayout& layout, DType dtype) const {
  const std::size_t element_bytes = dtype_size(dtype);
  std::uint64_t bytes_sent = 0;
  for (int step = 0; step < size_ - 1; ++step) {
    const int send_chunk = ring_index(static_cast<long long>(rank_) - step, size_);
    const int receive_chunk = ring_index(static_cast<long long>(rank_) - step - 1, size_);
    bytes_sent += ring_exchange(data + layout.begin(send_chunk) * element_bytes, layout.length(send_chunk),
                                data + layout.begin(receive_chunk) * element_bytes, layout.length(receive_chunk),
                                layout.chunk, dtype);
  }
  return bytes_sent;
}

// ---- collectives -------------------------------------------------------------------------------
std::uint64_t MpiComm::do_all_gather(const void* shard, void* full, std::size_t count, DType dtype, void* /*stream*/) {
  const std::size_t shard_elements = shard_count(count);
  const RingLayout layout{shard_elements * static_cast<std::size_t>(size_), shard_elements};
  const std::size_t element_bytes = dtype_size(dtype);
  auto* full_bytes = static_cast<std::byte*>(full);
  std::byte* own_chunk = full_bytes + layout.begin(rank_) * element_bytes;
  if (own_chunk != shard && shard_elements > 0) {
    std::memmove(own_chunk, shard, shard_elements * element_bytes);
  }
  return ring_all_gather(full_bytes, layout, dtype);
}

std::uint64_t MpiComm::do_reduce_scatter(const void* full, void* shard, std::size_t count, DType dtype,
                                         void* /*stream*/) {
  const std::size_t shard_elements = shard_count(count);
  const RingLayout layout{shard_elements * static_cast<std::size_t>(size_), shard_elements};
  return ring_reduce_scatter(static_cast<const std::byte*>(full), static_cast<std::byte*>(shard), layout, dtype);
}

std::uint64_t MpiComm::do_all_reduce(void* data, std::size_t count, DType dtype, void* /*stream*/) {
  if (size_ == 1) return 0;
  const RingLayout layout{count, shard_count(count)};
  auto* bytes = static_cast<std::byte*>(data);
  std::byte* own_chunk = bytes + layout.begin(rank_) * dtype_size(dtype);
  const std::uint64_t reduce_bytes = ring_reduce_scatter(bytes, own_chunk, layout, dtype);
  return reduce_bytes + ring_all_gather(bytes, layout, dtype);
}

std::uint64_t MpiComm::do_broadcast(void* data, std::size_t count, DType dtype, int root, void* /*stream*/) {
  if (size_ == 1) return 0;
  const std::size_t element_bytes = dtype_size(dtype);
  const std::size_t piece_count =
      std::max<std::size_t>(1, std::min(options_.broadcast_piece_bytes, options_.max_message_bytes) / element_bytes);
  const std::size_t pieces = (count + piece_count - 1) / piece_count;
  const int position = ring_index(static_cast<long long>(rank_) - root, size_);
  const int previous = position == 0 ? MPI_PROC_NULL : ring_index(rank_ - 1, size_);
  const int next = position == size_ - 1 ? MPI_PROC_NULL : ring_index(rank_ + 1, size_);
  auto* bytes = static_cast<std::byte*>(data);
  auto piece_length = [&](std::size_t piece) { return std::min(piece_count, count - piece * piece_count); };

  std::uint64_t bytes_sent = 0;
  // Step t forwards piece t-1 and receives piece t; messages between two ranks arrive in order.
  for (std::size_t step = 0; step <= pieces; ++step) {
    const bool sends = next != MPI_PROC_NULL && step >= 1;
    const bool receives = previous != MPI_PROC_NULL && step < pieces;
    if (!sends && !receives) continue;
    const std::size_t send_length = sends ? piece_length(step - 1) : 0;
    const std::size_t receive_length = receives ? piece_length(step) : 0;
    check_mpi(MPI_Sendrecv(sends ? bytes + (step - 1) * piece_count * element_bytes : bytes,
                           static_cast<int>(send_length * element_bytes), MPI_BYTE, sends ? next : MPI_PROC_NULL,
                           kBroadcastTag, receives ? bytes + step * piece_count * element_bytes : bytes,
                           static_cast<int>(receive_length * element_bytes), MPI_BYTE,
                           receives ? previous : MPI_PROC_NULL, kBroadcastTag, comm_.get(), MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
    bytes_sent += send_length * element_bytes;
  }
  return bytes_sent;
}

void MpiComm::do_barrier() { check_mpi(MPI_Barrier(comm_.get()), "MPI_Barrier"); }

}  // namespace starzero
