#include "tasks/marks.hpp"

#include <memory>
#include <stdexcept>

#include "runtime/task_name.hpp"

namespace starzero::tasks {

namespace {

starpu_codelet mark_codelet = [] {
  starpu_codelet cl{};
  cl.where = STARPU_NOWHERE;
  cl.nbuffers = STARPU_VARIABLE_NBUFFERS;
  cl.name = "mark";
  return cl;
}();

void run_callback(void* arg) {
  std::unique_ptr<std::function<void()>> callback(static_cast<std::function<void()>*>(arg));
  if (*callback) (*callback)();
}

}  // namespace

void submit_mark(const std::vector<starpu_data_handle_t>& handles, std::function<void()> on_reached,
                 const std::string& name) {
  std::vector<starpu_data_descr> buffers;
  for (auto h : handles) buffers.push_back({h, STARPU_W});
  auto callback = std::make_unique<std::function<void()>>(std::move(on_reached));
  const int ret = starpu_task_insert(&mark_codelet, STARPU_DATA_MODE_ARRAY, buffers.data(), int(buffers.size()),
                                     STARPU_PROLOGUE_CALLBACK, run_callback, STARPU_PROLOGUE_CALLBACK_ARG_NFREE,
                                     callback.get(), STARPU_NAME,
                                     intern_task_name(name), 0);
  if (ret != 0) throw std::runtime_error("submitting mark " + name + " failed (StarPU code " + std::to_string(ret) + ")");
  callback.release();  // owned by the task's callback now
}

}  // namespace starzero::tasks
