// A scheduling policy of one's own, written against StarPU's starpu_sched_policy interface and
// plugged into `starzero` by name:
//
//   starzero train --sched-plugin build/examples/libcentral_priority_policy.so
//                  --sched central-priority --priorities critical-path ...   (one line)
//
// The policy: one central list of ready tasks, kept in priority order (highest first; equal
// priorities first come, first served); an idle worker takes the first task it can run. It is
// StarPU's `prio` written out in ~100 lines, to show the parts a policy has: its state
// (starpu_sched_ctx_set_policy_data), push_task (a task became ready), pop_task (a worker
// asks for work) and waking a sleeping worker. A plugin exports one C function that lists its
// policies (runtime/session.hpp, register_policy_plugin).
//
// Measured against StarPU's own policies with `starzero sweep` (docs/scheduling.md): it does
// not beat them on our graphs, so it stays an example.
#include <starpu.h>

#include <cstdint>
#include <iterator>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

namespace {

struct ReadyTasks {
  std::mutex mutex;
  std::list<starpu_task*> tasks;  // highest priority first
};

ReadyTasks& ready_tasks(unsigned sched_ctx) {
  return *static_cast<ReadyTasks*>(starpu_sched_ctx_get_policy_data(sched_ctx));
}

void init_sched(unsigned sched_ctx) {
  // The context owns the state from here to deinit_sched.
  starpu_sched_ctx_set_policy_data(sched_ctx, std::make_unique<ReadyTasks>().release());
  // Any int is a valid priority: starzero's critical-path ranks in µs.
  starpu_sched_ctx_set_min_priority(sched_ctx, INT32_MIN);
  starpu_sched_ctx_set_max_priority(sched_ctx, INT32_MAX);
}

void deinit_sched(unsigned sched_ctx) {
  std::unique_ptr<ReadyTasks> owned(&ready_tasks(sched_ctx));
  starpu_sched_ctx_set_policy_data(sched_ctx, nullptr);
}

int push_task(starpu_task* task) {
  const unsigned sched_ctx = task->sched_ctx;
  ReadyTasks& ready = ready_tasks(sched_ctx);
  // The workers that can run it, found while the task is still ours: once it is in the list and
  // the lock is released, a worker may take it, run it and free it at any moment.
  std::vector<unsigned> able;
  starpu_worker_collection* workers = starpu_sched_ctx_get_worker_collection(sched_ctx);
  starpu_sched_ctx_iterator it;
  workers->init_iterator(workers, &it);
  while (workers->has_next(workers, &it)) {
    const unsigned worker = workers->get_next(workers, &it);
    if (starpu_worker_can_execute_task_first_impl(worker, task, nullptr)) able.push_back(worker);
  }
  {
    const std::lock_guard lock(ready.mutex);
    auto after = ready.tasks.begin();
    while (after != ready.tasks.end() && (*after)->priority >= task->priority) ++after;
    ready.tasks.insert(after, task);
    starpu_push_task_end(task);
  }
  // Wake one worker that can run it (a sleeping worker does not ask for work by itself).
  for (unsigned worker : able)
    if (starpu_wake_worker_relax_light(int(worker))) break;
  return 0;
}

starpu_task* pop_task(unsigned sched_ctx) {
  ReadyTasks& ready = ready_tasks(sched_ctx);
  const int worker = starpu_worker_get_id_check();
  const std::lock_guard lock(ready.mutex);
  for (auto t = ready.tasks.begin(); t != ready.tasks.end(); ++t) {
    unsigned implementation = 0;
    if (starpu_worker_can_execute_task_first_impl(unsigned(worker), *t, &implementation)) {
      starpu_task* task = *t;
      ready.tasks.erase(t);
      starpu_task_set_implementation(task, implementation);
      return task;
    }
  }
  return nullptr;
}

starpu_sched_policy central_priority = [] {
  starpu_sched_policy p{};
  p.init_sched = init_sched;
  p.deinit_sched = deinit_sched;
  p.push_task = push_task;
  p.pop_task = pop_task;
  p.policy_name = "central-priority";
  p.policy_description = "example plugin: one central list in priority order";
  p.worker_type = STARPU_WORKER_LIST;
  return p;
}();

starpu_sched_policy* policies[] = {&central_priority, nullptr};

}  // namespace

// The plugin's one entry point (runtime/session.hpp, register_policy_plugin).
extern "C" starpu_sched_policy** starzero_scheduling_policies() { return policies; }
