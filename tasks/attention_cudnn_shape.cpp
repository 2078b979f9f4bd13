// The parts of tasks/attention_cudnn.hpp every build has (no cuDNN needed): a shape's name and
// its workspace, for the cuDNN calls and for `starzero plan`.
#include <string>

#include "tasks/attention_cudnn.hpp"

namespace starzero::tasks::cudnn_attention {

namespace {
std::size_t round_up(std::size_t bytes) { return (bytes + 255) / 256 * 256; }
}  // namespace

std::string CudnnAttentionShape::describe() const {
  return std::string(backward ? "backward" : "forward") + " B=" + std::to_string(B) + " T=" + std::to_string(T) +
         " NH=" + std::to_string(NH) + " NKV=" + std::to_string(NKV) + " hs=" + std::to_string(hs) +
         " heads=" + std::to_string(nh);
}

BackwardLayout backward_layout(const CudnnAttentionShape& s, std::size_t engine_fwd, std::size_t engine_bwd,
                               bool accumulate_dq) {
  const std::size_t rows = std::size_t(s.B) * s.T;
  const std::size_t nkv = s.NKV > 0 && s.NH >= s.NKV ? std::size_t(s.nh) / std::size_t(s.NH / s.NKV) : 0;
  const std::size_t q_block = rows * std::size_t(s.nh) * s.hs, kv_block = rows * nkv * s.hs;
  const std::size_t row_stats = std::size_t(s.B) * s.nh * s.T * 4;
  return {round_up(engine_fwd),    round_up(engine_bwd),  round_up(q_block * 2),
          round_up(row_stats),     round_up(row_stats),   accumulate_dq ? round_up(q_block * 4) : 0,
          round_up(q_block * 2),   round_up(kv_block * 2), round_up(kv_block * 2)};
}

std::size_t estimated_workspace_bytes(const CudnnAttentionShape& shape) {
  if (!shape.backward) return kEngineWorkspaceAllowance;
  // The larger route: dQ through the fp32 accumulator.
  return backward_layout(shape, kEngineWorkspaceAllowance, kEngineWorkspaceAllowance, true).total();
}

}  // namespace starzero::tasks::cudnn_attention
