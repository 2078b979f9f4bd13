#pragma once
// Moving data ahead of the tasks that need it, inside the task graph: activation offload
// (models/gpt.cpp, --offload-activations cpu) writes a block's kept activations back to their
// pinned host home after its forward and brings them back before its backward.
#include <starpu.h>

#include <string>
#include <vector>

namespace starzero::tasks {

// After every task submitted so far that writes them: StarPU writes the handles back to their
// home (main memory) when the bus is idle and evicts their device copies first when it needs room
// (starpu_data_wont_use). Nothing happens to data that only lives in main memory.
void submit_write_back(const std::vector<starpu_data_handle_t>& handles);

// A task that reads `handles` and computes nothing, on a CUDA worker when there is one (else on
// a CPU worker): StarPU brings the handles to that device before it runs, so the tasks after it
// find them there. Its place in the graph is its dependencies: it runs after the writers of every
// handle, `gates` included (handles it reads only to wait for their writers).
void submit_fetch(const std::vector<starpu_data_handle_t>& handles, const std::vector<starpu_data_handle_t>& gates,
                  const std::string& name);
// As submit_move_to_device, towards main memory: the handles come there once their writers are
// done, and no worker is taken (the CPU AdamW's gradient: offload/engine.cpp).
void submit_move_to_host(const std::vector<starpu_data_handle_t>& handles, const std::string& name);

// The same without a worker: a task that runs nowhere (STARPU_NOWHERE) but names the first CUDA
// worker's memory node for each handle (the codelet's specific nodes), so StarPU copies the
// handles there and then ends it. A fetch task on the CUDA worker holds that worker's queue while
// its data crosses PCIe (a 70B layer: 31 ms of a 55 GB/s link), with the compute behind it
// waiting; this one takes no worker at all. Without a CUDA worker there is nothing to move:
// nothing is submitted. At most STARPU_NMAXBUFS handles.
void submit_move_to_device(const std::vector<starpu_data_handle_t>& handles, const std::string& name);

}  // namespace starzero::tasks
