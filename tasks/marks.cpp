#include "tasks/marks.hpp"

#include "runtime/codelet.hpp"

namespace starzero::tasks {

namespace {

// No function (STARPU_NOWHERE), any number of handles in W mode, no performance model; FLOPs and
// bytes 0: nothing runs and nothing moves.
Codelet<NoArgs> mark_codelet({
    .name = "mark",
    .repeated = Buffer{STARPU_W, "marked"},
    .work = Work::support,
    .flops = [](const NoArgs&, Handles) { return 0.0; },
    .bytes = [](const NoArgs&, Handles) { return 0.0; },
    .history_model = false,
});

}  // namespace

void submit_mark(const std::vector<starpu_data_handle_t>& handles, std::function<void()> on_reached,
                 const std::string& name) {
  submit(mark_codelet, handles, NoArgs{}, name, {.on_ready = std::move(on_reached)});
}

}  // namespace starzero::tasks
