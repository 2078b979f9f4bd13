#include "tasks/collectives.hpp"

#include <stdexcept>

#include "runtime/task_name.hpp"

namespace starzero::tasks {

namespace {

struct CollectiveArgs {
  Communicator* comm;
  std::size_t count;
  DType dtype;
};

CollectiveArgs unpack(void* cl_arg) {
  CollectiveArgs a;
  starpu_codelet_unpack_args(cl_arg, &a);
  return a;
}

void* ptr(void* buffer) { return reinterpret_cast<void*>(STARPU_VECTOR_GET_PTR(buffer)); }
std::size_t elements(void* buffer) { return STARPU_VECTOR_GET_NX(buffer); }

// CPU: host buffers (MPI, or self). CUDA: device buffers on the worker's stream (NCCL).
void all_gather_func(void* buffers[], void* cl_arg, void* stream) {
  const CollectiveArgs a = unpack(cl_arg);
  a.comm->all_gather(ptr(buffers[0]), ptr(buffers[1]), a.count, a.dtype, stream);
}
void reduce_scatter_func(void* buffers[], void* cl_arg, void* stream) {
  const CollectiveArgs a = unpack(cl_arg);
  a.comm->reduce_scatter(ptr(buffers[0]), ptr(buffers[1]), a.count, a.dtype, stream);
}
// This rank's block of a padded full buffer.
void* own_block(void* full, const CollectiveArgs& a) {
  const std::size_t offset = std::size_t(a.comm->rank()) * a.comm->shard_count(a.count) * dtype_size(a.dtype);
  return static_cast<char*>(full) + offset;
}
void all_gather_in_place_func(void* buffers[], void* cl_arg, void* stream) {
  const CollectiveArgs a = unpack(cl_arg);
  a.comm->all_gather(own_block(ptr(buffers[0]), a), ptr(buffers[0]), a.count, a.dtype, stream);
}
void reduce_scatter_in_place_func(void* buffers[], void* cl_arg, void* stream) {
  const CollectiveArgs a = unpack(cl_arg);
  a.comm->reduce_scatter(ptr(buffers[0]), own_block(ptr(buffers[0]), a), a.count, a.dtype, stream);
}
void all_reduce_func(void* buffers[], void* cl_arg, void* stream) {
  const CollectiveArgs a = unpack(cl_arg);
  a.comm->all_reduce(ptr(buffers[0]), elements(buffers[0]), a.dtype, stream);
}

template <void (*Func)(void**, void*, void*)>
void on_cpu(void* buffers[], void* cl_arg) {
  Func(buffers, cl_arg, nullptr);
}
#ifdef STARZERO_WITH_CUDA
template <void (*Func)(void**, void*, void*)>
void on_cuda(void* buffers[], void* cl_arg) {
  Func(buffers, cl_arg, starpu_cuda_get_local_stream());
}
#endif

// One codelet per operation and kind of communicator: MPI/self run on CPU workers only, NCCL
// on CUDA workers only, so the buffers are where the library expects them.
struct CollectiveCodelets {
  starpu_codelet host{}, device{};
  CollectiveCodelets(const char* name, starpu_cpu_func_t cpu, [[maybe_unused]] starpu_cuda_func_t cuda,
                     starpu_data_access_mode first, starpu_data_access_mode second, int nbuffers) {
    for (starpu_codelet* cl : {&host, &device}) {
      cl->name = name;
      cl->nbuffers = nbuffers;
      cl->modes[0] = first;
      cl->modes[1] = second;
      if (nbuffers == 3) cl->modes[2] = STARPU_RW;  // the order token
    }
    host.cpu_funcs[0] = cpu;
#ifdef STARZERO_WITH_CUDA
    device.cuda_funcs[0] = cuda;
    device.cuda_flags[0] = STARPU_CUDA_ASYNC;
#endif
  }
  starpu_codelet* for_comm(const Communicator& comm) {
    if (comm.name() != "nccl") return &host;
#ifdef STARZERO_WITH_CUDA
    return &device;
#else
    throw std::logic_error("an NCCL communicator in a build without CUDA");
#endif
  }
};

#ifdef STARZERO_WITH_CUDA
#define STARZERO_CUDA_ENTRY(f) on_cuda<f>
#else
#define STARZERO_CUDA_ENTRY(f) nullptr
#endif

CollectiveCodelets all_gather_cl("all_gather", on_cpu<all_gather_func>, STARZERO_CUDA_ENTRY(all_gather_func),
                                 STARPU_R, STARPU_W, 3);
CollectiveCodelets reduce_scatter_cl("reduce_scatter", on_cpu<reduce_scatter_func>,
                                     STARZERO_CUDA_ENTRY(reduce_scatter_func), STARPU_R, STARPU_W, 3);
CollectiveCodelets all_gather_in_place_cl("all_gather", on_cpu<all_gather_in_place_func>,
                                          STARZERO_CUDA_ENTRY(all_gather_in_place_func), STARPU_RW, STARPU_RW, 2);
CollectiveCodelets reduce_scatter_in_place_cl("reduce_scatter", on_cpu<reduce_scatter_in_place_func>,
                                              STARZERO_CUDA_ENTRY(reduce_scatter_in_place_func), STARPU_RW, STARPU_RW,
                                              2);
CollectiveCodelets all_reduce_cl("all_reduce", on_cpu<all_reduce_func>, STARZERO_CUDA_ENTRY(all_reduce_func),
                                 STARPU_RW, STARPU_RW, 2);

void check(int ret, const std::string& name) {
  if (ret != 0) throw std::runtime_error("submitting task " + name + " failed (StarPU code " + std::to_string(ret) + ")");
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
  const CollectiveArgs args{&order.comm(), count, dtype};
  check(starpu_task_insert(all_gather_cl.for_comm(order.comm()), STARPU_R, shard, STARPU_W, full, STARPU_RW,
                           order.token(), STARPU_VALUE, &args, sizeof args, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_reduce_scatter(const CollectiveOrder& order, starpu_data_handle_t full, starpu_data_handle_t shard,
                           std::size_t count, DType dtype, const std::string& name) {
  const CollectiveArgs args{&order.comm(), count, dtype};
  check(starpu_task_insert(reduce_scatter_cl.for_comm(order.comm()), STARPU_R, full, STARPU_W, shard, STARPU_RW,
                           order.token(), STARPU_VALUE, &args, sizeof args, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_all_gather_in_place(const CollectiveOrder& order, starpu_data_handle_t full, std::size_t count,
                                DType dtype, const std::string& name) {
  const CollectiveArgs args{&order.comm(), count, dtype};
  check(starpu_task_insert(all_gather_in_place_cl.for_comm(order.comm()), STARPU_RW, full, STARPU_RW, order.token(),
                           STARPU_VALUE, &args, sizeof args, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_reduce_scatter_in_place(const CollectiveOrder& order, starpu_data_handle_t full, std::size_t count,
                                    DType dtype, const std::string& name) {
  const CollectiveArgs args{&order.comm(), count, dtype};
  check(starpu_task_insert(reduce_scatter_in_place_cl.for_comm(order.comm()), STARPU_RW, full, STARPU_RW,
                           order.token(), STARPU_VALUE, &args, sizeof args, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_all_reduce(const CollectiveOrder& order, starpu_data_handle_t data, DType dtype, const std::string& name) {
  const CollectiveArgs args{&order.comm(), 0, dtype};
  check(starpu_task_insert(all_reduce_cl.for_comm(order.comm()), STARPU_RW, data, STARPU_RW, order.token(),
                           STARPU_VALUE, &args, sizeof args, STARPU_NAME, intern_task_name(name), 0),
        name);
}

}  // namespace starzero::tasks
