#include "tasks/faults.hpp"

#include <chrono>
#include <thread>

#include "runtime/codelet.hpp"

namespace starzero::tasks {

namespace {

[[noreturn]] void hang_cpu(const TaskBuffers&, const NoArgs&) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

Codelet<NoArgs> hang_codelet({
    .name = "debug_hang",
    .buffers = {{STARPU_RW, "x"}},
    .cpu = hang_cpu,
    .work = Work::support,
    .flops = [](const NoArgs&, Handles) { return 0.0; },
    .bytes = [](const NoArgs&, Handles) { return 0.0; },
});

}  // namespace

void submit_hang(starpu_data_handle_t x, const std::string& name) { submit(hang_codelet, {x}, NoArgs{}, name); }

}  // namespace starzero::tasks
