// runtime/codelet.hpp and the nn declarations (tasks/nn.hpp): the FLOP counts of matmul forward
// and backward against their formulas on a non-square shape, the handle-count check of submit(),
// and a submission end to end on CPU workers: buffers read by their declared meaning, a repeated
// (variable-count) buffer, the on_ready / on_done callbacks and the priority option.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/codelet.hpp"
#include "runtime/session.hpp"
#include "runtime/tensor.hpp"
#include "tasks/nn.hpp"

using namespace starzero;

namespace {

// B·T = 6 rows, C = 5 inputs, OC = 7 outputs: no two of N, C, OC equal.
tasks::NnArgs matmul_args() {
  tasks::NnArgs a;
  a.d = tasks::Dims{DType::f32, 2, 3, 5, 1, 11, 16};
  a.C = 5;
  a.OC = 7;
  return a;
}

// y = alpha·x + y written with the declared meanings, in the opposite order to the declaration.
struct AxpyArgs {
  float alpha;
};
void axpy(const TaskBuffers& b, const AxpyArgs& a) {
  float* y = b.get<float>("y");
  const float* x = b.get<const float>("x");
  for (std::size_t i = 0; i < b.elements("y"); ++i) y[i] += a.alpha * x[i];
}
Codelet<AxpyArgs> test_axpy({
    .name = "test_axpy",
    .buffers = {{STARPU_R, "x"}, {STARPU_RW, "y"}},
    .cpu = axpy,
    .flops = [](const AxpyArgs&, Handles h) { return 2.0 * double(starpu_vector_get_nx(h[0])); },
    .bytes = [](const AxpyArgs&, Handles h) { return 3.0 * double(starpu_data_get_size(h[0])); },
});

// total[i] = Σ parts[k][i], any number of parts.
void sum_parts(const TaskBuffers& b, const NoArgs&) {
  float* total = b.get<float>("total");
  for (std::size_t i = 0; i < b.elements("total"); ++i) {
    total[i] = 0;
    for (std::size_t k = 0; k < b.repeated_count(); ++k) total[i] += b.repeated<const float>(k)[i];
  }
}
Codelet<NoArgs> test_sum({
    .name = "test_sum",
    .buffers = {{STARPU_W, "total"}},
    .repeated = Buffer{STARPU_R, "part"},
    .cpu = sum_parts,
    .flops = [](const NoArgs&, Handles h) { return double(h.size() - 1); },
    .bytes = [](const NoArgs&, Handles h) { return 4.0 * double(h.size()); },
});

Tensor filled(std::size_t n, float value, const std::string& name) {
  Tensor t = Tensor::host(DType::f32, n, name);
  auto view = t.view(Access::write);
  for (float& v : view.as<float>()) v = value;
  return t;
}

}  // namespace

TEST_CASE("matmul FLOP counts follow 2·N·C·OC forward and 4·N·C·OC backward") {
  const tasks::NnArgs a = matmul_args();
  CHECK(tasks::nn::matmul_forward.flops(a, {}) == 2.0 * 6 * 5 * 7);
  CHECK(tasks::nn::matmul_backward.flops(a, {}) == 4.0 * 6 * 5 * 7);
  // Input and output channels are not interchangeable in the byte count (weight OC·C, bias OC).
  tasks::NnArgs swapped = a;
  std::swap(swapped.C, swapped.OC);
  CHECK(tasks::nn::matmul_forward.flops(swapped, {}) == tasks::nn::matmul_forward.flops(a, {}));
  CHECK(tasks::nn::matmul_forward.bytes(a, {}) == 4.0 * (6 * 5 + 7 * 5 + 7 + 6 * 7));
  CHECK(tasks::nn::matmul_forward.bytes(swapped, {}) != tasks::nn::matmul_forward.bytes(a, {}));
}

TEST_CASE("the nn codelets are named nn_<op> and declare their buffers") {
  CHECK(std::string(tasks::nn::matmul_forward.name()) == "nn_matmul_forward");
  REQUIRE(tasks::nn::matmul_backward.buffers().size() == 5);
  CHECK(std::string(tasks::nn::matmul_backward.buffers()[1].meaning) == "grads");
  CHECK(tasks::nn::matmul_backward.buffers()[1].mode == STARPU_RW);
  CHECK(tasks::nn::matmul_forward.starpu()->nbuffers == 3);
  CHECK(tasks::nn::matmul_forward.starpu()->model->type == STARPU_HISTORY_BASED);
}

TEST_CASE("submitting with the wrong number of handles throws, naming the task") {
  // The check comes before anything reaches StarPU: no session, and the handles are never used.
  auto fake = [](std::uintptr_t i) { return reinterpret_cast<starpu_data_handle_t>(i); };
  const tasks::NnArgs a = matmul_args();
  CHECK_THROWS_WITH(submit(tasks::nn::matmul_forward, {fake(1), fake(2)}, a, "fwd[3]"),
                    Catch::Contains("fwd[3]") && Catch::Contains("nn_matmul_forward"));
  CHECK_THROWS_AS(submit(tasks::nn::matmul_forward, {fake(1), fake(2), fake(3), fake(4)}, a, "fwd[3]"),
                  std::invalid_argument);
  CHECK_THROWS_AS(submit(tasks::nn::matmul_backward, {fake(1), fake(2), fake(3)}, a, "bwd[3]"), std::invalid_argument);
  // A repeated buffer: at least the fixed ones.
  CHECK_THROWS_AS(submit(test_sum, {}, NoArgs{}, "sum"), std::invalid_argument);
}

TEST_CASE("a declared codelet runs from its declaration on CPU workers") {
  SessionOptions options;
  options.cuda_workers = 0;
  Session session(options);
  constexpr std::size_t n = 37;
  Tensor x = filled(n, 2.0f, "x"), y = filled(n, 1.0f, "y");
  std::vector<Tensor> parts;
  for (int k = 0; k < 3; ++k) parts.push_back(filled(n, float(k + 1), "part" + std::to_string(k)));
  Tensor total = Tensor::host(DType::f32, n, "total");

  std::atomic<int> ready = 0, done = 0;
  submit(test_axpy, {x.handle(), y.handle()}, AxpyArgs{0.5f}, "axpy",
         {.priority = 1, .on_ready = [&] { ++ready; }, .on_done = [&] { ++done; }});
  submit(test_sum, {total.handle(), parts[0].handle(), parts[1].handle(), parts[2].handle()}, NoArgs{}, "sum");
  session.wait_all();

  CHECK(ready == 1);
  CHECK(done == 1);
  auto yv = y.view(Access::read);
  for (float v : yv.as<float>()) CHECK(v == 2.0f);
  auto tv = total.view(Access::read);
  for (float v : tv.as<float>()) CHECK(v == 6.0f);
}
