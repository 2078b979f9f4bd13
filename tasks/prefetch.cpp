#include "tasks/prefetch.hpp"

#include <stdexcept>
#include <string>

#include "runtime/codelet.hpp"

namespace starzero::tasks {

namespace {

void fetched(const TaskBuffers&, const NoArgs&) {}

double no_flops(const NoArgs&, Handles) { return 0.0; }
double fetched_bytes(const NoArgs&, Handles handles) {
  double bytes = 0;
  for (starpu_data_handle_t h : handles) bytes += double(starpu_data_get_size(h));
  return bytes;
}

// One codelet per kind of worker, so that the scheduler cannot pick the CPU for a fetch meant for
// the GPU (the transfer makes the CPU look cheaper to dmda). Both do nothing once the data is there.
Codelet<NoArgs> fetch_on_cuda({
    .name = "activation_fetch_cuda",
    .repeated = Buffer{STARPU_R, "fetched"},
    .cuda = STARZERO_CUDA_FUNC(fetched),
    .work = Work::support,
    .flops = no_flops,
    .bytes = fetched_bytes,
    // The fetch is StarPU's transfer; the task itself launches nothing.
    .gpu = [](const NoArgs&, Handles) { return sim::GpuWork{.kind = sim::GpuCostClass::copy, .kernels = 0}; },
});
Codelet<NoArgs> fetch_on_cpu({
    .name = "activation_fetch",
    .repeated = Buffer{STARPU_R, "fetched"},
    .cpu = fetched,
    .work = Work::support,
    .flops = no_flops,
    .bytes = fetched_bytes,
});

// The same towards main memory (its own codelet: StarPU reads the nodes from the codelet).
Codelet<NoArgs> move_to_host({
    .name = "move_to_host",
    .repeated = Buffer{STARPU_R, "moved"},
    .work = Work::support,
    .flops = no_flops,
    .bytes = [](const NoArgs&, Handles) { return 0.0; },
    .history_model = false,
});

// No function: its tasks run on no worker. submit_move_to_device names the memory node of each
// buffer, where StarPU then fetches it before ending the task; no performance model is needed.
Codelet<NoArgs> move_to_device({
    .name = "move_to_device",
    .repeated = Buffer{STARPU_R, "moved"},
    .work = Work::support,
    .flops = no_flops,
    .bytes = [](const NoArgs&, Handles) { return 0.0; },
    .history_model = false,
});

}  // namespace

void submit_move_to_device(const std::vector<starpu_data_handle_t>& handles, const std::string& name) {
  if (starpu_cuda_worker_get_count() == 0) return;
  if (handles.size() > STARPU_NMAXBUFS)
    throw std::invalid_argument("task " + name + ": at most " + std::to_string(STARPU_NMAXBUFS) + " handles to move");
  const unsigned gpu = starpu_worker_get_memory_node(starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0));
  // Set once (StarPU reads the codelet of earlier tasks meanwhile); a later session has the same node.
  starpu_codelet* codelet = move_to_device.starpu();
  if (!codelet->specific_nodes || codelet->nodes[0] != int(gpu)) {
    for (int& node : codelet->nodes) node = int(gpu);
    codelet->specific_nodes = 1;
  }
  submit(move_to_device, handles, NoArgs{}, name);
}

void submit_write_back(const std::vector<starpu_data_handle_t>& handles) {
  for (starpu_data_handle_t h : handles) starpu_data_wont_use(h);
}

void submit_fetch(const std::vector<starpu_data_handle_t>& handles, const std::vector<starpu_data_handle_t>& gates,
                  const std::string& name) {
  std::vector<starpu_data_handle_t> all = handles;
  all.insert(all.end(), gates.begin(), gates.end());
  submit(starpu_cuda_worker_get_count() > 0 ? fetch_on_cuda : fetch_on_cpu, all, NoArgs{}, name);
}

void submit_move_to_host(const std::vector<starpu_data_handle_t>& handles, const std::string& name) {
  if (handles.size() > STARPU_NMAXBUFS)
    throw std::invalid_argument("task " + name + ": at most " + std::to_string(STARPU_NMAXBUFS) + " handles to move");
  // Set once, as move_to_device's.
  starpu_codelet* codelet = move_to_host.starpu();
  if (!codelet->specific_nodes) {
    for (int& node : codelet->nodes) node = STARPU_MAIN_RAM;
    codelet->specific_nodes = 1;
  }
  submit(move_to_host, handles, NoArgs{}, name);
}

}  // namespace starzero::tasks
