// The FLOP and byte counts of the GPT-2 (tasks/nn.hpp) and Llama 3 (tasks/nn_llama.hpp) codelets
// against their formulas, written out here from the documented cost of each op (the comments at
// the declarations: s bytes per stored element, N = B·T rows). The simulator's roofline and the
// reports use these counts, so a change of how they are computed must keep every value. Shapes
// with no two dimensions equal, bf16 storage (s = 2) so that the stored and the 4-byte terms
// differ; every value is an integer or a multiple of 1/4, exact in double.
#include <catch2/catch.hpp>

#include "runtime/codelet.hpp"
#include "tasks/nn.hpp"
#include "tasks/nn_llama.hpp"

using namespace starzero;
using namespace starzero::tasks;

namespace {

// B = 2, T = 3 (N = 6), C = 8, NH = 4, V = 11 padded to Vp = 16.
constexpr double B = 2, T = 3, N = 6, C = 8, NH = 4, V = 11, Vp = 16, s = 2;

NnArgs gpt_args() { return NnArgs{.d = Dims{DType::bf16, 2, 3, 8, 4, 11, 16}}; }

// A matmul of C = 8 inputs to OC = 12 outputs; the weight-rows piece holds 5 of the 12.
constexpr double OC = 12, piece_rows = 5;
NnArgs matmul_args() {
  NnArgs a = gpt_args();
  a.C = 8, a.OC = 12, a.first_row = 4, a.row_count = 5;
  return a;
}

template <class Args>
void check_cost(const Codelet<Args>& codelet, const Args& a, double flops, double bytes) {
  INFO(codelet.name());
  CHECK(codelet.flops(a, {}) == flops);
  CHECK(codelet.bytes(a, {}) == bytes);
}

}  // namespace

TEST_CASE("the GPT-2 codelets' FLOP and byte counts follow their formulas") {
  const NnArgs a = gpt_args();
  check_cost(nn::encoder_forward, a, N * C, s * (2 * N * C + T * C) + 4 * N);
  check_cost(nn::encoder_backward, a, 2 * N * C, s * (3 * N * C + 2 * T * C) + 4 * N);
  check_cost(nn::layernorm_forward, a, 8 * N * C, s * (2 * N * C + 2 * C) + 8 * N);
  check_cost(nn::layernorm_backward_input, a, 12 * N * C, s * (4 * N * C + C) + 8 * N);
  check_cost(nn::layernorm_backward_params, a, 5 * N * C, s * (2 * N * C + 4 * C) + 8 * N);
  check_cost(nn::crossentropy_forward, a, 4 * N * V, s * N * Vp + 4 * N * Vp + 8 * N);
  check_cost(nn::crossentropy_backward, a, 3 * N * V, 4 * N * Vp + 2 * s * N * Vp + 4 * N);
}

TEST_CASE("the GPT-2 matmul codelets' FLOP and byte counts follow their formulas") {
  const NnArgs a = matmul_args();
  check_cost(nn::matmul_forward, a, 2 * N * C * OC, s * (N * C + OC * C + OC + N * OC));
  check_cost(nn::matmul_backward, a, 4 * N * C * OC, s * (N * OC + 3 * N * C + 3 * OC * C + 2 * OC));
  check_cost(nn::matmul_backward_input, a, 2 * N * C * OC, s * (N * OC + 2 * N * C + OC * C));
  check_cost(nn::matmul_backward_weight, a, 2 * N * C * OC + N * OC, s * (N * OC + N * C + 2 * OC * C + 2 * OC));
  check_cost(nn::matmul_backward_weight_rows, a, 2 * N * C * piece_rows, s * (N * OC + N * C + 2 * piece_rows * C));
  check_cost(nn::bias_backward, a, N * OC, s * (N * OC + 2 * OC));
}

TEST_CASE("the GPT-2 attention codelets' counts follow their formulas, a head group's as its share") {
  const NnArgs a = gpt_args();
  const double lse = 4 * B * NH * T;  // fp32 [B, NH, T]
  check_cost(nn::attention_forward, a, 4 * B * T * T * C, s * 4 * N * C + lse);
  check_cost(nn::attention_backward, a, 10 * B * T * T * C, s * 10 * N * C + lse);
  NnArgs group = a;
  group.heads = HeadGroup{.first = 1, .count = 3};
  const double share = 3 / NH;
  check_cost(nn::attention_forward_heads, group, 4 * B * T * T * C * share, s * (3 + share) * N * C + lse * share);
  check_cost(nn::attention_backward_heads, group, 10 * B * T * T * C * share,
             s * (4 + 6 * share) * N * C + lse * share);
}

TEST_CASE("the Llama 3 codelets' FLOP and byte counts follow their formulas") {
  // B = 2, T = 5 (N = 10), C = 12, NH = 4 query and NKV = 2 key/value heads of hs = 3, H = 20.
  const LlamaArgs a{.d = LlamaDims{.dtype = DType::bf16, .B = 2, .T = 5, .C = 12, .NH = 4, .NKV = 2, .H = 20}};
  constexpr double B = 2, T = 5, N = 10, C = 12, NH = 4, H = 20, hs = 3;
  constexpr double Q = (4 + 2 * 2) * hs, R = (4 + 2) * hs;  // qkv channels, of them rotated
  const double lse = 4 * B * NH * T;
  check_cost(llama::embedding_forward, a, N * C, s * (2 * N * C + 2 * T * C) + 4 * N);
  check_cost(llama::embedding_backward, a, 2 * N * C, s * (3 * N * C + 3 * T * C) + 4 * N);
  check_cost(llama::rmsnorm_forward, a, 4 * N * C, s * (2 * N * C + C) + 4 * N);
  check_cost(llama::rmsnorm_backward_input, a, 8 * N * C, s * (4 * N * C + C) + 4 * N);
  check_cost(llama::rmsnorm_backward_params, a, 3 * N * C, s * (2 * N * C + 2 * C) + 4 * N);
  check_cost(llama::rope_forward, a, 3 * N * R, 2 * s * N * Q + 4 * T * hs);
  check_cost(llama::rope_backward, a, 4 * N * R, 3 * s * N * Q + 4 * T * hs);
  check_cost(llama::swiglu_forward, a, 5 * N * H, 3 * s * N * H);
  check_cost(llama::swiglu_backward, a, 12 * N * H, 7 * s * N * H);
  check_cost(llama::attention_gqa_forward, a, 4 * B * T * T * C, s * (N * Q + N * C) + lse);
  check_cost(llama::attention_gqa_backward, a, 10 * B * T * T * C, s * (3 * N * Q + N * C) + lse);
}
