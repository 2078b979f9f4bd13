// runtime/codelet.hpp and the nn declarations (tasks/nn.hpp): the FLOP counts of matmul forward
// and backward against their formulas on a non-square shape, the handle-count check of submit(),
// and a submission end to end on CPU workers: buffers read by their declared meaning, a repeated
// (variable-count) buffer, the on_ready / on_done callbacks and the priority option; where a
// model codelet's tasks may run (runtime/placement.hpp) against a support codelet's.
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
double axpy_flops(const AxpyArgs&, Handles h) { return 2.0 * double(starpu_vector_get_nx(h[0])); }
double axpy_bytes(const AxpyArgs&, Handles h) { return 3.0 * double(starpu_data_get_size(h[0])); }
Codelet<AxpyArgs> test_axpy({
    .name = "test_axpy",
    .buffers = {{STARPU_R, "x"}, {STARPU_RW, "y"}},
    .cpu = axpy,
    .flops = axpy_flops,
    .bytes = axpy_bytes,
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

// The same function as a model kernel with a CUDA function (never run here).
Codelet<AxpyArgs> test_model_axpy({
    .name = "test_model_axpy",
    .buffers = {{STARPU_R, "x"}, {STARPU_RW, "y"}},
    .cpu = axpy,
    .cuda = STARZERO_CUDA_FUNC(axpy),
    .flops = axpy_flops,
    .bytes = axpy_bytes,
    .gpu_class = sim::GpuCostClass::streaming,
});
// The same function declared as support work, with a CUDA function (never run here): what the
// element-wise and optimizer codelets are.
Codelet<AxpyArgs> test_support_axpy({
    .name = "test_support_axpy",
    .buffers = {{STARPU_R, "x"}, {STARPU_RW, "y"}},
    .cpu = axpy,
    .cuda = STARZERO_CUDA_FUNC(axpy),
    .work = Work::support,
    .flops = axpy_flops,
    .bytes = axpy_bytes,
    .gpu_class = sim::GpuCostClass::streaming,
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

TEST_CASE("a model codelet's tasks follow the session's placement, support and CPU-only codelets' do not") {
  CHECK(model_task_where(CpuCompute::off, 1) == STARPU_CUDA);
  CHECK(model_task_where(CpuCompute::on, 1) == 0);
  CHECK(model_task_where(CpuCompute::off, 0) == 0);
  CHECK(model_task_where(CpuCompute::on, 0) == 0);
  CHECK(parse_cpu_compute("off") == CpuCompute::off);
  CHECK(parse_cpu_compute("on") == CpuCompute::on);
  CHECK_FALSE(parse_cpu_compute("yes"));
  CHECK(tasks::nn::layernorm_forward.work() == Work::model);

  // Outside a session nothing is restricted.
  REQUIRE(session_model_where() == 0);
  CHECK(tasks::nn::layernorm_forward.task_where() == 0);
  // What a session with a CUDA worker and --cpu-compute off sets.
  set_session_model_where(STARPU_CUDA);
#ifdef STARZERO_WITH_CUDA
  CHECK(tasks::nn::layernorm_forward.task_where() == STARPU_CUDA);
  CHECK(tasks::nn::attention_backward.task_where() == STARPU_CUDA);
#else
  CHECK(tasks::nn::layernorm_forward.task_where() == 0);  // no CUDA function: the CPU is the only choice
#endif
  CHECK(test_support_axpy.task_where() == 0);
  CHECK(test_axpy.task_where() == 0);  // a model codelet without a CUDA function
  set_session_model_where(0);
}

TEST_CASE("a CPU-only session runs model tasks on its CPU workers under either --cpu-compute") {
  for (const CpuCompute cpu_compute : {CpuCompute::off, CpuCompute::on}) {
    SessionOptions options;
    options.cuda_workers = 0;
    options.cpu_compute = cpu_compute;
    Session session(options);
    CHECK_FALSE(session.model_on_cuda_only());
    CHECK(session_model_where() == 0);
    CHECK(session.workers_summary() == std::to_string(session.cpu_workers()) + " CPU + 0 CUDA workers");
  }
}

#ifdef STARZERO_WITH_CUDA
TEST_CASE("submit() hands the session's placement to StarPU: a model task restricted to CUDA has no worker here") {
  SessionOptions options;
  options.cuda_workers = 0;
  Session session(options);
  // Pretend the session had a CUDA worker: StarPU itself must then refuse the task (no worker can
  // run it), which shows the mask reaches the task and is not just computed.
  set_session_model_where(STARPU_CUDA);
  Tensor x = filled(8, 1.0f, "x"), y = filled(8, 1.0f, "y");
  CHECK_THROWS_WITH(submit(test_model_axpy, {x.handle(), y.handle()}, AxpyArgs{1.0f}, "restricted"),
                    Catch::Contains("restricted") && Catch::Contains("StarPU code"));
  // A support task with the same functions still runs on the CPU workers.
  submit(test_support_axpy, {x.handle(), y.handle()}, AxpyArgs{1.0f}, "support");
  set_session_model_where(0);
  session.wait_all();
  auto yv = y.view(Access::read);
  for (float v : yv.as<float>()) CHECK(v == 2.0f);
}
#endif
