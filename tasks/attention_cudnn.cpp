// cuDNN flash attention through the backend graph API (tasks/attention_cudnn.hpp). Compiled only
// when CMake found cuDNN.
#include "tasks/attention_cudnn.hpp"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// The handle attributes of the operation graph and the plan are deprecated in cuDNN 9 (for the
// device-properties route) but remain the way to build on the device in hand.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace starzero::tasks::cudnn_attention {

namespace {

// A cuDNN call that failed: the graph, plan or execution was refused.
struct CudnnRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw CudnnRefused(std::string(what) + ": " + cudnnGetErrorString(status));
}

// ---- RAII ----------------------------------------------------------------------------------------
struct DescriptorDeleter {
  void operator()(void* d) const { cudnnBackendDestroyDescriptor(d); }
};
using Descriptor = std::unique_ptr<void, DescriptorDeleter>;

Descriptor make_descriptor(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  check(cudnnBackendCreateDescriptor(type, &d), "cudnnBackendCreateDescriptor");
  return Descriptor(d);
}

struct HandleDeleter {
  void operator()(cudnnContext* h) const { cudnnDestroy(h); }
};
using Handle = std::unique_ptr<cudnnContext, HandleDeleter>;

// Device memory from the stream-ordered pool, freed on the same stream.
class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0 && cudaMallocAsync(&data_, bytes, stream) != cudaSuccess) {
      data_ = nullptr;
      throw CudnnRefused("cudaMallocAsync of " + std::to_string(bytes) + " bytes of workspace failed");
    }
  }
  ~StreamBuffer() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  char* data() const { return static_cast<char*>(data_); }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

template <class V>
void set(void* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const V* values,
         std::int64_t count, const char* what) {
  check(cudnnBackendSetAttribute(d, name, type, count, values), what);
}
void set_descriptor(void* d, cudnnBackendAttributeName_t name, void* value, const char* what) {
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &value, 1, what);
}

// ---- graph building --------------------------------------------------------------------------------
using Dims = std::vector<std::int64_t>;

// Unique ids of the tensors the variant pack names.
enum Uid : std::int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum, kOne,
  kFirstVirtual = 100,
};

// The descriptors of one graph under construction; owns them all.
class GraphBuilder {
 public:
  void* tensor(std::int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides, bool is_virtual,
               bool by_value = false) {
    Descriptor t = make_descriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const std::int64_t alignment = 16;
    set(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type, 1, "tensor type");
    set(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), std::int64_t(dims.size()), "tensor dims");
    set(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), std::int64_t(strides.size()),
        "tensor strides");
    set(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid, 1, "tensor uid");
    set(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment, 1, "tensor alignment");
    set(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &is_virtual, 1, "tensor virtual");
    if (by_value) set(t.get(), CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &by_value, 1, "tensor by value");
    check(cudnnBackendFinalize(t.get()), "tensor finalize");
    return keep(std::move(t));
  }
  // An intermediate tensor (not in the variant pack).
  void* virtual_tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides) {
    return tensor(next_virtual_++, type, dims, strides, true);
  }
  // A host scalar passed by value in the variant pack; one descriptor per id however often used.
  void* scalar(std::int64_t uid) {
    for (const auto& [id, t] : scalars_)
      if (id == uid) return t;
    scalars_.emplace_back(uid, tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true));
    return scalars_.back().second;
  }

  // y = mode(x, b, t): b and t optional; `axis` for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, void* x, void* b, void* t, void* y,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT, std::int64_t axis = -1) {
    Descriptor pw = make_descriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode, 1, "pointwise mode");
    set(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision, 1, "pointwise precision");
    if (axis >= 0) set(pw.get(), CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis, 1, "pointwise axis");
    check(cudnnBackendFinalize(pw.get()), "pointwise finalize");
    Descriptor op = make_descriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get(), "pointwise op");
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
    if (b != nullptr) set_descriptor(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise b");
    if (t != nullptr) set_descriptor(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise t");
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
    check(cudnnBackendFinalize(op.get()), "pointwise op finalize");
    keep(std::move(pw));
    operations_.push_back(keep(std::move(op)));
  }
  void reduction(cudnnReduceTensorOp_t mode, void* x, void* y) {
    Descriptor red = make_descriptor(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    set(red.get(), CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode, 1, "reduction mode");
    set(red.get(), CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &precision, 1, "reduction precision");
    check(cudnnBackendFinalize(red.get()), "reduction finalize");
    Descriptor op = make_descriptor(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_DESC, red.get(), "reduction op");
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
    check(cudnnBackendFinalize(op.get()), "reduction op finalize");
    keep(std::move(red));
    operations_.push_back(keep(std::move(op)));
  }
  // c = a · b (batched over the leading dimensions, fp32 accumulation).
  void matmul(void* a, void* b, void* c) {
    Descriptor mm = make_descriptor(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    set(mm.get(), CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &precision, 1, "matmul precision");
    check(cudnnBackendFinalize(mm.get()), "matmul finalize");
    Descriptor op = make_descriptor(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get(), "matmul op");
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul a");
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul b");
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul c");
    check(cudnnBackendFinalize(op.get()), "matmul op finalize");
    keep(std::move(mm));
    operations_.push_back(keep(std::move(op)));
  }
  // y: x with other dims/strides (a transpose of a virtual tensor).
  void reshape(void* x, void* y) {
    Descriptor op = make_descriptor(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape x");
    set_descriptor(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape y");
    check(cudnnBackendFinalize(op.get()), "reshape op finalize");
    operations_.push_back(keep(std::move(op)));
  }

  // The operation graph of every operation added, on `handle`.
  Descriptor finish(cudnnHandle_t handle) {
    Descriptor graph = make_descriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, operations_.data(),
        std::int64_t(operations_.size()), "graph ops");
    set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle, 1, "graph handle");
    check(cudnnBackendFinalize(graph.get()), "operation graph finalize");
    return graph;
  }

 private:
  void* keep(Descriptor d) {
    owned_.push_back(std::move(d));
    return owned_.back().get();
  }
  std::vector<Descriptor> owned_;
  std::vector<void*> operations_;
  std::vector<std::pair<std::int64_t, void*>> scalars_;
  std::int64_t next_virtual_ = kFirstVirtual;
};

// Row-major strides of contiguous dims.
Dims contiguous(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (int i = int(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

// The causal mask on scores `s` [B, H, T, T]: keys after the query get −inf.
void* causal_mask(GraphBuilder& g, void* s, const Dims& dims) {
  const Dims strides = contiguous(dims);
  void* row = g.virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  void* col = g.virtual_tensor(CUDNN_DATA_INT32, dims, strides);
  void* keep = g.virtual_tensor(CUDNN_DATA_BOOLEAN, dims, strides);
  void* masked = g.virtual_tensor(CUDNN_DATA_FLOAT, dims, strides);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, row, CUDNN_DATA_INT32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, col, CUDNN_DATA_INT32, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, g.scalar(kNegInf), keep, masked);
  return masked;
}

// The strided views of one call (see the header's "Layout").
struct Views {
  std::int64_t B, T, nh, nkv, hs, C3;
  Dims q_dims() const { return {B, nh, T, hs}; }
  Dims q_strides() const { return {T * C3, hs, C3, 1}; }
  Dims kt_dims() const { return {B, nkv, hs, T}; }          // K and V seen transposed
  Dims kt_strides() const { return {T * C3, hs, 1, C3}; }
  Dims kv_dims() const { return {B, nkv, T, hs}; }
  Dims scores() const { return {B, nh, T, T}; }
  Dims row_stats() const { return {B, nh, T, 1}; }
  // A [B, T, heads·hs] row-major block (group-local pointer), rows `ld` apart.
  Dims rows_strides(std::int64_t ld) const { return {T * ld, hs, ld, 1}; }
};

Views views_of(const CudnnAttentionShape& s) {
  return {s.B, s.T, s.nh, s.nh / (s.NH / s.NKV), s.hs, std::int64_t(s.NH + 2 * s.NKV) * s.hs};
}

// scale · Q·Kᵀ, fp32 scores [B, H, T, T] (virtual: never in memory).
void* scaled_scores(GraphBuilder& g, void* q, void* kt, const Dims& sd, const Dims& ss) {
  void* s = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.matmul(q, kt, s);
  void* scaled = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.pointwise(CUDNN_POINTWISE_MUL, s, g.scalar(kScale), nullptr, scaled);
  return scaled;
}

// Forward: O and Stats from Q, K, V. `o_ld`: O's rows apart; `stats_ld`: Stats' sequences apart.
void build_forward(GraphBuilder& g, const Views& v, std::int64_t o_ld, std::int64_t stats_ld) {
  void* q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, v.q_dims(), v.q_strides(), false);
  void* kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, v.kt_dims(), v.kt_strides(), false);
  void* val = g.tensor(kV, CUDNN_DATA_BFLOAT16, v.kv_dims(), v.q_strides(), false);
  void* o = g.tensor(kO, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows_strides(o_ld), false);
  void* stats = g.tensor(kStats, CUDNN_DATA_FLOAT, v.row_stats(), {stats_ld, v.T, 1, 1}, false);
  const Dims sd = v.scores(), ss = contiguous(sd), rd = v.row_stats(), rs = contiguous(rd);

  void* masked = causal_mask(g, scaled_scores(g, q, kt, sd, ss), sd);
  void* row_max = g.virtual_tensor(CUDNN_DATA_FLOAT, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  void* shifted = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.pointwise(CUDNN_POINTWISE_SUB, masked, row_max, nullptr, shifted);
  void* e = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, nullptr, e);
  void* row_sum = g.virtual_tensor(CUDNN_DATA_FLOAT, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, row_sum);
  void* log_sum = g.virtual_tensor(CUDNN_DATA_FLOAT, rd, rs);
  g.pointwise(CUDNN_POINTWISE_LOG, row_sum, nullptr, nullptr, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, row_max, log_sum, nullptr, stats);
  void* p = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.pointwise(CUDNN_POINTWISE_DIV, e, row_sum, nullptr, p);
  g.matmul(p, val, o);
}

// out = a · b, or with grouped-query heads (nkv < nh) the per-query-head products summed over
// each key/value group (dK, dV).
void matmul_into_kv(GraphBuilder& g, const Views& v, void* a, void* b, void* out) {
  if (v.nkv == v.nh) return g.matmul(a, b, out);
  const Dims full{v.B, v.nh, v.T, v.hs};
  void* per_head = g.virtual_tensor(CUDNN_DATA_BFLOAT16, full, contiguous(full));
  g.matmul(a, b, per_head);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, per_head, out);
}

// Backward: dQ, dK, dV (into contiguous workspace blocks [B, T, heads·hs]) from Q, K, V, O, dO
// and Stats. `dout_ld`: dO's rows apart (NH·hs); `stats_ld` as the forward's. `accumulate_dq`:
// dQ through an fp32 accumulator in workspace (cuDNN's default route); else dQ straight from its
// matmul, the route the frontend takes for a deterministic backward.
void build_backward(GraphBuilder& g, const Views& v, std::int64_t dout_ld, std::int64_t stats_ld, bool accumulate_dq) {
  void* q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, v.q_dims(), v.q_strides(), false);
  void* kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, v.kt_dims(), v.kt_strides(), false);
  void* vt = g.tensor(kV, CUDNN_DATA_BFLOAT16, v.kt_dims(), v.kt_strides(), false);
  void* o = g.tensor(kO, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows_strides(v.nh * v.hs), false);
  void* dout = g.tensor(kDO, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows_strides(dout_ld), false);
  void* stats = g.tensor(kStats, CUDNN_DATA_FLOAT, v.row_stats(), {stats_ld, v.T, 1, 1}, false);
  void* dq = g.tensor(kDQ, CUDNN_DATA_BFLOAT16, v.q_dims(), v.rows_strides(v.nh * v.hs), false);
  void* dk = g.tensor(kDK, CUDNN_DATA_BFLOAT16, v.kv_dims(), v.rows_strides(v.nkv * v.hs), false);
  void* dv = g.tensor(kDV, CUDNN_DATA_BFLOAT16, v.kv_dims(), v.rows_strides(v.nkv * v.hs), false);
  const Dims sd = v.scores(), ss = contiguous(sd), rd = v.row_stats(), rs = contiguous(rd);
  const Dims transposed{v.nh * v.T * v.T, v.T * v.T, 1, v.T};  // [B, H, Tk, Tq] over [B, H, Tq, Tk]

  // D = Σ_d dO ⊙ O, materialised (fp32, in workspace) as the fused engine expects.
  const Dims od = v.q_dims();
  void* product = g.virtual_tensor(CUDNN_DATA_FLOAT, od, v.rows_strides(v.nh * v.hs));
  g.pointwise(CUDNN_POINTWISE_MUL, dout, o, nullptr, product);
  void* row_dot = g.virtual_tensor(CUDNN_DATA_FLOAT, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, product, row_dot);
  void* softmax_sum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, rd, rs, false);
  g.pointwise(CUDNN_POINTWISE_MUL, row_dot, g.scalar(kOne), nullptr, softmax_sum);

  // P = exp(scale·Q·Kᵀ − Stats), causal.
  void* shifted = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled_scores(g, q, kt, sd, ss), stats, nullptr, shifted);
  void* masked = causal_mask(g, shifted, sd);
  void* p = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.pointwise(CUDNN_POINTWISE_EXP, masked, nullptr, nullptr, p);

  // dV = Pᵀ · dO.
  const Dims td{v.B, v.nh, v.T, v.T};
  void* pt = g.virtual_tensor(CUDNN_DATA_BFLOAT16, td, transposed);
  g.reshape(p, pt);
  matmul_into_kv(g, v, pt, dout, dv);

  // dS = scale · P ⊙ (dO·Vᵀ − D).
  void* dp = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.matmul(dout, vt, dp);
  void* centred = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, softmax_sum, nullptr, centred);
  void* weighted = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.pointwise(CUDNN_POINTWISE_MUL, centred, p, nullptr, weighted);
  void* ds = g.virtual_tensor(CUDNN_DATA_FLOAT, sd, ss);
  g.pointwise(CUDNN_POINTWISE_MUL, weighted, g.scalar(kScale), nullptr, ds);

  // dK = dSᵀ · Q.
  void* dst = g.virtual_tensor(CUDNN_DATA_BFLOAT16, td, transposed);
  g.reshape(ds, dst);
  matmul_into_kv(g, v, dst, q, dk);

  // dQ = dS · K.
  const Dims kts = v.kt_strides();
  void* k = g.virtual_tensor(CUDNN_DATA_BFLOAT16, v.kv_dims(), {kts[0], kts[1], kts[3], kts[2]});
  g.reshape(kt, k);
  if (accumulate_dq) {
    void* accumulator = g.tensor(kDQAccum, CUDNN_DATA_FLOAT, od, contiguous(od), false);
    g.matmul(ds, k, accumulator);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, accumulator, nullptr, nullptr, dq);
  } else {
    g.matmul(ds, k, dq);
  }
}

// ---- engine choice ----------------------------------------------------------------------------------
// A finalized plan with everything it was built from (tensors, operations, graph, engine
// config), destroyed after it.
struct Plan {
  std::shared_ptr<GraphBuilder> builder;
  Descriptor graph, config, plan;
  std::int64_t workspace = 0;
  std::string description;
};

bool has_note(void* engine, cudnnBackendNumericalNote_t wanted) {
  std::int64_t count = 0;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  for (std::int64_t i = 0; i < count; ++i)
    if (notes[i] == wanted) return true;
  return false;
}

// The engine configs cuDNN's heuristics offer for `graph` in `mode`, best first.
std::vector<Descriptor> engine_configs(void* graph, cudnnBackendHeurMode_t mode) {
  Descriptor heur = make_descriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  set_descriptor(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
  set(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode, 1, "heuristics mode");
  check(cudnnBackendFinalize(heur.get()), "heuristics finalize");
  std::int64_t count = 0;
  check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr),
        "heuristics count");
  std::vector<Descriptor> configs;
  std::vector<void*> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.push_back(make_descriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back().get());
  }
  std::int64_t got = 0;
  if (count > 0)
    check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                   &got, raw.data()),
          "heuristics results");
  configs.resize(std::size_t(got));
  return configs;
}

// The first config (heuristics mode A, then the fallback list) whose plan finalizes; with
// `deterministic_only`, configs whose engine notes non-determinism are skipped.
std::optional<Plan> choose_plan(cudnnHandle_t handle, std::shared_ptr<GraphBuilder> builder, Descriptor graph,
                                bool deterministic_only) {
  std::string refusals;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> configs;
    try {
      configs = engine_configs(graph.get(), mode);
    } catch (const CudnnRefused& e) {
      refusals = e.what();
      continue;
    }
    for (Descriptor& config : configs) {
      Descriptor engine = make_descriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      void* engine_raw = engine.get();
      std::int64_t got = 0;
      if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                   &engine_raw) != CUDNN_STATUS_SUCCESS)
        continue;
      const bool nondeterministic = has_note(engine_raw, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
      if (deterministic_only && nondeterministic) continue;
      std::int64_t global_index = -1;
      cudnnBackendGetAttribute(engine_raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &global_index);
      Descriptor plan = make_descriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      void* config_raw = config.get();
      if (cudnnBackendSetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) !=
              CUDNN_STATUS_SUCCESS ||
          cudnnBackendSetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   1, &config_raw) != CUDNN_STATUS_SUCCESS ||
          cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS)
        continue;
      Plan chosen;
      cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                               &chosen.workspace);
      chosen.description = "engine " + std::to_string(global_index) +
                           (mode == CUDNN_HEUR_MODE_A ? " (heuristics A)" : " (fallback list)") +
                           (nondeterministic ? ", non-deterministic" : ", deterministic");
      chosen.builder = std::move(builder);
      chosen.graph = std::move(graph);
      chosen.config = std::move(config);
      chosen.plan = std::move(plan);
      return chosen;
    }
  }
  return std::nullopt;
}

// ---- the per-thread cache -------------------------------------------------------------------------
// One graph and plan per shape (and direction), each with the bytes this file adds to the
// engine's workspace.
struct CachedShape {
  CudnnAttentionShape shape;
  std::optional<Plan> forward;   // backward shapes: the forward that recomputes O
  std::optional<Plan> backward;
  bool accumulate_dq = false;
  bool refused = false;
};

// A CUDA worker thread's cuDNN state: its handle and the shapes it has run. StarPU runs a CUDA
// worker's tasks on one thread bound to one device, so a thread_local cache is one per worker
// and device and needs no lock.
struct WorkerCache {
  Handle handle;
  std::vector<CachedShape> shapes;
};
thread_local std::unique_ptr<WorkerCache> worker_cache;

// Refusals are reported once per shape across threads.
std::mutex reported_mutex;
std::set<std::string> reported;

void report_refusal(const CudnnAttentionShape& shape, const std::string& why) {
  const std::string key = shape.describe();
  const std::lock_guard lock(reported_mutex);
  if (!reported.insert(key).second) return;
  std::fprintf(stderr, "starzero: cuDNN attention refused %s (%s): the own kernel runs it\n", key.c_str(),
               why.c_str());
}

WorkerCache& cache() {
  if (!worker_cache) {
    cudnnHandle_t h = nullptr;
    check(cudnnCreate(&h), "cudnnCreate");
    worker_cache = std::make_unique<WorkerCache>();
    worker_cache->handle.reset(h);
  }
  return *worker_cache;
}

Plan build_forward_plan(cudnnHandle_t handle, const Views& v, std::int64_t o_ld, std::int64_t stats_ld) {
  auto g = std::make_shared<GraphBuilder>();
  build_forward(*g, v, o_ld, stats_ld);
  Descriptor graph = g->finish(handle);
  auto plan = choose_plan(handle, std::move(g), std::move(graph), false);
  if (!plan) throw CudnnRefused("no engine runs the forward graph");
  return std::move(*plan);
}

// The backward: deterministic engines of the direct-dQ graph first, then cuDNN's default
// (fp32 dQ accumulator, possibly atomics), deterministic engines preferred.
std::pair<Plan, bool> build_backward_plan(cudnnHandle_t handle, const Views& v, std::int64_t dout_ld,
                                          std::int64_t stats_ld) {
  for (const bool accumulate_dq : {false, true}) {
    for (const bool deterministic_only : {true, false}) {
      if (!accumulate_dq && !deterministic_only) continue;  // direct dQ only for a deterministic engine
      try {
        auto g = std::make_shared<GraphBuilder>();
        build_backward(*g, v, dout_ld, stats_ld, accumulate_dq);
        Descriptor graph = g->finish(handle);
        if (auto plan = choose_plan(handle, std::move(g), std::move(graph), deterministic_only))
          return {std::move(*plan), accumulate_dq};
      } catch (const CudnnRefused&) {
        // this variant of the graph is not supported here: try the next
      }
    }
  }
  throw CudnnRefused("no engine runs the backward graph");
}

CachedShape& shape_entry(const CudnnAttentionShape& shape) {
  WorkerCache& c = cache();
  for (CachedShape& s : c.shapes)
    if (s.shape.same_graph(shape)) return s;
  CachedShape entry;
  entry.shape = shape;
  const Views v = views_of(shape);
  try {
    if (shape.backward) {
      // O recomputed into a contiguous block, Stats into a contiguous [B, nh, T].
      entry.forward = build_forward_plan(c.handle.get(), v, v.nh * v.hs, v.nh * v.T);
      auto [plan, accumulate_dq] = build_backward_plan(c.handle.get(), v, std::int64_t(shape.NH) * shape.hs,
                                                       shape.ld_lse);
      entry.backward = std::move(plan);
      entry.accumulate_dq = accumulate_dq;
    } else {
      entry.forward = build_forward_plan(c.handle.get(), v, shape.ld_out, shape.ld_lse);
    }
  } catch (const CudnnRefused& e) {
    entry.refused = true;
    entry.forward.reset();
    entry.backward.reset();
    report_refusal(shape, e.what());
  }
  c.shapes.push_back(std::move(entry));
  return c.shapes.back();
}

void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<std::int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace) {
  Descriptor pack = make_descriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), std::int64_t(uids.size()),
      "variant pack ids");
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(),
      std::int64_t(pointers.size()), "variant pack pointers");
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace, 1, "variant pack workspace");
  check(cudnnBackendFinalize(pack.get()), "variant pack finalize");
  check(cudnnBackendExecute(handle, plan.plan.get(), pack.get()), "cudnnBackendExecute");
}

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// What cuDNN can take at all, before building anything: bf16 flash attention wants head sizes
// that are multiples of 8 up to 256, 16-byte aligned rows and pointers.
std::string unsupported(const CudnnAttentionShape& s) {
  if (s.hs % 8 != 0 || s.hs > 256) return "head size " + std::to_string(s.hs) + " (cuDNN: a multiple of 8, <= 256)";
  if (s.NKV <= 0 || s.NH % s.NKV != 0 || s.nh % (s.NH / s.NKV) != 0) return "heads not whole key/value groups";
  const int lds[] = {s.ld_out, s.ld_dinp};
  for (int ld : lds)
    if (ld % 8 != 0) return "rows not 16-byte aligned";
  return "";
}

}  // namespace

bool forward(const CudnnAttentionShape& shape, bf16* out, float* lse, const bf16* qkv, void* stream) {
  if (const std::string why = unsupported(shape); !why.empty() || !aligned(out) || !aligned(lse) || !aligned(qkv)) {
    report_refusal(shape, why.empty() ? "pointers not 16-byte aligned" : why);
    return false;
  }
  try {
    CachedShape& entry = shape_entry(shape);
    if (entry.refused) return false;
    WorkerCache& c = cache();
    check(cudnnSetStream(c.handle.get(), static_cast<cudaStream_t>(stream)), "cudnnSetStream");
    const std::int64_t hs = shape.hs;
    const bf16* q = qkv + std::size_t(shape.h0) * hs;
    const int kv0 = shape.h0 / (shape.NH / shape.NKV);
    const bf16* k = qkv + std::size_t(shape.NH + kv0) * hs;
    const bf16* v = qkv + std::size_t(shape.NH + shape.NKV + kv0) * hs;
    float scale = 1.0f / std::sqrt(float(hs)), neg_inf = -std::numeric_limits<float>::infinity();
    StreamBuffer workspace(std::size_t(entry.forward->workspace), static_cast<cudaStream_t>(stream));
    execute(c.handle.get(), *entry.forward, {kQ, kK, kV, kO, kStats, kScale, kNegInf},
            {const_cast<bf16*>(q), const_cast<bf16*>(k), const_cast<bf16*>(v), out, lse, &scale, &neg_inf},
            workspace.data());
    return true;
  } catch (const CudnnRefused& e) {
    report_refusal(shape, e.what());
    return false;
  }
}

bool backward(const CudnnAttentionShape& shape, bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* qkv,
              const float* lse, void* stream) {
  if (dq == nullptr || dk == nullptr || dv == nullptr) return false;  // the own kernel's partial cases
  if (const std::string why = unsupported(shape);
      !why.empty() || !aligned(dq) || !aligned(dk) || !aligned(dv) || !aligned(dout) || !aligned(qkv) ||
      !aligned(lse)) {
    report_refusal(shape, why.empty() ? "pointers not 16-byte aligned" : why);
    return false;
  }
  try {
    CachedShape& entry = shape_entry(shape);
    if (entry.refused) return false;
    WorkerCache& c = cache();
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    check(cudnnSetStream(c.handle.get(), s), "cudnnSetStream");
    const std::int64_t hs = shape.hs;
    const int group = shape.NH / shape.NKV, kv0 = shape.h0 / group, nkv = shape.nh / group;
    bf16* q = const_cast<bf16*>(qkv) + std::size_t(shape.h0) * hs;
    bf16* k = const_cast<bf16*>(qkv) + std::size_t(shape.NH + kv0) * hs;
    bf16* v = const_cast<bf16*>(qkv) + std::size_t(shape.NH + shape.NKV + kv0) * hs;
    bf16* go = const_cast<bf16*>(dout) + std::size_t(shape.h0) * hs;
    float scale = 1.0f / std::sqrt(float(hs)), neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;

    const BackwardLayout layout = backward_layout(shape, std::size_t(entry.forward->workspace),
                                                  std::size_t(entry.backward->workspace), entry.accumulate_dq);
    StreamBuffer workspace(layout.total(), s);
    char* at = workspace.data();
    const auto take = [&at](std::size_t bytes) {
      char* p = at;
      at += bytes;
      return p;
    };
    char* engine_fwd = take(layout.engine_fwd);
    char* engine_bwd = take(layout.engine_bwd);
    auto* o = reinterpret_cast<bf16*>(take(layout.o));
    auto* stats = reinterpret_cast<float*>(take(layout.stats));
    char* softmax_sum = take(layout.softmax_sum);
    char* dq_accum = take(layout.dq_accum);
    auto* dq_new = reinterpret_cast<bf16*>(take(layout.dq));
    auto* dk_new = reinterpret_cast<bf16*>(take(layout.dk));
    auto* dv_new = reinterpret_cast<bf16*>(take(layout.dv));

    // O again (the backward codelets carry no O); its Stats equal `lse` and are not used.
    execute(c.handle.get(), *entry.forward, {kQ, kK, kV, kO, kStats, kScale, kNegInf},
            {q, k, v, o, stats, &scale, &neg_inf}, engine_fwd);
    std::vector<std::int64_t> uids{kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kSoftmaxSum, kScale, kNegInf, kOne};
    std::vector<void*> pointers{q,      k,           v,      o,        go,      const_cast<float*>(lse), dq_new, dk_new,
                                dv_new, softmax_sum, &scale, &neg_inf, &one};
    if (entry.accumulate_dq) {
      uids.push_back(kDQAccum);
      pointers.push_back(dq_accum);
    }
    execute(c.handle.get(), *entry.backward, uids, pointers, engine_bwd);
    // The codelets' gradients accumulate: add cuDNN's into them.
    const int rows = shape.B * shape.T;
    add_rows(dq, shape.ld_dinp, dq_new, rows, shape.nh * shape.hs, stream);
    add_rows(dk, shape.ld_dinp, dk_new, rows, nkv * shape.hs, stream);
    add_rows(dv, shape.ld_dinp, dv_new, rows, nkv * shape.hs, stream);
    return true;
  } catch (const CudnnRefused& e) {
    report_refusal(shape, e.what());
    return false;
  }
}

ChosenEngine chosen_engine(const CudnnAttentionShape& shape) {
  if (!worker_cache) return {};
  for (const CachedShape& s : worker_cache->shapes) {
    if (!s.shape.same_graph(shape) || s.refused) continue;
    if (!shape.backward) return {"forward: " + s.forward->description, s.forward->workspace};
    return {"backward: " + s.backward->description + (s.accumulate_dq ? ", fp32 dQ accumulator" : ", direct dQ") +
                "; O recomputed by forward " + s.forward->description,
            std::int64_t(backward_layout(shape, std::size_t(s.forward->workspace),
                                         std::size_t(s.backward->workspace), s.accumulate_dq)
                             .total())};
  }
  return {};
}

}  // namespace starzero::tasks::cudnn_attention
