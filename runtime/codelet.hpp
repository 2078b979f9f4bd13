#pragma once
// Codelets declared once. A Codelet<Args> holds everything about one kernel as a StarPU task:
// its name; its buffers in order, each with its access mode and what it is; its CPU and CUDA
// functions; and its FLOP and byte counts as functions of the task's arguments. It owns the
// starpu_codelet and the history-based performance model (symbol = name, calibration files in
// $STARPU_HOME) built from that declaration.
//
// submit() is the one way to create its tasks: the handles in the declared order (their count is
// checked), the by-value argument struct Args, and a task name. The functions read their buffers
// by declared meaning (TaskBuffers::get<T>("out")), so the order is written once, in the
// declaration. How the tasks fit together: docs/architecture.md.
//
// Where its tasks may run: any worker its functions allow, except that a Work::model codelet's
// tasks (the default) go to CUDA workers only when the session has some and --cpu-compute is off
// (runtime/placement.hpp). Support codelets (optimizer, copies, fills) say `.work = Work::support`.
//
//   struct ScaleArgs { float alpha; };
//   void scale_cpu(const TaskBuffers& b, const ScaleArgs& a) {
//     float* x = b.get<float>("x");
//     for (std::size_t i = 0; i < b.elements("x"); ++i) x[i] *= a.alpha;
//   }
//   Codelet<ScaleArgs> scale_codelet({
//       .name = "scale",
//       .buffers = {{STARPU_RW, "x"}},
//       .cpu = scale_cpu,
//       .flops = [](const ScaleArgs&, Handles h) { return double(starpu_vector_get_nx(h[0])); },
//       .bytes = [](const ScaleArgs&, Handles h) { return 2.0 * starpu_data_get_size(h[0]); },
//   });
//   submit(scale_codelet, {x}, ScaleArgs{0.5f}, "scale_x");
//   submit(scale_codelet, {x}, ScaleArgs{2.0f}, "scale_x_again", {.priority = 1});
#include <starpu.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/activity.hpp"
#include "runtime/gpu_cost.hpp"
#include "runtime/placement.hpp"
#include "runtime/priorities.hpp"
#include "runtime/sim.hpp"
#include "runtime/task_name.hpp"

namespace starzero {

// One buffer of a codelet: how its tasks access it and what it is ("out", "dout", "params").
struct Buffer {
  starpu_data_access_mode mode;
  const char* meaning;
};

// What every Codelet declares, as each is constructed (static construction): for the tests that
// hold every CUDA implementation to a GPU cost class.
struct CodeletDeclared {
  std::string name;
  bool cpu = false, cuda = false, gpu_cost = false;
};
void register_codelet_declaration(CodeletDeclared declared);
std::vector<CodeletDeclared> declared_codelets();

// A task's handles, in the order its codelet declares its buffers.
using Handles = std::span<const starpu_data_handle_t>;

// The arguments of a codelet that needs none.
struct NoArgs {};

// A kernel's buffers as its CPU or CUDA function sees them: vector buffers found by their
// declared meaning, then (codelets with a repeated buffer) the variable number of trailing ones.
class TaskBuffers {
 public:
  TaskBuffers(void** buffers, std::size_t count, std::span<const Buffer> declared, const char* codelet)
      : buffers_(buffers), count_(count), declared_(declared), codelet_(codelet) {}

  // The vector buffer `meaning`, as T*, `offset` elements in.
  template <class T>
  T* get(std::string_view meaning, std::size_t offset = 0) const {
    return reinterpret_cast<T*>(STARPU_VECTOR_GET_PTR(buffers_[slot(meaning)])) + offset;
  }
  // Its bytes, untyped (copies and fills).
  void* data(std::string_view meaning) const {
    return reinterpret_cast<void*>(STARPU_VECTOR_GET_PTR(buffers_[slot(meaning)]));
  }
  std::size_t elements(std::string_view meaning) const { return STARPU_VECTOR_GET_NX(buffers_[slot(meaning)]); }
  std::size_t bytes(std::string_view meaning) const {
    void* buffer = buffers_[slot(meaning)];
    return STARPU_VECTOR_GET_NX(buffer) * STARPU_VECTOR_GET_ELEMSIZE(buffer);
  }

  // The buffer `meaning` as rows `ld` elements apart, as T*: a matrix buffer (a block of columns,
  // Tensor::split_columns) has its own leading dimension, a vector buffer rows of `vector_ld`.
  template <class T>
  std::pair<T*, std::size_t> rows(std::string_view meaning, std::size_t vector_ld) const {
    void* buffer = buffers_[slot(meaning)];
    // Every StarPU data interface starts with its id.
    if (static_cast<const starpu_matrix_interface*>(buffer)->id == STARPU_MATRIX_INTERFACE_ID)
      return {reinterpret_cast<T*>(STARPU_MATRIX_GET_PTR(buffer)), STARPU_MATRIX_GET_LD(buffer)};
    return {get<T>(meaning), vector_ld};
  }

  std::size_t repeated_count() const { return count_ - declared_.size(); }
  template <class T>
  T* repeated(std::size_t i) const {
    return reinterpret_cast<T*>(STARPU_VECTOR_GET_PTR(buffers_[declared_.size() + i]));
  }

 private:
  // A name the declaration does not have is a bug in the kernel's function: stop loudly.
  std::size_t slot(std::string_view meaning) const {
    for (std::size_t i = 0; i < declared_.size(); ++i)
      if (meaning == declared_[i].meaning) return i;
    std::fprintf(stderr, "starzero: codelet %s declares no buffer \"%.*s\"\n", codelet_, int(meaning.size()),
                 meaning.data());
    std::abort();
  }

  void** buffers_;
  std::size_t count_;
  std::span<const Buffer> declared_;
  const char* codelet_;
};

enum class CudaLaunch {
  async,        // the function only enqueues work on the worker's stream (STARPU_CUDA_ASYNC)
  synchronous,  // StarPU waits for the worker's stream before the task ends
};

// Everything about a submission besides its data and arguments.
struct TaskOptions {
  // StarPU task priority; used as given under --priorities none, else the scheme's rank wins
  // (runtime/priorities.hpp).
  int priority = 0;
  // Run on a StarPU thread as the task becomes ready (StarPU's prologue callback) and after it
  // ends (its callback). Each is destroyed right after it runs, and with it what it captured.
  std::function<void()> on_ready{};
  std::function<void()> on_done{};
};

template <class Args>
class Codelet {
  static_assert(std::is_trivially_copyable_v<Args> && std::is_default_constructible_v<Args>,
                "StarPU copies a task's arguments byte by byte (STARPU_VALUE)");

 public:
  using Function = void (*)(const TaskBuffers&, const Args&);
  // FLOPs or bytes moved by one task, from its arguments and its handles (declared order).
  using Cost = double (*)(const Args&, Handles);
  // What one task is on a GPU: its cost class and work (runtime/gpu_cost.hpp).
  using GpuCost = sim::GpuWork (*)(const Args&, Handles);

  struct Declaration {
    const char* name = nullptr;        // codelet and performance-model name
    std::vector<Buffer> buffers{};     // in the order submit() takes the handles
    std::optional<Buffer> repeated{};  // set: then any number of this buffer, given at submission
    Function cpu = nullptr;            // null: no CPU implementation
    Function cuda = nullptr;           // null: none (always null in a build without CUDA)
    CudaLaunch cuda_launch = CudaLaunch::async;
    // model: with a CUDA function, its tasks follow the session's placement of model tasks
    // (runtime/placement.hpp); support: wherever the scheduler puts them.
    Work work = Work::model;
    Cost flops = nullptr;  // required
    Cost bytes = nullptr;  // required
    // Required with a CUDA function, one of the two: what one task is on a GPU, its cost class and
    // work (runtime/gpu_cost.hpp), which the simulation charges on a GPU worker; or only the class
    // of a kernel its FLOP and byte counts above describe (streaming, copy).
    GpuCost gpu = nullptr;
    std::optional<sim::GpuCostClass> gpu_class{};
    // false: no performance model (marks never run; collectives wait on the other ranks)
    bool history_model = true;
    // CPU cores one task keeps busy (null: one), for its roofline duration in simulation.
    int (*cores)(const Args&) = nullptr;
    // Simulation only: the task's duration in microseconds by its own formula, instead of a
    // calibration or the roofline (collectives: the ring's time over the platform's GPU links,
    // which no FLOP or memory-byte count describes). Gives a performance model in simulation
    // even without history_model.
    Cost sim_us = nullptr;
  };

  explicit Codelet(Declaration declaration) : declaration_(std::move(declaration)) {
    const Declaration& d = declaration_;
    if (!d.flops || !d.bytes)
      throw std::logic_error(std::string("codelet ") + d.name + " lacks its FLOP or byte count");
    const bool gpu_cost = d.gpu || d.gpu_class;
    if (d.cuda && !gpu_cost)
      throw std::logic_error(std::string("codelet ") + d.name + " has a CUDA function but no GPU cost class");
    register_codelet_declaration({d.name, d.cpu != nullptr, d.cuda != nullptr, gpu_cost});
    codelet_.name = d.name;
    // More buffers than StarPU's static array holds (STARPU_NMAXBUFS, 8 in Debian's build): the
    // modes come with each task instead (describe() gives them all), as for a repeated buffer.
    if (d.repeated || d.buffers.size() > STARPU_NMAXBUFS) {
      codelet_.nbuffers = STARPU_VARIABLE_NBUFFERS;
    } else {
      codelet_.nbuffers = int(d.buffers.size());
      for (std::size_t i = 0; i < d.buffers.size(); ++i) codelet_.modes[i] = d.buffers[i].mode;
    }
    if (d.cpu) codelet_.cpu_funcs[0] = run_on_cpu;
#ifdef STARZERO_WITH_CUDA
    if (d.cuda) {
      codelet_.cuda_funcs[0] = run_on_cuda;
      codelet_.cuda_flags[0] = d.cuda_launch == CudaLaunch::async ? STARPU_CUDA_ASYNC : 0;
    }
#endif
    if (!codelet_.cpu_funcs[0] && !codelet_.cuda_funcs[0]) codelet_.where = STARPU_NOWHERE;
    if (d.history_model || (sim::predicts_times && d.sim_us)) {
      // Simulation: the roofline of the task's FLOP and byte counts on the simulated machine.
      model_.type = sim::predicts_times ? STARPU_PER_ARCH : STARPU_HISTORY_BASED;
      if constexpr (sim::predicts_times) {
        model_.arch_cost_function = sim_us;
        sim::register_codelet(d.name);
      }
      model_.symbol = d.name;
      codelet_.model = &model_;
    }
  }
  // StarPU keeps pointers to the codelet and its model: one object, at a fixed address.
  Codelet(const Codelet&) = delete;
  Codelet& operator=(const Codelet&) = delete;

  const char* name() const { return declaration_.name; }
  std::span<const Buffer> buffers() const { return declaration_.buffers; }
  const std::optional<Buffer>& repeated() const { return declaration_.repeated; }
  Work work() const { return declaration_.work; }
  // The `where` of its tasks in the running session; 0: the codelet's own (every worker its
  // functions allow). Only a model codelet that can run on CUDA is ever restricted.
  std::uint32_t task_where() const {
    return declaration_.work == Work::model && codelet_.cuda_funcs[0] ? session_model_where() : 0;
  }
  double flops(const Args& args, Handles handles) const { return declaration_.flops(args, handles); }
  double bytes(const Args& args, Handles handles) const { return declaration_.bytes(args, handles); }
  // What one task is on a GPU (runtime/gpu_cost.hpp); nullopt for a codelet without a CUDA function.
  std::optional<sim::GpuWork> gpu_work(const Args& args, Handles handles) const {
    const Declaration& d = declaration_;
    if (d.gpu) return d.gpu(args, handles);
    if (d.gpu_class) return sim::GpuWork{.kind = *d.gpu_class, .flops = d.flops(args, handles), .bytes = d.bytes(args, handles)};
    return std::nullopt;
  }
  // StarPU updates its own bookkeeping in the codelet and the model, hence non-const pointers.
  starpu_codelet* starpu() const { return &codelet_; }

  // The handles with their declared modes; throws std::invalid_argument if their count does not
  // match the declaration.
  std::vector<starpu_data_descr> describe(Handles handles, std::string_view task_name) const {
    const std::size_t fixed = declaration_.buffers.size();
    if (declaration_.repeated ? handles.size() < fixed : handles.size() != fixed)
      throw std::invalid_argument("task " + std::string(task_name) + ": codelet " + name() + " takes " +
                                  (declaration_.repeated ? "at least " : "") + std::to_string(fixed) +
                                  " buffers, got " + std::to_string(handles.size()));
    std::vector<starpu_data_descr> described;
    described.reserve(handles.size());
    for (std::size_t i = 0; i < handles.size(); ++i)
      described.push_back({handles[i], i < fixed ? declaration_.buffers[i].mode : declaration_.repeated->mode});
    return described;
  }

 private:
  // StarPU's entry points: the task's arguments are this codelet's address, then Args.
  static void run(void* buffers[], void* cl_arg, bool on_cuda) {
    const Codelet* self = nullptr;
    Args args{};
    starpu_codelet_unpack_args(cl_arg, &self, &args);
    const Declaration& d = self->declaration_;
    starpu_task* task = starpu_task_get_current();
    const std::size_t count = d.repeated ? STARPU_TASK_GET_NBUFFERS(task) : d.buffers.size();
    const activity::Scope running(std::string("task ") + (task->name ? task->name : d.name));
    (on_cuda ? d.cuda : d.cpu)(TaskBuffers(buffers, count, d.buffers, d.name), args);
  }
  static void run_on_cpu(void* buffers[], void* cl_arg) { run(buffers, cl_arg, false); }
  // A task's duration in simulation (microseconds): what a real run recorded (starzero calibrate),
  // else its own FLOP and byte counts on the simulated machine's roofline; its execution on a CPU
  // worker also pays StarPU's per-task overhead measured on the real machine (executed_us).
  static double sim_us(starpu_task* task, starpu_perfmodel_arch* arch, unsigned /*nimpl*/) {
    const Codelet* self = nullptr;
    Args args{};
    starpu_codelet_unpack_args(task->cl_arg, &self, &args);
    const Declaration& d = self->declaration_;
    const auto task_handles = [task] {
      std::vector<starpu_data_handle_t> handles(STARPU_TASK_GET_NBUFFERS(task));
      for (std::size_t i = 0; i < handles.size(); ++i) handles[i] = STARPU_TASK_GET_HANDLE(task, i);
      return handles;
    };
    if (d.sim_us) return sim::executed_us(task, arch, d.sim_us(args, task_handles()));
    const double calibrated = sim::calibrated_us(self->name(), arch, starpu_task_data_footprint(task));
    sim::count_duration_source(calibrated == calibrated);
    // A CPU task a real run recorded needs nothing else (the common case: no handle list built).
    if (calibrated == calibrated && !sim::is_gpu(arch)) return sim::executed_us(task, arch, calibrated);
    const std::vector<starpu_data_handle_t> handles = task_handles();
    // On a GPU: its cost class's charge (runtime/gpu_cost.hpp), or what a real run recorded.
    if (const std::optional<sim::GpuWork> work = sim::is_gpu(arch) ? self->gpu_work(args, handles) : std::nullopt) {
      const double us = calibrated == calibrated ? calibrated : sim::gpu_work_us(*work, sim::gpu_figures());
      return sim::executed_gpu_us(task, arch, work->kind, us);
    }
    if (calibrated == calibrated) return sim::executed_us(task, arch, calibrated);  // a real run recorded it
    return sim::executed_us(task, arch,
                            sim::roofline_us(arch, self->flops(args, handles), self->bytes(args, handles),
                                             d.cores ? d.cores(args) : 1));
  }
  [[maybe_unused]] static void run_on_cuda(void* buffers[], void* cl_arg) { run(buffers, cl_arg, true); }

  Declaration declaration_;
  mutable starpu_perfmodel model_{};
  mutable starpu_codelet codelet_{};
};

namespace detail {
// A TaskOptions callback, owned by the task from submission on.
inline void run_task_callback(void* arg) {
  std::unique_ptr<std::function<void()>> callback(static_cast<std::function<void()>*>(arg));
  (*callback)();
}
inline std::unique_ptr<std::function<void()>> task_callback(const std::function<void()>& f) {
  return f ? std::make_unique<std::function<void()>>(f) : nullptr;
}
}  // namespace detail

// Submits one task of `codelet`: `handles` in its declared order, `args` copied into the task,
// STARPU_FLOPS from the declaration's FLOP count. Throws std::invalid_argument if the number of
// handles does not match the declaration, std::runtime_error naming the task if StarPU refuses it.
template <class Args>
void submit(const Codelet<Args>& codelet, const std::vector<starpu_data_handle_t>& handles, const Args& args,
            std::string_view task_name, const TaskOptions& options = {}) {
  const std::vector<starpu_data_descr> buffers = codelet.describe(handles, task_name);
  const Codelet<Args>* self = &codelet;
  const double flops = codelet.flops(args, handles);
  auto on_ready = detail::task_callback(options.on_ready);
  auto on_done = detail::task_callback(options.on_done);
  void (*on_ready_func)(void*) = on_ready ? detail::run_task_callback : nullptr;
  void (*on_done_func)(void*) = on_done ? detail::run_task_callback : nullptr;
  starpu_task* task = starpu_task_build(
      codelet.starpu(), STARPU_DATA_MODE_ARRAY, buffers.data(), int(buffers.size()), STARPU_VALUE, &self, sizeof self,
      STARPU_VALUE, &args, sizeof args, STARPU_FLOPS, flops, STARPU_PRIORITY, options.priority,
      STARPU_PROLOGUE_CALLBACK, on_ready_func, STARPU_PROLOGUE_CALLBACK_ARG_NFREE, on_ready.get(),
      STARPU_CALLBACK_WITH_ARG_NFREE, on_done_func, on_done.get(), STARPU_NAME, intern_task_name(task_name), 0);
  if (!task)
    throw std::runtime_error("building task " + std::string(task_name) + " (codelet " + codelet.name() + ") failed");
  // Before the priorities: the critical path's expected duration is on the workers it may use.
  if (const std::uint32_t where = codelet.task_where()) task->where = int32_t(where);
  TaskPriorities& priorities = TaskPriorities::instance();
  if (priorities.records()) {
    std::vector<starpu_data_access_mode> modes;
    modes.reserve(buffers.size());
    for (const starpu_data_descr& b : buffers) modes.push_back(b.mode);
    const double expected_us = expected_task_us(task, roofline_us(flops, codelet.bytes(args, handles)));
    task->priority = priorities.prioritise({task_name, expected_us, handles, modes});
  }
  const int ret = starpu_task_submit(task);
  if (ret != 0) {
    task->destroy = 0;
    starpu_task_destroy(task);
    throw std::runtime_error("submitting task " + std::string(task_name) + " (codelet " + codelet.name() +
                             ") failed (StarPU code " + std::to_string(ret) + ")");
  }
  // The task owns its callbacks now (detail::run_task_callback deletes each after it runs).
  on_ready.release();
  on_done.release();
}

}  // namespace starzero

// A CUDA function of a declaration: itself with CUDA, null without (its code is not compiled).
#ifdef STARZERO_WITH_CUDA
#define STARZERO_CUDA_FUNC(f) (f)
#else
#define STARZERO_CUDA_FUNC(f) nullptr
#endif
