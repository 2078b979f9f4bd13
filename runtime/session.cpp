#include "runtime/session.hpp"

#include <dlfcn.h>
#include <malloc.h>
#include <starpu.h>
#include <starpu_heteroprio.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "runtime/sim.hpp"

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

// A loaded policy plugin; the library stays mapped until the process ends (StarPU keeps
// pointers into it for as long as a session runs).
struct LoadedPlugin {
  std::string path;
  std::unique_ptr<void, int (*)(void*)> library{nullptr, dlclose};
  std::vector<starpu_sched_policy*> policies;
};

std::vector<LoadedPlugin>& loaded_plugins() {
  static std::vector<LoadedPlugin> plugins;
  return plugins;
}

starpu_sched_policy* plugin_policy(const std::string& name) {
  for (const LoadedPlugin& plugin : loaded_plugins())
    for (starpu_sched_policy* p : plugin.policies)
      if (name == p->policy_name) return p;
  return nullptr;
}

// heteroprio has no usable default: StarPU's own set-up maps priority p to bucket p on every
// worker kind, with the context's priority range left at 0..0 (one bucket). Ours: priorities
// 0..7, eight buckets, every worker kind takes the highest non-empty bucket first.
constexpr int heteroprio_buckets = 8;

void heteroprio_default_setup(unsigned sched_ctx) {
  starpu_sched_ctx_set_min_priority(sched_ctx, 0);
  starpu_sched_ctx_set_max_priority(sched_ctx, heteroprio_buckets - 1);
  const auto map_all = [&](enum starpu_heteroprio_types kind) {
    starpu_heteroprio_set_nb_prios(sched_ctx, kind, heteroprio_buckets);
    for (int i = 0; i < heteroprio_buckets; ++i)
      starpu_heteroprio_set_mapping(sched_ctx, kind, unsigned(i), unsigned(heteroprio_buckets - 1 - i));
  };
  if (starpu_cpu_worker_get_count() > 0) map_all(STARPU_CPU_IDX);
  if (starpu_cuda_worker_get_count() > 0) map_all(STARPU_CUDA_IDX);
}

void set_optional_env(const char* name, const std::optional<double>& value) {
  if (value) {
    if (!(*value >= 0)) throw std::invalid_argument(std::string(name) + " must be a number >= 0");
    set_env(name, std::to_string(*value));
  } else {
    unsetenv(name);
  }
}

}  // namespace

std::vector<std::string> scheduling_policies() {
  std::vector<std::string> names;
  for (starpu_sched_policy** p = starpu_sched_get_predefined_policies(); *p != nullptr; ++p)
    names.emplace_back((*p)->policy_name);
  names.emplace_back("heft");
  for (const LoadedPlugin& plugin : loaded_plugins())
    for (const starpu_sched_policy* p : plugin.policies) names.emplace_back(p->policy_name);
  return names;
}

bool policy_uses_priorities(const std::string& policy) {
  // From StarPU 1.3.10's sources: these keep ready tasks in priority order (sorted FIFOs, the
  // priority deques of the work-stealing policies, heteroprio's buckets, prio components).
  static const std::vector<std::string> ordered = {"dmdap", "dmdas", "dmdasd", "prio", "heteroprio", "ws", "lws"};
  if (std::find(ordered.begin(), ordered.end(), policy) != ordered.end()) return true;
  if (policy.starts_with("modular-") && policy.find("prio") != std::string::npos) return true;
  if (const starpu_sched_policy* p = plugin_policy(policy))
    return p->policy_description && std::string(p->policy_description).find("priorit") != std::string::npos;
  return false;
}

std::string scheduling_policies_help() {
  std::string text = "scheduling policies (--sched NAME; * = orders ready tasks by priority):\n";
  const auto line = [&](const std::string& name, const char* description) {
    std::string row = "  " + name + (policy_uses_priorities(name) ? " *" : "");
    row.resize(std::max<std::size_t>(row.size() + 1, 34), ' ');
    text += row + (description ? description : "") + "\n";
  };
  for (starpu_sched_policy** p = starpu_sched_get_predefined_policies(); *p != nullptr; ++p)
    line((*p)->policy_name, (*p)->policy_description);
  line("heft", "alias of dmda");
  for (const LoadedPlugin& plugin : loaded_plugins())
    for (const starpu_sched_policy* p : plugin.policies)
      line(p->policy_name,
           (std::string(p->policy_description ? p->policy_description : "") + " (" + plugin.path + ")").c_str());
  return text;
}

void register_policy_plugin(const std::string& path) {
  for (const LoadedPlugin& plugin : loaded_plugins())
    if (plugin.path == path) return;
  LoadedPlugin plugin;
  plugin.path = path;
  plugin.library.reset(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!plugin.library) throw std::invalid_argument("cannot load policy plugin " + path + ": " + dlerror());
  using Entry = starpu_sched_policy** (*)();
  const auto entry = reinterpret_cast<Entry>(dlsym(plugin.library.get(), "starzero_scheduling_policies"));
  if (!entry) throw std::invalid_argument("policy plugin " + path + " has no starzero_scheduling_policies()");
  for (starpu_sched_policy** p = entry(); p && *p; ++p) {
    if (!(*p)->policy_name) throw std::invalid_argument("policy plugin " + path + ": a policy without a name");
    plugin.policies.push_back(*p);
  }
  if (plugin.policies.empty()) throw std::invalid_argument("policy plugin " + path + " offers no policy");
  loaded_plugins().push_back(std::move(plugin));
}

namespace {

// What starpu_init reads from the environment (1.3 has no conf fields for it): tracing,
// scheduler parameters, memory limits, write-back. `trace_file` gets the FxT file's path.
void set_starpu_environment(const SessionOptions& options, std::string& trace_file) {
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
    trace_file = options.trace_dir + "/" + suffix + "_0";
  }
  set_optional_env("STARPU_SCHED_ALPHA", options.sched_alpha);
  set_optional_env("STARPU_SCHED_BETA", options.sched_beta);
  set_optional_env("STARPU_SCHED_GAMMA", options.sched_gamma);
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
}

}  // namespace

Session::Session(const SessionOptions& options) {
  if (session_alive) throw std::logic_error("a StarPU session is already running in this process");

  if (!options.policy_plugin.empty()) register_policy_plugin(options.policy_plugin);
  policy_ = options.policy;
  if (policy_.empty()) {
    const char* from_env = std::getenv("STARPU_SCHED");
    policy_ = from_env && *from_env ? from_env : "lws";
  }
  const auto policies = scheduling_policies();
  if (std::find(policies.begin(), policies.end(), policy_) == policies.end())
    throw std::invalid_argument("unknown scheduling policy '" + policy_ +
                                "' (see --sched help); valid: " + join(policies));
  if (options.cpu_workers < -1 || options.cuda_workers < -1 || options.cuda_device < -1)
    throw std::invalid_argument("worker counts must be >= 0 (or -1 for StarPU's default)");

  set_starpu_environment(options, trace_file_);

  starpu_conf conf;
  if (starpu_conf_init(&conf) != 0) throw std::runtime_error("starpu_conf_init failed");
  if (starpu_sched_policy* custom = plugin_policy(policy_)) {
    conf.sched_policy = custom;
    conf.sched_policy_name = nullptr;
  } else {
    conf.sched_policy_name = policy_.c_str();
  }
  if (policy_ == "heteroprio") conf.sched_policy_init = heteroprio_default_setup;
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
  if (options.profile_workers && sim::host_is_this_machine) starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
  if constexpr (sim::predicts_times) sim::load_calibration(policy_);
  // One cuBLAS handle per CUDA worker, bound to its stream (starpu_cublas_get_local_handle).
  // Not in simulation: no kernel runs there, and cuBLAS would touch a GPU that is not there.
  if (sim::kernels_run && starpu_cuda_worker_get_count() > 0) starpu_cublas_init();
  TaskPriorities::instance().configure(options.priorities);
  set_session_model_where(model_task_where(options.cpu_compute, int(starpu_cuda_worker_get_count())));
  session_alive = true;
}

Session::~Session() {
  starpu_task_wait_for_all();
  if (sim::kernels_run && starpu_cuda_worker_get_count() > 0) starpu_cublas_shutdown();
  starpu_shutdown();
  TaskPriorities::instance().configure(PriorityScheme::none);
  set_session_model_where(0);
  session_alive = false;
}

int Session::cpu_workers() const { return int(starpu_cpu_worker_get_count()); }
int Session::cuda_workers() const { return int(starpu_cuda_worker_get_count()); }

std::string Session::workers_summary() const {
  std::string text = std::to_string(cpu_workers()) + " CPU + " + std::to_string(cuda_workers()) + " CUDA workers";
  if (cuda_workers() > 0)
    text += model_on_cuda_only() ? ", model tasks on CUDA workers only" : ", model tasks on CPU and CUDA workers";
  return text;
}

std::size_t Session::cuda_memory_bytes() const {
  std::size_t smallest = 0;
  for (unsigned w = 0; w < starpu_worker_get_count(); ++w) {
    if (starpu_worker_get_type(int(w)) != STARPU_CUDA_WORKER) continue;
    const starpu_ssize_t total = starpu_memory_get_total(starpu_worker_get_memory_node(w));
    if (total > 0 && (smallest == 0 || std::size_t(total) < smallest)) smallest = std::size_t(total);
  }
  return smallest;
}

void Session::wait_all() const {
  if (starpu_task_wait_for_all() != 0) throw std::runtime_error("starpu_task_wait_for_all failed");
}

StepMark::StepMark(long step) {
  starpu_iteration_push(static_cast<unsigned long>(step));
  TaskPriorities::instance().begin_step();
}
StepMark::~StepMark() {
  TaskPriorities::instance().end_step();
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
