// The attention kernel choice (tasks/attention_kernel.hpp) and cuDNN's workspace estimate
// (tasks/attention_cudnn.hpp) in `starzero plan`'s memory, without a GPU.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

#include "offload/planner.hpp"
#include "tasks/attention_cudnn.hpp"
#include "tasks/attention_kernel.hpp"

using namespace starzero;
using tasks::AttentionKernel;
using tasks::AttentionRequest;

TEST_CASE("parse_attention_request reads auto, cudnn and own only", "[attention]") {
  CHECK(tasks::parse_attention_request("auto") == AttentionRequest::automatic);
  CHECK(tasks::parse_attention_request("cudnn") == AttentionRequest::cudnn);
  CHECK(tasks::parse_attention_request("own") == AttentionRequest::own);
  CHECK_FALSE(tasks::parse_attention_request("CUDNN").has_value());
  CHECK_FALSE(tasks::parse_attention_request("").has_value());
  CHECK_FALSE(tasks::parse_attention_request("flash").has_value());
}

TEST_CASE("resolve_attention: auto without a GPU is the own kernel, with the reason", "[attention]") {
  const auto r = tasks::resolve_attention(AttentionRequest::automatic, false, true, false);
  CHECK(r.kernel == AttentionKernel::own);
  CHECK(r.why == "own kernel: no GPU");
}

TEST_CASE("resolve_attention: an explicit cudnn that cannot run is an error", "[attention]") {
  CHECK_THROWS_AS(tasks::resolve_attention(AttentionRequest::cudnn, false, true, false), std::invalid_argument);
  CHECK_THROWS_WITH(tasks::resolve_attention(AttentionRequest::cudnn, false, true, false), "--attention cudnn: no GPU");
  CHECK_THROWS_AS(tasks::resolve_attention(AttentionRequest::cudnn, true, false, true), std::invalid_argument);
}

TEST_CASE("resolve_attention: fp32 runs the own kernel", "[attention]") {
  const auto r = tasks::resolve_attention(AttentionRequest::automatic, true, false, true);
  CHECK(r.kernel == AttentionKernel::own);
  CHECK(r.why.find("fp32") != std::string::npos);
}

TEST_CASE("resolve_attention: a simulation charges cuDNN without linking it", "[attention]") {
  for (const auto request : {AttentionRequest::automatic, AttentionRequest::cudnn}) {
    const auto r = tasks::resolve_attention(request, true, true, true);
    CHECK(r.kernel == AttentionKernel::cudnn);
    CHECK(r.why == "cuDNN flash attention, charged by its published rates");
  }
}

TEST_CASE("resolve_attention: a real GPU run follows the build", "[attention]") {
  const auto r = tasks::resolve_attention(AttentionRequest::automatic, true, true, false);
  CHECK(r.kernel == (tasks::cudnn_linked() ? AttentionKernel::cudnn : AttentionKernel::own));
  CHECK(tasks::resolve_attention(AttentionRequest::own, true, true, false).kernel == AttentionKernel::own);
}

TEST_CASE("the session's attention kernel is set once and read back", "[attention]") {
  tasks::set_session_attention(AttentionKernel::cudnn);
  CHECK(tasks::session_attention() == AttentionKernel::cudnn);
  tasks::set_session_attention(AttentionKernel::own);
  CHECK(tasks::session_attention() == AttentionKernel::own);
}

TEST_CASE("cuDNN's backward workspace estimate counts its regions", "[attention]") {
  // gpt-13B's attention: B=8, T=1024, NH=40, hs=128.
  const tasks::cudnn_attention::CudnnAttentionShape s{
      .B = 8, .T = 1024, .NH = 40, .NKV = 40, .hs = 128, .nh = 40, .ld_lse = 40 * 1024, .ld_dinp = 120 * 128,
      .backward = true};
  const std::size_t block = std::size_t(8) * 1024 * 40 * 128;  // one [B, T, NH·hs] tensor
  const std::size_t stats = std::size_t(8) * 40 * 1024 * 4;
  // O, dq, dk, dv in bf16, dQ's fp32 accumulator, Stats and D in fp32, two engine allowances.
  const std::size_t want = 4 * block * 2 + block * 4 + 2 * stats + 2 * tasks::cudnn_attention::kEngineWorkspaceAllowance;
  CHECK(tasks::cudnn_attention::estimated_workspace_bytes(s) == want);
  // Grouped-query heads: dk and dv are NKV heads wide.
  auto gqa = s;
  gqa.NKV = 8;
  CHECK(tasks::cudnn_attention::estimated_workspace_bytes(gqa) == want - 2 * (block - block / 5) * 2);
  auto fwd = s;
  fwd.backward = false;
  CHECK(tasks::cudnn_attention::estimated_workspace_bytes(fwd) == tasks::cudnn_attention::kEngineWorkspaceAllowance);
}

TEST_CASE("plan_memory adds cuDNN's workspace to the GPU only with cudnn attention", "[attention]") {
  PlanInput in;
  ModelFootprint model;
  model.params = 1000;
  model.attention = {8, 1024, 40, 40, 128};
  in.model = model;
  const MemoryPlan own = plan_memory(in);
  CHECK(own.attention_workspace == 0);
  in.cudnn_attention = true;
  const MemoryPlan cudnn = plan_memory(in);
  const tasks::cudnn_attention::CudnnAttentionShape whole{
      .B = 8, .T = 1024, .NH = 40, .NKV = 40, .hs = 128, .nh = 40, .ld_lse = 40 * 1024, .ld_dinp = 120 * 128,
      .backward = true};
  CHECK(cudnn.attention_workspace == double(tasks::cudnn_attention::estimated_workspace_bytes(whole)));
  CHECK(cudnn.gpu_total() == own.gpu_total() + cudnn.attention_workspace);
}
