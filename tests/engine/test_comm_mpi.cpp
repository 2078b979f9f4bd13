// Communicator tests, run under mpirun with 1, 2 and 4 ranks (see comm.cmake).
//
// Every rank runs the same test cases in the same order, so the collectives pair up; checks use
// CHECK (not REQUIRE) after a collective so that a failure on one rank does not skip the next
// collectives and hang the others. Results are compared against an independent reference: each
// rank regenerates every rank's random input from the seeds and sums in double precision.
// Cross-rank facts (byte totals, identical replicas) are gathered with plain MPI calls on
// MPI_COMM_WORLD, not with the code under test.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if STARZERO_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "comm/comm.hpp"

using starzero::Communicator;
using starzero::DType;
using starzero::MpiComm;
using starzero::MpiCommOptions;

namespace {

// Created in main (they own MPI); the second one splits every message into tiny pieces.
MpiComm* g_world = nullptr;
MpiComm* g_small_messages = nullptr;

std::vector<MpiComm*> mpi_comms() { return {g_world, g_small_messages}; }

const std::vector<std::size_t> kCounts = {0, 1, 2, 3, 7, 1001, 4099};
const std::vector<DType> kDTypes = {DType::f32, DType::bf16};

using Bytes = std::vector<std::byte>;

// ---- random data -----------------------------------------------------------------------------
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// `count` values in +-[0.25, 1), never zero, different for every (seed, rank); bf16-representable
// when dtype is bf16, so the inputs themselves are exact.
std::vector<float> random_values(std::uint64_t seed, int rank, std::size_t count, DType dtype) {
  std::uint64_t state = seed * 1000003u + static_cast<std::uint64_t>(rank) * 7919u + 17u;
  std::vector<float> values(count);
  for (float& value : values) {
    const std::uint64_t bits = splitmix64(state);
    const float magnitude = 0.25f + 0.75f * static_cast<float>(bits >> 40) * 0x1p-24f;
    value = (bits & 1u) ? -magnitude : magnitude;
    if (dtype == DType::bf16) value = starzero::bf16_to_float(starzero::float_to_bf16(value));
  }
  return values;
}

Bytes encode(const std::vector<float>& values, DType dtype) {
  Bytes bytes(values.size() * starzero::dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const starzero::bf16_bits bits = starzero::float_to_bf16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

float element(const Bytes& bytes, std::size_t i, DType dtype) {
  if (dtype == DType::f32) {
    float value;
    std::memcpy(&value, bytes.data() + 4 * i, 4);
    return value;
  }
  starzero::bf16_bits bits;
  std::memcpy(&bits, bytes.data() + 2 * i, 2);
  return starzero::bf16_to_float(bits);
}

// ---- canaries: output buffers get a tail that no collective may touch ------------------------
constexpr std::size_t kCanaryBytes = 16;
constexpr std::byte kCanary{0x5a};

Bytes with_canary(Bytes bytes) {
  bytes.insert(bytes.end(), kCanaryBytes, kCanary);
  return bytes;
}

bool canary_intact(const Bytes& bytes) {
  return std::all_of(bytes.end() - kCanaryBytes, bytes.end(), [](std::byte b) { return b == kCanary; });
}

// ---- reference sums ----------------------------------------------------------------------------
// Recursive summation of N terms rounding every partial sum to unit roundoff u errs by at most
// (N-1) u sum|x_i| (+ O(u^2)); we allow N u sum|x_i|. u = 2^-24 for fp32; 2^-8 for bf16, which
// MpiComm and NCCL round to at every hop. N = 1 is a copy: exact.
double tolerance(DType dtype, int ranks, double sum_of_magnitudes) {
  if (ranks == 1) return 0.0;
  const double unit_roundoff = dtype == DType::f32 ? 0x1p-24 : 0x1p-8;
  return ranks * unit_roundoff * sum_of_magnitudes;
}

// MpiComm's documented ring order: block b is summed as x[b+1] + x[b+2] + ... + x[b] (mod N),
// rounding to the dtype after every addition. Compared bit for bit.
float ring_order_sum(const std::vector<std::vector<float>>& inputs, std::size_t index, int block, DType dtype) {
  const int ranks = static_cast<int>(inputs.size());
  float sum = inputs[(block + 1) % ranks][index];
  for (int hop = 2; hop <= ranks; ++hop) {
    sum += inputs[(block + hop) % ranks][index];
    if (dtype == DType::bf16) sum = starzero::bf16_to_float(starzero::float_to_bf16(sum));
  }
  return sum;
}

struct SumReport {
  std::size_t outside_tolerance = 0;
  std::size_t not_ring_order = 0;
  std::string first_problem;
};

// Checks got[j] (j < length) against sum over ranks of inputs[r][first + j].
SumReport check_sums(const Bytes& got, const std::vector<std::vector<float>>& inputs, std::size_t first,
                     std::size_t length, int block, DType dtype, bool check_ring_order) {
  SumReport report;
  const int ranks = static_cast<int>(inputs.size());
  for (std::size_t j = 0; j < length; ++j) {
    double exact = 0.0, magnitudes = 0.0;
    for (const auto& input : inputs) {
      exact += input[first + j];
      magnitudes += std::abs(static_cast<double>(input[first + j]));
    }
    const float value = element(got, j, dtype);
    const double error = std::abs(static_cast<double>(value) - exact);
    if (!(error <= tolerance(dtype, ranks, magnitudes))) {
      if (report.first_problem.empty()) {
        report.first_problem = "element " + std::to_string(first + j) + ": got " + std::to_string(value) + ", exact " +
                               std::to_string(exact);
      }
      ++report.outside_tolerance;
    }
    if (check_ring_order) {
      const float expected = ring_order_sum(inputs, first + j, block, dtype);
      if (std::memcmp(&expected, &value, sizeof value) != 0) ++report.not_ring_order;
    }
  }
  return report;
}

// ---- cross-rank helpers (plain MPI) ----------------------------------------------------------
std::uint64_t sum_over_ranks(std::uint64_t value) {
  std::uint64_t total = 0;
  MPI_Allreduce(&value, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

bool same_on_every_rank(const Bytes& bytes) {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (std::byte b : bytes) hash = (hash ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ull;
  std::uint64_t lowest = 0, highest = 0;
  MPI_Allreduce(&hash, &lowest, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&hash, &highest, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lowest == highest;
}

// Elements in block b when `count` elements are split in blocks of ceil(count/N).
std::size_t block_length(std::size_t count, int ranks, int b) {
  const std::size_t block = (count + ranks - 1) / ranks;
  const std::size_t begin = std::min(count, block * b);
  return std::min(count, begin + block) - begin;
}

// ---- memory: NcclComm needs device buffers ----------------------------------------------------
enum class Memory { host, device };

// Calls `collective` with pointers to the buffers, staged through GPU memory when asked.
void with_buffers(Memory memory, std::vector<Bytes*> buffers,
                  const std::function<void(std::vector<void*>)>& collective) {
  std::vector<void*> pointers;
  if (memory == Memory::host) {
    for (Bytes* buffer : buffers) pointers.push_back(buffer->data());
    collective(pointers);
    return;
  }
#if STARZERO_WITH_CUDA
  for (Bytes* buffer : buffers) {
    void* device = nullptr;
    REQUIRE(cudaMalloc(&device, buffer->size()) == cudaSuccess);
    REQUIRE(cudaMemcpy(device, buffer->data(), buffer->size(), cudaMemcpyHostToDevice) == cudaSuccess);
    pointers.push_back(device);
  }
  collective(pointers);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    REQUIRE(cudaMemcpy(buffers[i]->data(), pointers[i], buffers[i]->size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    cudaFree(pointers[i]);
  }
#else
  FAIL("device memory without CUDA");
#endif
}

// ---- the checks, for any communicator --------------------------------------------------------
void check_all_gather(Communicator& comm, std::size_t count, DType dtype, std::uint64_t seed, Memory memory) {
  const int ranks = comm.size(), rank = comm.rank();
  const std::size_t shard = comm.shard_count(count), element_bytes = starzero::dtype_size(dtype);
  INFO(comm.name() << " all_gather count " << count << " " << starzero::dtype_name(dtype) << " ranks " << ranks
                   << " rank " << rank);
  Bytes my_shard = encode(random_values(seed, rank, shard, dtype), dtype);
  Bytes full = with_canary(encode(random_values(seed + 1, rank, ranks * shard, dtype), dtype));

  comm.reset_stats();
  with_buffers(memory, {&my_shard, &full}, [&](std::vector<void*> p) { comm.all_gather(p[0], p[1], count, dtype); });

  bool all_equal = true;
  for (int q = 0; q < ranks; ++q) {
    const Bytes expected = encode(random_values(seed, q, shard, dtype), dtype);
    all_equal = all_equal && std::equal(expected.begin(), expected.end(), full.begin() + q * shard * element_bytes);
  }
  CHECK(all_equal);
  CHECK(canary_intact(full));
  const starzero::CommStats stats = comm.stats();
  CHECK(stats[starzero::CommOp::all_gather].calls == 1);
  CHECK(stats[starzero::CommOp::all_gather].bytes_sent == (ranks - 1) * shard * element_bytes);
  CHECK(stats.total_calls() == 1);
}

void check_reduce_scatter(Communicator& comm, std::size_t count, DType dtype, std::uint64_t seed, Memory memory,
                          bool check_ring_order) {
  const int ranks = comm.size(), rank = comm.rank();
  const std::size_t shard = comm.shard_count(count), element_bytes = starzero::dtype_size(dtype);
  INFO(comm.name() << " reduce_scatter count " << count << " " << starzero::dtype_name(dtype) << " ranks " << ranks
                   << " rank " << rank);
  std::vector<std::vector<float>> inputs;
  for (int q = 0; q < ranks; ++q) inputs.push_back(random_values(seed, q, ranks * shard, dtype));
  Bytes full = encode(inputs[rank], dtype);
  const Bytes full_before = full;
  Bytes my_shard = with_canary(Bytes(shard * element_bytes, std::byte{0x33}));

  comm.reset_stats();
  with_buffers(memory, {&full, &my_shard},
               [&](std::vector<void*> p) { comm.reduce_scatter(p[0], p[1], count, dtype); });

  const SumReport report = check_sums(my_shard, inputs, rank * shard, shard, rank, dtype, check_ring_order);
  INFO(report.first_problem);
  CHECK(report.outside_tolerance == 0);
  CHECK(report.not_ring_order == 0);
  CHECK(canary_intact(my_shard));
  CHECK(full == full_before);  // the input is const
  const starzero::CommStats stats = comm.stats();
  CHECK(stats[starzero::CommOp::reduce_scatter].calls == 1);
  CHECK(stats[starzero::CommOp::reduce_scatter].bytes_sent == (ranks - 1) * shard * element_bytes);
}

void check_all_reduce(Communicator& comm, std::size_t count, DType dtype, std::uint64_t seed, Memory memory,
                      bool check_ring_order) {
  const int ranks = comm.size(), rank = comm.rank();
  const std::size_t element_bytes = starzero::dtype_size(dtype);
  INFO(comm.name() << " all_reduce count " << count << " " << starzero::dtype_name(dtype) << " ranks " << ranks
                   << " rank " << rank);
  std::vector<std::vector<float>> inputs;
  for (int q = 0; q < ranks; ++q) inputs.push_back(random_values(seed, q, count, dtype));
  Bytes data = with_canary(encode(inputs[rank], dtype));  // unpadded: exactly `count` elements

  comm.reset_stats();
  with_buffers(memory, {&data}, [&](std::vector<void*> p) { comm.all_reduce(p[0], count, dtype); });

  // Element i belongs to block i / ceil(count/N), reduced at that block's rank.
  const std::size_t block = (count + ranks - 1) / std::max(ranks, 1);
  SumReport total;
  for (int b = 0; b < ranks; ++b) {
    const std::size_t first = std::min(count, b * block), length = block_length(count, ranks, b);
    Bytes part(data.begin() + first * element_bytes, data.begin() + (first + length) * element_bytes);
    const SumReport report = check_sums(part, inputs, first, length, b, dtype, check_ring_order);
    total.outside_tolerance += report.outside_tolerance;
    total.not_ring_order += report.not_ring_order;
    if (total.first_problem.empty()) total.first_problem = report.first_problem;
  }
  INFO(total.first_problem);
  CHECK(total.outside_tolerance == 0);
  CHECK(total.not_ring_order == 0);
  CHECK(canary_intact(data));
  CHECK(same_on_every_rank(data));  // replicas must be identical, bit for bit

  const std::uint64_t bytes_sent = comm.stats()[starzero::CommOp::all_reduce].bytes_sent;
  const std::uint64_t expected_elements = ranks == 1 ? 0
                                                     : (count - block_length(count, ranks, rank)) +
                                                           (count - block_length(count, ranks, (rank + 1) % ranks));
  CHECK(bytes_sent == expected_elements * element_bytes);
  CHECK(sum_over_ranks(bytes_sent) == 2 * (ranks - 1) * count * element_bytes);
  CHECK(comm.stats()[starzero::CommOp::all_reduce].calls == 1);
}

void check_broadcast(Communicator& comm, std::size_t count, DType dtype, int root, std::uint64_t seed, Memory memory) {
  const int ranks = comm.size(), rank = comm.rank();
  const std::size_t element_bytes = starzero::dtype_size(dtype);
  INFO(comm.name() << " broadcast count " << count << " " << starzero::dtype_name(dtype) << " root " << root
                   << " ranks " << ranks << " rank " << rank);
  const Bytes expected = encode(random_values(seed, root, count, dtype), dtype);
  Bytes data = with_canary(encode(random_values(seed, rank, count, dtype), dtype));

  comm.reset_stats();
  with_buffers(memory, {&data}, [&](std::vector<void*> p) { comm.broadcast(p[0], count, dtype, root); });

  CHECK(std::equal(expected.begin(), expected.end(), data.begin()));
  CHECK(canary_intact(data));
  const std::uint64_t bytes_sent = comm.stats()[starzero::CommOp::broadcast].bytes_sent;
  const int chain_position = (rank - root + ranks) % ranks;  // the chain's last rank sends nothing
  CHECK(bytes_sent == (chain_position == ranks - 1 ? 0 : count * element_bytes));
  CHECK(sum_over_ranks(bytes_sent) == (ranks - 1) * count * element_bytes);
}

void check_everything(Communicator& comm, Memory memory, bool check_ring_order) {
  std::uint64_t seed = 1000;
  for (DType dtype : kDTypes) {
    for (std::size_t count : kCounts) {
      check_all_gather(comm, count, dtype, ++seed, memory);
      check_reduce_scatter(comm, count, dtype, ++seed, memory, check_ring_order);
      check_all_reduce(comm, count, dtype, ++seed, memory, check_ring_order);
      check_broadcast(comm, count, dtype, comm.size() - 1, ++seed, memory);
      check_broadcast(comm, count, dtype, comm.size() / 2, ++seed, memory);
    }
  }
}

}  // namespace

// ---- MpiComm -----------------------------------------------------------------------------------
TEST_CASE("MpiComm sees the world", "[mpi]") {
  int world_rank = -1, world_size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  CHECK(g_world->rank() == world_rank);
  CHECK(g_world->size() == world_size);
  CHECK(g_world->name() == "mpi");
  CHECK(g_world->node_local_size() >= 1);
  CHECK(g_world->node_local_rank() < g_world->node_local_size());
  int thread_level = 0;
  MPI_Query_thread(&thread_level);
  CHECK(thread_level == MPI_THREAD_MULTIPLE);
  CHECK(g_world->shard_count(0) == 0);
  CHECK(g_world->shard_count(7) == (7 + static_cast<std::size_t>(world_size) - 1) / world_size);
}

TEST_CASE("MpiComm collectives match a double-precision reference", "[mpi]") {
  for (MpiComm* comm : mpi_comms()) check_everything(*comm, Memory::host, /*check_ring_order=*/true);
}

TEST_CASE("MpiComm collectives work in place", "[mpi]") {
  MpiComm& comm = *g_world;
  const int ranks = comm.size(), rank = comm.rank();
  const std::size_t count = 1001, shard = comm.shard_count(count);
  std::vector<std::vector<float>> inputs;
  for (int q = 0; q < ranks; ++q) inputs.push_back(random_values(77, q, ranks * shard, DType::f32));

  // reduce-scatter into the own block of the full buffer, as NCCL allows
  Bytes full = encode(inputs[rank], DType::f32);
  comm.reduce_scatter(full.data(), full.data() + rank * shard * 4, count, DType::f32);
  const Bytes own_block(full.begin() + rank * shard * 4, full.begin() + (rank + 1) * shard * 4);
  const SumReport report = check_sums(own_block, inputs, rank * shard, shard, rank, DType::f32, true);
  CHECK(report.outside_tolerance == 0);
  CHECK(report.not_ring_order == 0);

  // all-gather from the own block of the full buffer
  Bytes gathered(ranks * shard * 4, std::byte{0});
  const Bytes my_shard = encode(random_values(78, rank, shard, DType::f32), DType::f32);
  std::copy(my_shard.begin(), my_shard.end(), gathered.begin() + rank * shard * 4);
  comm.all_gather(gathered.data() + rank * shard * 4, gathered.data(), count, DType::f32);
  bool all_equal = true;
  for (int q = 0; q < ranks; ++q) {
    const Bytes expected = encode(random_values(78, q, shard, DType::f32), DType::f32);
    all_equal = all_equal && std::equal(expected.begin(), expected.end(), gathered.begin() + q * shard * 4);
  }
  CHECK(all_equal);
}

TEST_CASE("MpiComm byte counters: zero for one rank, accumulate, reset", "[mpi]") {
  MpiComm& comm = *g_world;
  const int ranks = comm.size();
  comm.reset_stats();
  std::vector<float> data(100, 1.0f);
  comm.all_reduce(data.data(), data.size(), DType::f32);
  comm.all_reduce(data.data(), data.size(), DType::f32);
  comm.barrier();
  const starzero::CommStats stats = comm.stats();
  CHECK(stats[starzero::CommOp::all_reduce].calls == 2);
  CHECK(stats[starzero::CommOp::barrier].calls == 1);
  CHECK(stats[starzero::CommOp::barrier].bytes_sent == 0);
  CHECK(stats.total_calls() == 3);
  CHECK(sum_over_ranks(stats.total_bytes_sent()) == 2u * 2u * (ranks - 1) * 100u * 4u);
  if (ranks == 1) CHECK(stats.total_bytes_sent() == 0);
  CHECK(data[0] == static_cast<float>(ranks * ranks));  // twice summed: N * N
  comm.reset_stats();
  CHECK(comm.stats().total_calls() == 0);
  CHECK(comm.stats().total_bytes_sent() == 0);
}

TEST_CASE("MpiComm rejects bad arguments on every rank alike", "[mpi]") {
  MpiComm& comm = *g_world;
  float value = 1.0f;
  CHECK_THROWS_AS(comm.broadcast(&value, 1, DType::f32, comm.size()), std::invalid_argument);
  CHECK_THROWS_AS(comm.broadcast(&value, 1, DType::f32, -1), std::invalid_argument);
  CHECK_THROWS_AS(comm.all_reduce(nullptr, 4, DType::f32), std::invalid_argument);
  CHECK_NOTHROW(comm.all_reduce(nullptr, 0, DType::f32));  // nothing to do, but still collective
  CHECK_THROWS_AS(MpiComm(MpiCommOptions{.max_message_bytes = 2}), std::invalid_argument);
}

TEST_CASE("MpiComm barrier waits for the slowest rank", "[mpi]") {
  MpiComm& comm = *g_world;
  auto now_ns = [] {
    return static_cast<std::int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  };
  comm.barrier();
  std::int64_t late_arrival_ns = 0;
  if (comm.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    late_arrival_ns = now_ns();
  }
  comm.barrier();
  const std::int64_t left_ns = now_ns();
  MPI_Bcast(&late_arrival_ns, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  // steady_clock is CLOCK_MONOTONIC, one clock for all processes of a node: nobody may leave the
  // barrier before rank 0 arrived at it.
  if (comm.node_local_size() == comm.size()) CHECK(left_ns >= late_arrival_ns);
  CHECK(comm.stats()[starzero::CommOp::barrier].bytes_sent == 0);
}

TEST_CASE("Two MpiComm objects used from two threads at once do not interfere", "[mpi][threads]") {
  const int ranks = g_world->size(), rank = g_world->rank();
  constexpr std::size_t count = 3001;
  constexpr int rounds = 10;
  // Each thread all-reduces its own data `rounds` times on its own communicator; the two
  // communicators' messages share ranks and tags but never mix.
  auto run = [&](MpiComm& comm, std::uint64_t seed, std::string& failure) {
    try {
      for (int round = 0; round < rounds; ++round) {
        std::vector<std::vector<float>> inputs;
        for (int q = 0; q < ranks; ++q) inputs.push_back(random_values(seed + round, q, count, DType::f32));
        Bytes data = encode(inputs[rank], DType::f32);
        comm.all_reduce(data.data(), count, DType::f32);
        for (std::size_t i = 0; i < count && failure.empty(); ++i) {
          double exact = 0.0, magnitudes = 0.0;
          for (const auto& input : inputs) {
            exact += input[i];
            magnitudes += std::abs(input[i]);
          }
          if (std::abs(element(data, i, DType::f32) - exact) > tolerance(DType::f32, ranks, magnitudes)) {
            failure = std::string(comm.name()) + " round " + std::to_string(round) + " element " + std::to_string(i);
          }
        }
      }
    } catch (const std::exception& error) {
      failure = error.what();
    }
  };
  std::string first_failure, second_failure;
  {
    std::jthread first([&] { run(*g_world, 500, first_failure); });
    std::jthread second([&] { run(*g_small_messages, 900, second_failure); });
  }
  INFO(first_failure << " / " << second_failure);
  CHECK(first_failure.empty());
  CHECK(second_failure.empty());
}

// ---- SelfComm and the factory -----------------------------------------------------------------
TEST_CASE("SelfComm copies and sends nothing", "[self]") {
  starzero::SelfComm comm;
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  CHECK(comm.shard_count(7) == 7);
  for (DType dtype : kDTypes) {
    for (std::size_t count : kCounts) {
      // One rank: every reference sum is the rank's own input, exactly.
      check_all_gather(comm, count, dtype, 40 + count, Memory::host);
      check_reduce_scatter(comm, count, dtype, 50 + count, Memory::host, true);
      check_broadcast(comm, count, dtype, 0, 60 + count, Memory::host);
      Bytes data = encode(random_values(70 + count, 0, count, dtype), dtype);
      const Bytes before = data;
      comm.all_reduce(data.data(), count, dtype);
      CHECK(data == before);
    }
  }
  // in place
  Bytes data = encode(random_values(3, 0, 16, DType::bf16), DType::bf16);
  const Bytes before = data;
  comm.all_gather(data.data(), data.data(), 16, DType::bf16);
  comm.reduce_scatter(data.data(), data.data(), 16, DType::bf16);
  CHECK(data == before);
  float value = 1.0f;
  CHECK_THROWS_AS(comm.broadcast(&value, 1, DType::f32, 1), std::invalid_argument);
  comm.barrier();
  CHECK(comm.stats()[starzero::CommOp::barrier].calls == 1);
  CHECK(comm.stats().total_bytes_sent() == 0);
}

TEST_CASE("make_communicator builds each kind or explains why not", "[factory]") {
  CHECK(starzero::make_communicator("self")->name() == "self");
  const auto mpi = starzero::make_communicator("mpi");  // collective: every rank runs this
  CHECK(mpi->name() == "mpi");
  CHECK(mpi->size() == g_world->size());
  CHECK(mpi->rank() == g_world->rank());
  CHECK_THROWS_AS(starzero::make_communicator("gloo"), std::runtime_error);
#if !STARZERO_WITH_CUDA
  CHECK_THROWS_AS(starzero::make_communicator("nccl"), std::runtime_error);
#endif
}

// ---- NcclComm: only where every rank of the node has its own GPU ------------------------------
#if STARZERO_WITH_CUDA
TEST_CASE("NcclComm collectives match a double-precision reference", "[nccl]") {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  // Decide together: NCCL refuses two ranks on one GPU, and all ranks must take the same path.
  int fewest_devices = 0;
  MPI_Allreduce(&devices, &fewest_devices, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (fewest_devices == 0) {
    CHECK_THROWS_AS(starzero::make_communicator("nccl"), std::runtime_error);
    WARN("no CUDA device: NcclComm collectives not exercised");
    return;
  }
  if (fewest_devices < g_world->node_local_size()) {
    WARN("fewer GPUs than ranks on this node: NcclComm not exercised");
    return;
  }
  const auto comm = starzero::make_communicator("nccl");
  CHECK(comm->name() == "nccl");
  CHECK(comm->size() == g_world->size());
  // NCCL's summation order is its own: tolerance only, no bit-for-bit ring order.
  check_everything(*comm, Memory::device, /*check_ring_order=*/false);
  comm->barrier();
}
#endif

int main(int argc, char* argv[]) {
  int any_failure = 1;
  try {
    MpiComm world;  // initialises MPI; finalised when the last MpiComm is gone
    MpiComm small_messages(MpiCommOptions{.max_message_bytes = 24, .broadcast_piece_bytes = 20});
    g_world = &world;
    g_small_messages = &small_messages;

    Catch::Session session;
    int failures = session.applyCommandLine(argc, argv);
    if (failures == 0) {
      failures = session.run();
      // Listing tests returns their number, not failures.
      const Catch::ConfigData& config = session.configData();
      if (config.listTests || config.listTestNamesOnly || config.listTags || config.listReporters) {
        failures = 0;
      }
    }
    // Every rank must agree, so that mpirun's exit status reports a failure seen by any rank.
    MPI_Allreduce(&failures, &any_failure, 1, MPI_INT, MPI_MAX, world.native());
    g_world = nullptr;
    g_small_messages = nullptr;
  } catch (const std::exception& error) {
    std::cerr << "test_comm_mpi: " << error.what() << '\n';
    return 1;
  }
  return any_failure == 0 ? 0 : 1;
}
