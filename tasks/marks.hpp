#pragma once
// Marks: tasks that compute nothing and move no data (StarPU's STARPU_NOWHERE codelets). A mark
// takes its handles in W mode (no data is read, so handles not yet written or already
// invalidated are fine), so it runs after every task submitted before it on them and before
// every task submitted after it; its callback then runs at that point of the graph: as the mark
// becomes ready (StarPU's prologue callback), before any task that waits for the mark can start. Only use
// it where the handle's content is dead or about to be overwritten.
// The engine uses them for ZeRO-3's prefetch window and to account transient memory.
#include <starpu.h>

#include <functional>
#include <string>
#include <vector>

namespace starzero::tasks {

void submit_mark(const std::vector<starpu_data_handle_t>& handles, std::function<void()> on_reached,
                 const std::string& name);

}  // namespace starzero::tasks
