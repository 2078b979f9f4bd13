#include "runtime/session.hpp"

#include <malloc.h>
#include <starpu.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace starzero {

namespace {

bool session_alive = false;

void set_env(const char* name, const std::string& value) {
  if (setenv(name, value.c_str(), 1) != 0) throw std::runtime_error(std::string("setenv ") + name + " failed");
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<std::string> scheduling_policies() {
  std::vector<std::string> names;
  for (starpu_sched_policy** p = starpu_sched_get_predefined_policies(); *p != nullptr; ++p)
    names.emplace_back((*p)->policy_name);
  return names;
}

Session::Session(const SessionOptions& options) {
  if (session_alive) throw std::logic_error("a StarPU session is already running in this process");

  policy_ = options.policy;
  if (policy_.empty()) {
    const char* from_env = std::getenv("STARPU_SCHED");
    policy_ = from_env && *from_env ? from_env : "lws";
  }
  const auto policies = scheduling_policies();
  bool known = policy_ == "heft";  // StarPU's alias of dmda
  for (const auto& p : policies) known = known || p == policy_;
  if (!known) throw std::invalid_argument("unknown scheduling policy '" + policy_ + "'; valid: " + join(policies));
  if (options.cpu_workers < -1 || options.cuda_workers < -1 || options.cuda_device < -1)
    throw std::invalid_argument("worker counts must be >= 0 (or -1 for StarPU's default)");

  // These settings are read from the environment by starpu_init (1.3 has no conf fields).
  // StarPU's start-up chatter (e.g. the FxT build warning) is off unless the user asks.
  setenv("STARPU_SILENT", "1", 0);
  if (options.trace_dir.empty()) {
    set_env("STARPU_FXT_TRACE", "0");
  } else {
    std::error_code ec;
    std::filesystem::create_directories(options.trace_dir, ec);
    if (ec) throw std::runtime_error("cannot create trace directory " + options.trace_dir + ": " + ec.message());
    set_env("STARPU_FXT_TRACE", "1");
    set_env("STARPU_FXT_PREFIX", options.trace_dir);
    const std::string suffix = "starzero_r" + std::to_string(options.trace_rank);
    set_env("STARPU_FXT_SUFFIX", suffix);
    trace_file_ = options.trace_dir + "/" + suffix + "_0";
  }
  if (options.cpu_memory_limit_mib)
    set_env("STARPU_LIMIT_CPU_MEM", std::to_string(options.cpu_memory_limit_mib));
  else
    unsetenv("STARPU_LIMIT_CPU_MEM");
  if (options.keep_freed_memory) {
    // Process-wide and only ever raised: glibc's largest mmap threshold, and no trimming below 1 GiB.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  if (!options.background_writeback) {
    set_env("STARPU_MINIMUM_CLEAN_BUFFERS", "0");
    set_env("STARPU_TARGET_CLEAN_BUFFERS", "0");
  }
  if (options.cuda_memory_limit_mib)
    set_env("STARPU_LIMIT_CUDA_MEM", std::to_string(options.cuda_memory_limit_mib));
  else
    unsetenv("STARPU_LIMIT_CUDA_MEM");

  starpu_conf conf;
  if (starpu_conf_init(&conf) != 0) throw std::runtime_error("starpu_conf_init failed");
  conf.sched_policy_name = policy_.c_str();
  conf.precedence_over_environment_variables = 1;  // our options win over STARPU_* variables
  conf.ncpus = options.cpu_workers;
  conf.ncuda = options.cuda_workers;
  if (options.cuda_device >= 0 && options.cuda_workers != 0) {
    conf.ncuda = 1;
    conf.use_explicit_workers_cuda_gpuid = 1;
    conf.workers_cuda_gpuid[0] = unsigned(options.cuda_device);
  }
  conf.nopencl = 0;
  const int ret = starpu_init(&conf);
  if (ret == -ENODEV) throw std::runtime_error("starpu_init: no worker available for this configuration");
  if (ret != 0) throw std::runtime_error("starpu_init failed with code " + std::to_string(ret));
  // One cuBLAS handle per CUDA worker, bound to its stream (starpu_cublas_get_local_handle).
  if (starpu_cuda_worker_get_count() > 0) starpu_cublas_init();
  session_alive = true;
}

Session::~Session() {
  starpu_task_wait_for_all();
  if (starpu_cuda_worker_get_count() > 0) starpu_cublas_shutdown();
  starpu_shutdown();
  session_alive = false;
}

int Session::cpu_workers() const { return int(starpu_cpu_worker_get_count()); }
int Session::cuda_workers() const { return int(starpu_cuda_worker_get_count()); }

void Session::wait_all() const {
  if (starpu_task_wait_for_all() != 0) throw std::runtime_error("starpu_task_wait_for_all failed");
}

StepMark::StepMark(long step) { starpu_iteration_push(static_cast<unsigned long>(step)); }
StepMark::~StepMark() {
  starpu_iteration_pop();
  // StarPU 1.3.10's pop clears the level above the one it leaves (task.c: iterations[level]
  // with the level before the decrement), so the step number would stick to every later task
  // (evaluation, shutdown). A push of -1 and its pop leave level 0 at -1: no "Iteration" line.
  starpu_iteration_push(static_cast<unsigned long>(-1L));
  starpu_iteration_pop();
}

PausedWorkers::PausedWorkers() { starpu_pause(); }
PausedWorkers::~PausedWorkers() { starpu_resume(); }

}  // namespace starzero
