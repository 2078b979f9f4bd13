// A graph of a few hundred tasks with read/write dependencies on several handles must compute
// what the same operations compute run one after the other.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "runtime/session.hpp"
#include "runtime/tensor.hpp"
#include "tasks/elementwise.hpp"

using namespace starzero;

namespace {

struct Op {
  bool is_axpy;
  int x, y;  // tensor indexes (y unused for scale)
  float alpha;
};

void run_graph_test(const char* policy) {
  constexpr int ntensors = 6;
  constexpr std::size_t n = 1037;  // not a multiple of any SIMD width
  constexpr int nops = 400;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, ntensors - 1);

  std::vector<std::vector<float>> expected(ntensors, std::vector<float>(n));
  for (auto& t : expected)
    for (auto& v : t) v = value(rng);
  std::vector<Op> ops;
  for (int i = 0; i < nops; ++i) {
    Op op{i % 3 != 0, pick(rng), pick(rng), 0.5f + 0.5f * value(rng)};
    if (op.is_axpy && op.x == op.y) op.y = (op.x + 1) % ntensors;
    ops.push_back(op);
  }

  SessionOptions options;
  options.policy = policy;
  options.cuda_workers = 0;
  Session session(options);
  std::vector<Tensor> tensors;
  for (int t = 0; t < ntensors; ++t) {
    tensors.push_back(Tensor::host(DType::f32, n, "t" + std::to_string(t)));
    auto view = tensors.back().view(Access::write);
    std::copy(expected[t].begin(), expected[t].end(), view.as<float>().begin());
  }
  // All tasks are submitted before any is waited for.
  for (int i = 0; i < nops; ++i) {
    const Op& op = ops[std::size_t(i)];
    if (op.is_axpy)
      tasks::submit_axpy(op.alpha, tensors[op.x], tensors[op.y], "axpy[" + std::to_string(i) + "]");
    else
      tasks::submit_scale(op.alpha, tensors[op.x], "scale[" + std::to_string(i) + "]");
  }
  // The sequential program, with the same kernels in program order.
  for (const Op& op : ops) {
    if (op.is_axpy)
      tasks::axpy_cpu(n, op.alpha, expected[op.x].data(), expected[op.y].data());
    else
      tasks::scale_cpu(n, op.alpha, expected[op.x].data());
  }
  session.wait_all();
  for (int t = 0; t < ntensors; ++t) {
    auto view = tensors[t].view(Access::read);
    const auto got = view.as<float>();
    // Same operations in the same order per element on CPU workers: bitwise equal.
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < n; ++i) mismatches += got[i] != expected[t][i];
    CHECK(mismatches == 0);
  }
}

}  // namespace

TEST_CASE("400 dependent tasks on 6 handles equal the sequential program (lws)", "[graph]") { run_graph_test("lws"); }
TEST_CASE("400 dependent tasks on 6 handles equal the sequential program (dmdas)", "[graph]") {
  run_graph_test("dmdas");
}
TEST_CASE("400 dependent tasks on 6 handles equal the sequential program (eager)", "[graph]") {
  run_graph_test("eager");
}

TEST_CASE("a transient tensor is allocated by StarPU and invalidated after its last use", "[graph]") {
  SessionOptions options;
  options.cuda_workers = 0;
  Session session(options);
  constexpr std::size_t n = 300;
  Tensor source = Tensor::host(DType::f32, n, "source");
  Tensor sink = Tensor::host(DType::f32, n, "sink");
  Tensor scratch = Tensor::transient(DType::f32, n, "scratch");
  CHECK(scratch.is_transient());
  {
    auto s = source.view(Access::write);
    auto d = sink.view(Access::write);
    for (std::size_t i = 0; i < n; ++i) {
      s.as<float>()[i] = float(i) * 0.5f;
      d.as<float>()[i] = 1.0f;
    }
  }
  // A host view for writing makes StarPU allocate the transient buffer in main memory.
  {
    auto s = scratch.view(Access::write);
    std::fill(s.as<float>().begin(), s.as<float>().end(), 0.0f);
  }
  tasks::submit_axpy(1.0f, source, scratch);  // scratch = source
  tasks::submit_scale(2.0f, scratch);         // scratch = 2 * source
  tasks::submit_axpy(1.0f, scratch, sink);    // sink = 1 + 2 * source
  scratch.invalidate_submit();                // dead after its last reader
  session.wait_all();
  auto d = sink.view(Access::read);
  for (std::size_t i = 0; i < n; ++i) CHECK(d.as<float>()[i] == 1.0f + float(i));
}
