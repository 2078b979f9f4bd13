#pragma once
// End-of-run tables, printed by the leader from every rank's figures: what each rank held and
// sent next to `starzero plan`'s prediction for the same configuration (the planner and the
// engine derive placement from the same per-layer plan; the table shows they agree).
#include "comm/comm.hpp"
#include "comm/ranks.hpp"
#include "offload/engine.hpp"
#include "offload/planner.hpp"

namespace starzero {

// `starzero plan`'s input for the configuration `engine` runs; `padded`: each layer padded to a
// multiple of N elements, as the collectives see it.
PlanInput plan_input_of(const Engine& engine, bool padded);

// ZeRO runs (several ranks): bytes held for good per category, peaks of the transient buffers,
// and the bytes each collective sent in the last step next to the ring formulas. Collective.
void print_zero_report(const Engine& engine, const DataParallelRanks& ranks, const CommStats& last_step_traffic);

// Offload runs: bytes per place (device, host, disk) and category next to the plan. Collective.
void print_placement_report(const Engine& engine, const DataParallelRanks& ranks);

}  // namespace starzero
