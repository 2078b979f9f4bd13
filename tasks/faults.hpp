#pragma once
// Faults on purpose, for the tests of what a run does when something goes wrong (`starzero train
// --debug-*`): a task that never ends, as a kernel stuck in a loop would be.
#include <starpu.h>

#include <string>

namespace starzero::tasks {

// A CPU task that takes `x` (RW) and never returns; the process has to be ended from outside.
void submit_hang(starpu_data_handle_t x, const std::string& name);

}  // namespace starzero::tasks
