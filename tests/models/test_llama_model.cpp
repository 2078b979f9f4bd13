// models/llama (LlamaModel) driven by offload/engine (Engine) on CPU workers, end to end, and its
// layout and files (no StarPU):
// - the fp32 loss against an independent double-precision Llama 3 (reference_llama3.hpp), with
//   and without grouped queries and Llama 3.1's RoPE scaling, with 1 and 2 tiles;
// - every parameter's gradient against central finite differences of that reference (1 and 2
//   tiles); 2, 3 and 4 tiles against one, and the gradient pieces;
// - every --recompute mode and window, with and without activation offload: the loss and
//   gradients bit for bit those of --recompute none (fp32, bf16; 1 and 2 tiles), the buffers'
//   bytes the formula's, and the formula against bytes counted by hand;
// - bf16 storage against fp32; initialisation; the initial loss; overfitting one batch;
// - the activation buffers against llama_activation_bytes;
// - the presets against Meta's published sizes, the llm.c layout;
// - llm.c Llama 3 checkpoints and token shards: round trips and every malformed case;
// - a checkpoint's family (models/registry.hpp) by its file's magic or its folder's model_type,
//   and the format it gives: precision, random reads, its Hugging Face folder.
// Every TEST_CASE that runs tasks starts its own StarPU Session.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "models/gpt_files.hpp"
#include "models/llama.hpp"
#include "models/llama_files.hpp"
#include "models/llama_layout.hpp"
#include "models/registry.hpp"
#include "offload/engine.hpp"
#include "model_test_support.hpp"
#include "reference_llama3.hpp"
#include "runtime/session.hpp"
#include "tasks/nn_llama_kernels.hpp"
#include "tests/temp_dir.hpp"

using namespace starzero;
using starzero::testing::TempDir;

namespace {

using namespace starzero::testing;

// The micro model: L=2, C=16, NH=4, NKV=2 (hs 4, Q = 32), H=24, V=11, maxT=8.
LlamaShape micro(int kv_heads = 2, bool scaled = false) {
  LlamaShape s;
  s.layers = 2;
  s.channels = 16;
  s.heads = 4;
  s.kv_heads = kv_heads;
  s.ffn_hidden = 24;
  s.vocab = 11;
  s.max_seq = 8;
  s.norm_eps = 1e-5f;
  // Scaled: theta 1e6 puts the second frequency's wavelength (6283) in the smoothed band.
  s.rope_theta = scaled ? 1e6f : 10000.0f;
  s.use_scaled_rope = scaled;
  return s;
}
constexpr int kB = 2, kT = 5;

// Forward loss: fp32 model vs the double reference, relative (measured: at most 4.1e-8).
constexpr double kLossRtol = 1e-6;

// Random llm.c-order parameters: N(0, 0.2) weights, RMSNorm weights U(0.5, 1.5).
std::vector<float> random_params(const LlamaShape& shape, std::uint32_t seed) {
  const reference::LlamaOffsets off(shape);
  return random_params_with_gains(off.total, 0.2f, std::size_t(shape.layers), std::size_t(shape.channels),
                                  {off.ln1w, off.ln2w}, off.lnfw, seed);
}

// "qkvw[37]": the llm.c tensor element k of the flat vector belongs to.
std::string tensor_name(const LlamaShape& shape, std::size_t k) {
  const LlamaLayout layout(shape);
  for (const LlamaTensor& t : layout.tensors())
    if (k >= t.llmc_offset && k < t.llmc_offset + t.count)
      return std::string(t.name) + "[" + std::to_string(k - t.llmc_offset) + "]";
  return "?";
}

}  // namespace

TEST_CASE("fp32 forward loss matches the double-precision reference", "[llama][loss]") {
  const int kv_heads = GENERATE(1, 2, 4);  // multi-query, grouped, multi-head
  const bool scaled = GENERATE(false, true);
  const int tiles = GENERATE(1, 2);  // one task per op, or one per sequence
  INFO("NKV " << kv_heads << ", scaled RoPE " << scaled << ", tiles " << tiles);
  const LlamaShape shape = micro(kv_heads, scaled);
  Session session(cpu_session());
  LlamaModel model(shape, DType::f32, kB, kT, tiles);
  check_loss_trials(
      model, 2, shape.vocab, kLossRtol, [&](std::uint32_t trial) { return random_params(shape, 100 + trial); },
      [&](const auto& p, const auto& inputs, const auto& targets) {
        return reference::llama3_loss(p, shape, inputs, targets, kB, kT);
      });
}

TEST_CASE("every parameter's gradient matches finite differences of the reference", "[llama][gradient]") {
  const bool scaled = GENERATE(false, true);
  // Two tiles: row-wise tasks per sequence, the weight gradients in pieces added tile by tile.
  const int tiles = GENERATE(1, 2);
  INFO("scaled RoPE " << scaled << ", tiles " << tiles);
  const LlamaShape shape = micro(2, scaled);
  Session session(cpu_session());
  LlamaModel model(shape, DType::f32, kB, kT, tiles);
  // Token 3 both as an input and a target: its wte row gets the embedding's and the head's gradients.
  const BatchGradient g = check_reference_gradient(
      model, random_params(shape, 42), shape.vocab,
      [&](const auto& p, const auto& inputs, const auto& targets) {
        return reference::llama3_loss(p, shape, inputs, targets, kB, kT);
      },
      kReferenceFd, [&](std::size_t k) { return tensor_name(shape, k); });
  // wte rows of tokens that are never inputs get no gradient (the head is untied).
  const EmbeddingRows rows = embedding_rows(g, shape.vocab, std::size_t(shape.channels), 0);
  for (std::size_t v = 0; v < std::size_t(shape.vocab); ++v) {
    INFO("wte row " << v);
    CHECK((rows.magnitude[v] > 0) == bool(rows.is_input[v]));
  }
}

TEST_CASE("bf16 model follows the fp32 model", "[llama][bf16]") {
  const LlamaShape shape = micro();
  Session session(cpu_session());
  check_bf16_follows_fp32<LlamaModel>(
      [&](DType dtype) { return std::make_unique<LlamaModel>(shape, dtype, kB, kT); }, random_params(shape, 77),
      shape.vocab, 2e-2, 0.99);
}

TEST_CASE("initialisation is a function of (seed, layer) and starts at loss ln V", "[llama][init]") {
  Session session(cpu_session());
  const LlamaShape shape = llama_preset("llama3-tiny");
  constexpr int B = 4, T = 32;
  LlamaModel model(shape, DType::f32, B, T);
  auto draw = [&](int layer, std::uint64_t seed) {
    std::vector<float> v(model.layer_params(layer));
    model.init_layer(layer, v, seed);
    return v;
  };
  const std::vector<float> block = draw(2, 7);
  CHECK(draw(2, 7) == block);
  CHECK(draw(2, 8) != block);
  CHECK(draw(1, 7) != block);
  const LlamaTensor& ln1 = model.layout()[LlamaParam::ln1w];
  for (std::size_t i = 0; i < ln1.layer_count; ++i) REQUIRE(block[ln1.layer_offset + i] == 1.0f);
  const LlamaTensor& lnf = model.layout()[LlamaParam::lnfw];
  const std::vector<float> head = draw(shape.layers + 1, 7);
  for (std::size_t i = 0; i < lnf.layer_count; ++i) REQUIRE(head[lnf.layer_offset + i] == 1.0f);

  const double loss = initial_loss(model, shape.vocab);
  INFO("loss " << loss << ", ln 256 = " << std::log(256.0));
  CHECK(std::abs(loss - std::log(256.0)) < 0.1);
  // The buffers as allocated are what the planner's formula says.
  CHECK(model.activation_bytes() == llama_activation_bytes(shape, 4, B, T));
}

TEST_CASE("AdamW overfits one fixed batch", "[llama][train]") {
  LlamaShape shape = micro();
  shape.vocab = 32;
  shape.max_seq = 16;
  constexpr int B = 2, T = 16;
  Session session(cpu_session());
  LlamaModel model(shape, DType::f32, B, T);
  const OverfitResult run = overfit_one_batch(model, shape.vocab, 150, 1e-2f);
  INFO("initial loss " << run.initial << ", after 150 steps " << run.final << "; trajectory" << run.trajectory);
  CHECK(run.final < 0.1 * run.initial);
}

namespace {

// One loss and every parameter's gradient of a model built with `tiles` and `policy`, from the
// same parameters and batch.
struct LossAndGradients {
  double loss;
  std::vector<float> grad;
  std::size_t held, offloaded;
};
LossAndGradients run_gradients(const LlamaShape& shape, DType dtype, int B, int T, int tiles,
                               const ActivationPolicy& policy, const std::vector<float>& params,
                               const std::vector<int>& inputs, const std::vector<int>& targets) {
  LlamaModel model(shape, dtype, B, T, tiles, policy);
  const EngineOptions opts = reference_options();
  Engine engine(model, opts);
  engine.set_master_params(to_layers(model, params));
  model.set_batch(inputs, targets);
  engine.submit_gradients();
  const double loss = model.mean_loss();
  return {loss, to_flat(model, engine.gradients()), model.activation_bytes(), model.offloaded_activation_bytes()};
}

std::string describe(const ActivationPolicy& p) {
  return std::string("--recompute ") + recompute_name(p.recompute) + " --recompute-window " + std::to_string(p.window) +
         " --offload-activations " + offload_name(p.offload);
}

}  // namespace

TEST_CASE("tiles: the model agrees across tile counts and cuts its gradients into pieces", "[llama][tiles]") {
  const LlamaShape shape = micro();
  constexpr int B = 4, T = 5;
  Session session(cpu_session());
  std::mt19937 rng(23);
  const std::vector<float> params = random_params(shape, 99);
  const auto inputs = random_tokens(rng, B * T, shape.vocab);
  const auto targets = random_tokens(rng, B * T, shape.vocab);
  const LossAndGradients one = run_gradients(shape, DType::f32, B, T, 1, {}, params, inputs, targets);
  for (int tiles : {2, 3, 4}) {  // 3: tiles of 1, 1 and 2 sequences
    INFO("tiles " << tiles);
    const LossAndGradients tiled = run_gradients(shape, DType::f32, B, T, tiles, {}, params, inputs, targets);
    CHECK(std::abs(tiled.loss - one.loss) <= 1e-6 * std::abs(one.loss));
    REQUIRE(tiled.grad.size() == one.grad.size());
    std::size_t bad = 0;
    for (std::size_t k = 0; k < one.grad.size(); ++k)
      if (!(std::abs(tiled.grad[k] - one.grad[k]) <= 1e-4 * std::abs(one.grad[k]) + 1e-6)) ++bad;
    CHECK(bad == 0);
    // The buffers do not depend on the tile count.
    CHECK(tiled.held == one.held);
  }
  // The gradient pieces: every linear weight cut into min(tiles, output channels) pieces of whole
  // output channels, each RMSNorm weight one piece; the embedding whole; one tile: all whole.
  const std::size_t C = 16, Q = 32, H = 24;  // V = 11
  LlamaModel whole(shape, DType::f32, B, T, 1);
  for (int layer = 0; layer < whole.layers(); ++layer) CHECK(whole.gradient_pieces(layer).empty());
  LlamaModel two(shape, DType::f32, B, T, 2);
  CHECK(two.gradient_pieces(0).empty());
  CHECK(two.gradient_pieces(1) == std::vector<std::size_t>{C, Q / 2 * C, Q / 2 * C, C / 2 * C, C / 2 * C, C, H / 2 * C,
                                                           H / 2 * C, H / 2 * C, H / 2 * C, C / 2 * H, C / 2 * H});
  CHECK(two.gradient_pieces(3) == std::vector<std::size_t>{C, 5 * C, 6 * C});  // lnfw, lm_head's 11 rows as 5 + 6
  CHECK_THROWS_AS(LlamaModel(shape, DType::f32, B, T, 5), std::invalid_argument);
  CHECK_THROWS_AS(LlamaModel(shape, DType::f32, B, T, 0), std::invalid_argument);
}

TEST_CASE("recomputation and activation offload change no bit, and hold the formula's bytes", "[llama][recompute]") {
  const LlamaShape shape = micro();  // L = 2
  constexpr int B = 4, T = 5;
  const DType dtype = GENERATE(DType::f32, DType::bf16);
  const int tiles = GENERATE(1, 2);
  INFO(dtype_name(dtype) << ", tiles " << tiles);
  Session session(cpu_session());
  std::mt19937 rng(31);
  const std::vector<float> params = random_params(shape, 5);
  const auto inputs = random_tokens(rng, B * T, shape.vocab);
  const auto targets = random_tokens(rng, B * T, shape.vocab);
  const LossAndGradients kept_all = run_gradients(shape, dtype, B, T, tiles, {}, params, inputs, targets);
  const std::size_t e = dtype_size(dtype);
  CHECK(kept_all.held == llama_activation_bytes(shape, e, B, T));
  CHECK(kept_all.offloaded == 0);
  using enum Recompute;
  const ActivationOffload cpu = ActivationOffload::cpu, kept = ActivationOffload::none;
  for (const ActivationPolicy& policy :
       {ActivationPolicy{selective, 0, kept}, ActivationPolicy{selective, 1, kept}, ActivationPolicy{full, 0, kept},
        ActivationPolicy{full, 1, kept}, ActivationPolicy{none, 0, cpu}, ActivationPolicy{selective, 0, cpu},
        ActivationPolicy{full, 0, cpu}, ActivationPolicy{full, 1, cpu}}) {
    INFO(describe(policy));
    const LossAndGradients r = run_gradients(shape, dtype, B, T, tiles, policy, params, inputs, targets);
    CHECK(r.loss == kept_all.loss);
    CHECK(r.grad == kept_all.grad);
    CHECK(r.held == llama_activation_bytes(shape, e, B, T, policy));
    CHECK(r.offloaded == llama_offloaded_activation_bytes(shape, e, B, T, policy));
  }
}

TEST_CASE("the activation bytes per mode, counted by hand", "[llama][recompute]") {
  // micro(): L=2, C=16, NH=4, NKV=2 (Q=32), H=24, V=11; B=4, T=5, fp32. Per token (bytes):
  // a block's forward writes ln1, atty, attproj, residual2, ln2, mlpproj, residual3 (7·16), qkv
  // (32), fc, fc2, swiglu (3·24), two rstd (2) and its attention's log-sum-exps (NH = 4 floats:
  // one per query head, not a row of T).
  const LlamaShape shape = micro();
  constexpr std::size_t all = (7 * 16 + 32 + 3 * 24 + 2 + 4) * 4;       // 888
  constexpr std::size_t kept_none = all - 2 * 16 * 4;                   // but attproj, mlpproj
  constexpr std::size_t kept_selective = (32 + 16 + 24 + 24 + 16) * 4;  // qkv, residual2, fc, fc2, residual3
  constexpr std::size_t kept_full = 16 * 4;                             // residual3
  // Two gradient slots of 7·16 + 2·32 + 3·24 elements; the rest (no attention scratch): tokens
  // and targets, embedded and dembedded, lnf, dlnf and its rstd, logits and dlogits,
  // probs and losses.
  constexpr std::size_t gradients = 2 * (7 * 16 + 2 * 32 + 3 * 24) * 4;
  constexpr std::size_t rest = 8 + 2 * 16 * 4 + 2 * 16 * 4 + 4 + 2 * 11 * 4 + 11 * 4 + 4;
  // Once per micro-batch: the embedding's two T·C scratch buffers and the RoPE table (T·hs fp32).
  constexpr std::size_t once = 2 * 5 * 16 * 4 + 5 * 4 * 4;
  constexpr std::size_t tokens = 4 * 5;
  auto bytes = [&](std::size_t on_device_blocks, std::size_t kept, std::size_t slots, std::size_t slot) {
    return tokens * (on_device_blocks * kept + slots * slot + gradients + rest) + once;
  };
  using enum Recompute;
  const ActivationOffload cpu = ActivationOffload::cpu, no = ActivationOffload::none;
  auto held = [&](ActivationPolicy p) { return llama_activation_bytes(shape, 4, 4, 5, p); };
  CHECK(held({none, 1, no}) == bytes(2, kept_none, 1, 2 * 16 * 4));
  CHECK(held({selective, 0, no}) == bytes(2, kept_selective, 1, all - kept_selective));
  CHECK(held({selective, 1, no}) == bytes(2, kept_selective, 2, all - kept_selective));
  CHECK(held({full, 0, no}) == bytes(2, kept_full, 1, all - kept_full));
  CHECK(held({full, 5, no}) == bytes(2, kept_full, 2, all - kept_full));  // W + 1 slots, at most L
  // Offload: the first L − (W + 1) blocks' kept tensors live in host memory.
  CHECK(held({none, 0, cpu}) == bytes(1, kept_none, 1, 2 * 16 * 4));
  CHECK(llama_offloaded_activation_bytes(shape, 4, 4, 5, {none, 0, cpu}) == tokens * kept_none);
  CHECK(llama_offloaded_activation_bytes(shape, 4, 4, 5, {full, 0, cpu}) == tokens * kept_full);
  CHECK(llama_offloaded_activation_bytes(shape, 4, 4, 5, {full, 1, cpu}) == 0);
  CHECK(llama_offloaded_activation_bytes(shape, 4, 4, 5, {full, 0, no}) == 0);
  // The planner's footprint carries them.
  const ModelFootprint f = llama_footprint(shape, 4, 5, {full, 0, cpu});
  CHECK(std::size_t(f.activation_bytes_4) == held({full, 0, cpu}));
  CHECK(std::size_t(f.offloaded_activation_bytes_4) == tokens * kept_full);
  CHECK(std::size_t(f.activation_bytes_2) == llama_activation_bytes(shape, 2, 4, 5, {full, 0, cpu}));
}

TEST_CASE("presets have Meta's published sizes", "[llama][layout]") {
  CHECK(kernels::llama_ffn_hidden(2048, 1.5f, 256) == 8192);
  const LlamaShape b1 = llama_preset("llama3-1B"), b8 = llama_preset("llama3-8B"), b70 = llama_preset("llama3-70B");
  CHECK(b1.ffn_hidden == 8192);
  CHECK(b8.ffn_hidden == 14336);
  CHECK(b70.ffn_hidden == 28672);
  // Llama 3.1 8B and 70B (untied): Meta's parameter counts.
  CHECK(b8.param_count() == 8030261248ull);
  CHECK(b70.param_count() == 70553706496ull);
  // Llama 3.2 1B is 1,235,814,400 with its tied embedding; llm.c's layout adds lm_head (V·C).
  CHECK(b1.param_count() == 1235814400ull + 128256ull * 2048ull);
  const LlamaShape tiny = llama_preset("llama3-tiny");
  CHECK(tiny.vocab == 256);
  CHECK(tiny.ffn_hidden == 192);
  CHECK_THROWS_AS(llama_preset("llama3-7B"), std::invalid_argument);

  // The layout: llm.c's order, runs tiling the file, layers adding up.
  const LlamaLayout layout(micro());
  std::vector<std::string> names;
  for (const LlamaTensor& t : layout.tensors()) names.emplace_back(t.name);
  CHECK(names == std::vector<std::string>{"transformer.wte.weight", "ln_1.weight", "attn.c_attn.weight",
                                          "attn.c_proj.weight", "ln_2.weight", "mlp.c_fc.weight", "mlp.c_fc2.weight",
                                          "mlp.c_proj.weight", "transformer.ln_f.weight", "lm_head.weight"});
  const reference::LlamaOffsets off(micro());
  CHECK(layout[LlamaParam::qkvw].llmc_offset == off.qkvw);
  CHECK(layout[LlamaParam::fc2w].llmc_offset == off.fc2w);
  CHECK(layout[LlamaParam::lm_head].llmc_offset == off.lm_head);
  CHECK(layout.param_count() == off.total);
  std::vector<int> covered(layout.param_count(), 0);
  std::size_t sum = 0;
  for (int l = 0; l < layout.layers(); ++l) {
    sum += layout.layer_params(l);
    for (const LlmcRun& run : layout.layer_runs(l))
      for (std::size_t i = 0; i < run.count; ++i) ++covered[run.llmc_offset + i];
  }
  CHECK(sum == layout.param_count());
  CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));

  // The state files' fields name the family: Llama's, not GPT's nor the MLP's.
  const StateShapeFields fields = tiny.fields();
  CHECK(fields[5] == -192);
  CHECK(LlamaShape::from_fields(fields).same_model(tiny));
  const auto format = checkpoint_format_of_state(fields);
  REQUIRE(format);
  CHECK(format->describe(DType::f32) == "llm.c Llama 3 version 3");
  CHECK(format->state_layout().layer_params == LlamaLayout(tiny).state_layout().layer_params);
  // The footprint: Ψ and the largest layer.
  const ModelFootprint f = llama_footprint(b8, 1, 1024);
  CHECK(std::size_t(f.params) == b8.param_count());
  CHECK(f.largest_layer().name == "head");  // lm_head and ln_f
}

// ---- files --------------------------------------------------------------------------------------

namespace {

std::vector<char> bytes_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
void write_bytes_to(const std::filesystem::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}
void set_int(std::vector<char>& bytes, std::size_t index, std::int32_t value) {
  std::memcpy(bytes.data() + index * 4, &value, 4);
}
// The FileFormatError message of reading `path`, or "" when it reads.
std::string read_error(const std::filesystem::path& path) {
  try {
    LlamaCheckpointFile::read(path);
  } catch (const FileFormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("llm.c Llama 3 checkpoints round trip", "[llama][files]") {
  TempDir dir;
  const LlamaShape shape = llama_preset("llama3-tiny");
  std::vector<float> params(shape.param_count());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : params) x = normal(rng);

  LlamaCheckpointFile::write(dir.path() / "a.bin", shape, params);
  const LlamaCheckpoint back = LlamaCheckpointFile::read(dir.path() / "a.bin");
  CHECK(back.version == kLlmcCheckpointFp32);
  CHECK(back.shape.same_model(shape));
  CHECK(back.params == params);
  CHECK(std::filesystem::file_size(dir.path() / "a.bin") == 1024 + 4 * shape.param_count());

  LlamaCheckpointFile::write(dir.path() / "b.bin", shape, params, kLlmcCheckpointBf16);
  const LlamaCheckpoint half = LlamaCheckpointFile::read(dir.path() / "b.bin");
  CHECK(half.version == kLlmcCheckpointBf16);
  REQUIRE(half.params.size() == params.size());
  for (std::size_t i = 0; i < params.size(); ++i)
    REQUIRE(std::abs(half.params[i] - params[i]) <= std::abs(params[i]) / 128);

  // The header as llm.c writes it: float fields truncated.
  const LlmcHeaderWords h8 = llama_checkpoint_header(llama_preset("llama3-8B"), 3);
  CHECK(h8[0] == 20240803);
  CHECK(h8[2] == 8192);
  CHECK(h8[3] == 128256);
  CHECK(h8[4] == 32);
  CHECK(h8[5] == 32);
  CHECK(h8[6] == 8);
  CHECK(h8[7] == 4096);
  CHECK(h8[8] == 1);  // ffn_dim_multiplier 1.3
  CHECK(h8[9] == 1024);
  CHECK(h8[10] == 0);  // norm_eps 1e-5
  CHECK(h8[11] == 500000);
  CHECK(h8[12] == 1);
  CHECK(h8[14] == 3);
  CHECK(h8[15] == 1);
  // ... and read back to the real values of Llama 3.1 8B.
  const LlamaShape s8 = llama_shape_from_header(h8, "8B");
  CHECK(s8.same_model(llama_preset("llama3-8B")));
  CHECK(s8.ffn_hidden == 14336);
  CHECK(s8.norm_eps == 1e-5f);
  CHECK(llama_shape_from_header(llama_checkpoint_header(llama_preset("llama3-1B"), 3), "1B").ffn_hidden == 8192);
  CHECK(llama_shape_from_header(llama_checkpoint_header(llama_preset("llama3-70B"), 3), "70B").ffn_hidden == 28672);
}

TEST_CASE("malformed Llama 3 checkpoints are errors", "[llama][files]") {
  TempDir dir;
  const LlamaShape shape = llama_preset("llama3-tiny");
  const std::vector<float> params(shape.param_count(), 0.5f);
  const auto good_path = dir.path() / "good.bin";
  LlamaCheckpointFile::write(good_path, shape, params);
  const std::vector<char> good = bytes_of(good_path);
  const auto bad = dir.path() / "bad.bin";
  auto with = [&](std::size_t index, std::int32_t value) {
    std::vector<char> b = good;
    set_int(b, index, value);
    write_bytes_to(bad, b);
    return read_error(bad);
  };
  CHECK_THAT(with(0, 20240326), Catch::Contains("wrong magic") && Catch::Contains("GPT-2 checkpoint"));
  CHECK_THAT(with(0, 20240801), Catch::Contains("token shard"));
  CHECK_THAT(with(1, 4), Catch::Contains("unknown version 4"));
  CHECK_THAT(with(4, 5), Catch::Contains("truncated data"));        // one more layer than stored
  CHECK_THAT(with(4, 3), Catch::Contains("trailing data"));         // one less
  CHECK_THAT(with(6, 3), Catch::Contains("not a multiple of kv"));  // NH=4, NKV=3
  CHECK_THAT(with(5, 0), Catch::Contains("invalid shape"));
  CHECK_THAT(with(4, 1 << 20), Catch::Contains("invalid shape"));
  CHECK_THAT(with(10, 1), Catch::Contains("norm_eps"));
  CHECK_THAT(with(11, 0), Catch::Contains("rope_theta"));
  CHECK_THAT(with(12, 2), Catch::Contains("use_scaled_rope"));
  CHECK_THAT(with(9, 0), Catch::Contains("multiple_of"));
  CHECK_THAT(with(14, 2), Catch::Contains("no Llama 3"));
  CHECK_THAT(with(9, 100), Catch::Contains("truncated data"));  // H = 200 instead of 192
  {
    // A Llama 3.1 8B header whose truncated multiplier is not 1.
    LlmcHeaderWords h = llama_checkpoint_header(llama_preset("llama3-8B"), 3);
    h[8] = 2;
    CHECK_THROWS_WITH(llama_shape_from_header(h, "x"), Catch::Contains("Llama 3.1 8B"));
  }
  std::vector<char> cut(good.begin(), good.begin() + 1000);
  write_bytes_to(bad, cut);
  CHECK_THAT(read_error(bad), Catch::Contains("truncated header"));
  cut.assign(good.begin(), good.end() - 2);
  write_bytes_to(bad, cut);
  CHECK_THAT(read_error(bad), Catch::Contains("truncated data"));
  std::vector<char> longer = good;
  longer.push_back(0);
  write_bytes_to(bad, longer);
  CHECK_THAT(read_error(bad), Catch::Contains("trailing data"));
  CHECK_THROWS_AS(LlamaCheckpointFile::read(dir.path() / "missing.bin"), FileFormatError);
  // Another model's shape, when one is expected.
  LlamaShape other = shape;
  other.layers = 3;
  CHECK_THROWS_WITH(LlamaCheckpointFile::read_header(good_path, other), Catch::Contains("shape mismatch"));
  // The writer refuses what it cannot write, and leaves nothing behind.
  CHECK_THROWS_AS(LlamaCheckpointFile::write(dir.path() / "c.bin", shape, std::vector<float>(3)), std::invalid_argument);
  CHECK_THROWS_AS(LlamaCheckpointFile::write(dir.path() / "c.bin", shape, params, 4), std::invalid_argument);
  LlamaShape inexpressible = shape;
  inexpressible.ffn_hidden = 100;
  CHECK_THROWS_AS(
      LlamaCheckpointFile::write(dir.path() / "c.bin", inexpressible, std::vector<float>(inexpressible.param_count())),
      std::invalid_argument);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "c.bin"));
}

TEST_CASE("Llama 3 token shards", "[llama][files]") {
  TempDir dir;
  const std::vector<std::uint32_t> tokens = {0, 1, 128000, 128255, 42};
  LlamaTokenShardFile::write(dir.path() / "t.bin", tokens);
  CHECK(LlamaTokenShardFile::read(dir.path() / "t.bin") == tokens);
  CHECK(file_magic(dir.path() / "t.bin") == kLlamaTokenMagic);
  std::vector<char> good = bytes_of(dir.path() / "t.bin");
  const auto bad = dir.path() / "bad.bin";
  auto error = [&](std::vector<char> b) {
    write_bytes_to(bad, b);
    try {
      LlamaTokenShardFile::read(bad);
    } catch (const FileFormatError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::vector<char> b = good;
  set_int(b, 0, 20240520);
  CHECK_THAT(error(b), Catch::Contains("wrong magic"));
  b = good;
  set_int(b, 1, 1);
  CHECK_THAT(error(b), Catch::Contains("unknown version 1"));
  b = good;
  set_int(b, 2, 6);
  CHECK_THAT(error(b), Catch::Contains("truncated data"));
  b = good;
  set_int(b, 2, -1);
  CHECK_THAT(error(b), Catch::Contains("negative"));
  b = good;
  b.pop_back();
  CHECK_THAT(error(b), Catch::Contains("truncated data"));
  b.assign(good.begin(), good.begin() + 12);
  CHECK_THAT(error(b), Catch::Contains("truncated header"));
}

TEST_CASE("a checkpoint's family by its file's magic or its folder's model_type", "[llama][files]") {
  TempDir dir;
  const std::filesystem::path llama_file = dir.path() / "llama.bin", gpt_file = dir.path() / "gpt.bin";
  const LlamaShape llama = llama_preset("llama3-tiny");
  std::vector<float> params(llama.param_count());
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = float(i % 251) - 125.0f;  // exact in bf16
  LlamaCheckpointFile::write(llama_file, llama, params, kLlmcCheckpointBf16);
  const GptShape gpt = gpt_preset("tiny");
  GptCheckpointFile::write(gpt_file, gpt, std::vector<float>(gpt.param_count()));
  write_bytes_to(dir.path() / "other.bin", std::vector<char>(8, 1));
  CHECK(checkpoint_model_family(llama_file).name == "llama3");
  CHECK(checkpoint_model_family(gpt_file).name == "gpt");
  CHECK(checkpoint_model_family(dir.path() / "other.bin").name == "gpt");  // its reader names what is wrong

  // The family's format of the file: its precision, and every layer read at random as read whole.
  const auto format = checkpoint_model_family(llama_file).format_of_checkpoint(llama_file);
  CHECK(format->describe(DType::bf16) == "llm.c Llama 3 version 5");
  CHECK(format->stored_precision(llama_file) == DType::bf16);
  CHECK(checkpoint_model_family(gpt_file).format_of_checkpoint(gpt_file)->stored_precision(gpt_file) == DType::f32);
  const std::vector<std::vector<float>> layers = format->read_layers(llama_file);
  const LayerSource source = format->source(llama_file);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::size_t begin = layers[l].size() / 3;
    std::vector<float> part(layers[l].size() - begin);
    source(int(l), begin, part);
    CHECK(std::equal(part.begin(), part.end(), layers[l].begin() + std::ptrdiff_t(begin)));
  }
  REQUIRE(format->hugging_face());
  CHECK_THAT(format->hugging_face()->describe(DType::f32), Catch::Contains("Llama 3"));

  for (const char* type : {"llama", "gpt2", "mistral"}) {
    const std::filesystem::path folder = dir.path() / type;
    std::filesystem::create_directory(folder);
    std::ofstream(folder / "config.json") << "{\"model_type\": \"" << type << "\"}";
  }
  CHECK(checkpoint_model_family(dir.path() / "llama").name == "llama3");
  CHECK(checkpoint_model_family(dir.path() / "gpt2").name == "gpt");
  CHECK_THROWS_WITH(checkpoint_model_family(dir.path() / "mistral"),
                    Catch::Contains("'mistral' is none of \"gpt2\", \"llama\""));
}
