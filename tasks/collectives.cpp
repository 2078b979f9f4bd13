#include "tasks/collectives.hpp"

#include <stdexcept>
#include <utility>
#include <vector>

#include "runtime/codelet.hpp"

namespace starzero::tasks {

namespace {

struct CollectiveArgs {
  Communicator* comm;
  std::size_t count;
  DType dtype;
};

// ---- the functions: CPU on host buffers (MPI, or self), CUDA on device buffers on the worker's
// stream (NCCL) ----------------------------------------------------------------------------------

void all_gather(const TaskBuffers& b, const CollectiveArgs& a, void* stream) {
  a.comm->all_gather(b.data("shard"), b.data("full"), a.count, a.dtype, stream);
}
void reduce_scatter(const TaskBuffers& b, const CollectiveArgs& a, void* stream) {
  a.comm->reduce_scatter(b.data("full"), b.data("shard"), a.count, a.dtype, stream);
}
// This rank's block of a padded full buffer.
void* own_block(void* full, const CollectiveArgs& a) {
  const std::size_t offset = std::size_t(a.comm->rank()) * a.comm->shard_count(a.count) * dtype_size(a.dtype);
  return static_cast<char*>(full) + offset;
}
void all_gather_in_place(const TaskBuffers& b, const CollectiveArgs& a, void* stream) {
  a.comm->all_gather(own_block(b.data("full"), a), b.data("full"), a.count, a.dtype, stream);
}
void reduce_scatter_in_place(const TaskBuffers& b, const CollectiveArgs& a, void* stream) {
  a.comm->reduce_scatter(b.data("full"), own_block(b.data("full"), a), a.count, a.dtype, stream);
}
void all_reduce(const TaskBuffers& b, const CollectiveArgs& a, void* stream) {
  a.comm->all_reduce(b.data("data"), b.elements("data"), a.dtype, stream);
}

using CollectiveFunction = void (*)(const TaskBuffers&, const CollectiveArgs&, void*);
template <CollectiveFunction Func>
void on_cpu(const TaskBuffers& b, const CollectiveArgs& a) {
  Func(b, a, nullptr);
}
#ifdef STARZERO_WITH_CUDA
template <CollectiveFunction Func>
void on_cuda(const TaskBuffers& b, const CollectiveArgs& a) {
  Func(b, a, starpu_cuda_get_local_stream());
}
#endif

// ---- the declarations ---------------------------------------------------------------------------
// FLOPs 0 (the reductions' adds are left out); bytes: what this rank sends, as the communicators
// count it: (p-1)·s elements for a ring all-gather or reduce-scatter of shards of s, and the
// ring all-reduce's volume. No performance model: a collective's time is mostly the wait for the
// other ranks. In simulation (--sim-ranks), where the other ranks do not exist, the same
// volume over the platform's link, plus one latency per ring step (p-1 steps; 2(p-1) for the
// all-reduce), is the task's duration.

double shard_exchange_bytes(const CollectiveArgs& a, Handles) {
  return double(a.comm->size() - 1) * double(a.comm->shard_count(a.count)) * double(dtype_size(a.dtype));
}
double all_reduce_bytes(const CollectiveArgs& a, Handles h) {
  const auto sent = detail::ring_all_reduce_elements_sent(starpu_vector_get_nx(h[0]), a.comm->size(), a.comm->rank());
  return double(sent) * double(dtype_size(a.dtype));
}
double no_flops(const CollectiveArgs&, Handles) { return 0; }
double shard_exchange_us(const CollectiveArgs& a, Handles h) {
  return sim::ring_us(shard_exchange_bytes(a, h), a.comm->size() - 1);
}
double all_reduce_us(const CollectiveArgs& a, Handles h) {
  return sim::ring_us(all_reduce_bytes(a, h), 2 * (a.comm->size() - 1));
}

// One declaration per operation; two codelets from it, by kind of communicator: MPI/self run on
// CPU workers only, NCCL on CUDA workers only, so the buffers are where the library expects them.
struct CollectiveCodelets {
  Codelet<CollectiveArgs> host, device;
  explicit CollectiveCodelets(const Codelet<CollectiveArgs>::Declaration& both)
      : host(only_cpu(both)), device(only_cuda(both)) {}

  const Codelet<CollectiveArgs>& for_comm(const Communicator& comm) const {
    if (!comm.on_device()) return host;
#ifdef STARZERO_WITH_CUDA
    return device;
#else
    throw std::logic_error("a communicator on GPUs in a build without CUDA");
#endif
  }

 private:
  static Codelet<CollectiveArgs>::Declaration only_cpu(Codelet<CollectiveArgs>::Declaration d) {
    d.cuda = nullptr;
    return d;
  }
  static Codelet<CollectiveArgs>::Declaration only_cuda(Codelet<CollectiveArgs>::Declaration d) {
    d.cpu = nullptr;
    return d;
  }
};

// The codelets of a collective: its task takes `buffers`, then the communicator's order token
// ("order", RW); `function` runs it.
template <CollectiveFunction function>
CollectiveCodelets collective(const char* name, std::vector<Buffer> buffers, Codelet<CollectiveArgs>::Cost bytes,
                              Codelet<CollectiveArgs>::Cost sim_us) {
  buffers.push_back({STARPU_RW, "order"});
  return CollectiveCodelets({
      .name = name,
      .buffers = std::move(buffers),
      .cpu = on_cpu<function>,
      .cuda = STARZERO_CUDA_FUNC(on_cuda<function>),
      .work = Work::support,
      .flops = no_flops,
      .bytes = bytes,
      // Charged by sim_us (the ring over the GPU links); the class names what it is.
      .gpu_class = sim::GpuCostClass::copy,
      .history_model = false,
      .sim_us = sim_us,
  });
}

const CollectiveCodelets all_gather_cl = collective<all_gather>("all_gather", {{STARPU_R, "shard"}, {STARPU_W, "full"}},
                                                                shard_exchange_bytes, shard_exchange_us);
const CollectiveCodelets reduce_scatter_cl = collective<reduce_scatter>(
    "reduce_scatter", {{STARPU_R, "full"}, {STARPU_W, "shard"}}, shard_exchange_bytes, shard_exchange_us);
const CollectiveCodelets all_gather_in_place_cl =
    collective<all_gather_in_place>("all_gather", {{STARPU_RW, "full"}}, shard_exchange_bytes, shard_exchange_us);
const CollectiveCodelets reduce_scatter_in_place_cl = collective<reduce_scatter_in_place>(
    "reduce_scatter", {{STARPU_RW, "full"}}, shard_exchange_bytes, shard_exchange_us);
const CollectiveCodelets all_reduce_cl =
    collective<all_reduce>("all_reduce", {{STARPU_RW, "data"}}, all_reduce_bytes, all_reduce_us);

// A simulation runs no task function, so the simulated ranks' communicator counts each collective
// as its task is submitted.
void count_in_sim(Communicator& comm, CommOp op, std::size_t count, DType dtype) {
  if constexpr (sim::predicts_times)
    if (auto* sim_comm = dynamic_cast<SimRingComm*>(&comm)) sim_comm->count_submitted(op, count, dtype);
}

}  // namespace

CollectiveOrder::CollectiveOrder(Communicator& comm) : comm_(comm) {
  starpu_variable_data_register(&token_, STARPU_MAIN_RAM, reinterpret_cast<uintptr_t>(&token_value_),
                                sizeof token_value_);
  starpu_data_set_name(token_, "collective_order");
}

CollectiveOrder::~CollectiveOrder() { starpu_data_unregister(token_); }

void submit_all_gather(const CollectiveOrder& order, starpu_data_handle_t shard, starpu_data_handle_t full,
                       std::size_t count, DType dtype, const std::string& name) {
  submit(all_gather_cl.for_comm(order.comm()), {shard, full, order.token()},
         CollectiveArgs{&order.comm(), count, dtype}, name);
  count_in_sim(order.comm(), CommOp::all_gather, count, dtype);
}

void submit_reduce_scatter(const CollectiveOrder& order, starpu_data_handle_t full, starpu_data_handle_t shard,
                           std::size_t count, DType dtype, const std::string& name) {
  submit(reduce_scatter_cl.for_comm(order.comm()), {full, shard, order.token()},
         CollectiveArgs{&order.comm(), count, dtype}, name);
  count_in_sim(order.comm(), CommOp::reduce_scatter, count, dtype);
}

void submit_all_gather_in_place(const CollectiveOrder& order, starpu_data_handle_t full, std::size_t count, DType dtype,
                                const std::string& name) {
  submit(all_gather_in_place_cl.for_comm(order.comm()), {full, order.token()},
         CollectiveArgs{&order.comm(), count, dtype}, name);
  count_in_sim(order.comm(), CommOp::all_gather, count, dtype);
}

void submit_reduce_scatter_in_place(const CollectiveOrder& order, starpu_data_handle_t full, std::size_t count,
                                    DType dtype, const std::string& name) {
  submit(reduce_scatter_in_place_cl.for_comm(order.comm()), {full, order.token()},
         CollectiveArgs{&order.comm(), count, dtype}, name);
  count_in_sim(order.comm(), CommOp::reduce_scatter, count, dtype);
}

void submit_all_reduce(const CollectiveOrder& order, starpu_data_handle_t data, DType dtype, const std::string& name) {
  submit(all_reduce_cl.for_comm(order.comm()), {data, order.token()}, CollectiveArgs{&order.comm(), 0, dtype}, name);
  count_in_sim(order.comm(), CommOp::all_reduce, starpu_vector_get_nx(data), dtype);
}

}  // namespace starzero::tasks
