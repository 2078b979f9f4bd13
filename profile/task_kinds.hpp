#pragma once
// How the trace report groups and classifies tasks by name (docs/task-names.md lists the names):
// a task's kind is its name without indexes, and a kind is compute, AdamW or a collective by its
// name alone. The definitions are in docs/trace-report.md.
#include <string>
#include <string_view>

namespace starzero::profile {

// The name without every "[...]" index and without a trailing ".t<k>" tile suffix:
// "qkv_bwd_input[3].t1" -> "qkv_bwd_input", "adamw[5]" -> "adamw".
std::string task_kind(std::string_view name);

// Collective communication: kinds starting with all_gather, reduce_scatter or all_reduce.
bool is_collective_kind(std::string_view kind);
// Forward/backward compute: kinds ending with _fwd, _bwd, _bwd_input, _bwd_weight, _bwd_bias
// or _bwd_params, collectives excepted (all_gather_fwd is communication).
bool is_compute_kind(std::string_view kind);
// The optimizer step: kinds starting with adamw (adamw, adamw_cpu, ...).
bool is_adamw_kind(std::string_view kind);
// ZeRO-Offload's CPU AdamW, by its task's Model (the codelet's name, optimizers/adamw_codelet.cpp):
// "adamw_cpu".
bool is_cpu_adamw_model(std::string_view model);

}  // namespace starzero::profile
