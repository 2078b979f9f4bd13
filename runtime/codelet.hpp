#pragma once
// A StarPU codelet together with its history-based performance model: one object per kernel,
// declared next to its CPU and CUDA functions. The name shows in traces and names the model's
// calibration file in $STARPU_HOME. A null CUDA function (or a build without CUDA) makes a
// CPU-only codelet; no modes means a variable number of buffers given at submission.
#include <starpu.h>

#include <initializer_list>

namespace starzero {

struct Codelet {
  starpu_perfmodel model{};
  starpu_codelet codelet{};

  Codelet(const char* name, starpu_cpu_func_t cpu, [[maybe_unused]] starpu_cuda_func_t cuda,
          std::initializer_list<starpu_data_access_mode> modes) {
    model.type = STARPU_HISTORY_BASED;
    model.symbol = name;
    codelet.name = name;
    codelet.cpu_funcs[0] = cpu;
#ifdef STARZERO_WITH_CUDA
    if (cuda) {
      codelet.cuda_funcs[0] = cuda;
      codelet.cuda_flags[0] = STARPU_CUDA_ASYNC;
    }
#endif
    if (modes.size() == 0) {
      codelet.nbuffers = STARPU_VARIABLE_NBUFFERS;
    } else {
      codelet.nbuffers = int(modes.size());
      int i = 0;
      for (auto mode : modes) codelet.modes[i++] = mode;
    }
    codelet.model = &model;
  }
  Codelet(const Codelet&) = delete;
  Codelet& operator=(const Codelet&) = delete;
  starpu_codelet* get() { return &codelet; }
};

}  // namespace starzero

#ifdef STARZERO_WITH_CUDA
#define STARZERO_CUDA_FUNC(f) (f)
#else
#define STARZERO_CUDA_FUNC(f) nullptr
#endif
