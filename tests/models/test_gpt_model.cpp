// models/gpt (GptModel) driven by offload/engine (Engine) on CPU workers, end to end:
// - the fp32 loss against an independent double-precision GPT-2 (reference_gpt2.hpp);
// - every parameter's gradient against central finite differences of that reference;
// - bf16 storage against fp32; the initial loss of the default initialisation; overfitting one
//   batch with AdamW; bitwise determinism across runs (lws and dmdas); bitwise identical training
//   for every attention head-group count; updates only through AdamW; the llm.c parameter layout
//   of the layer blocks;
// - masked targets (tasks/loss_mask.hpp): the masked mean loss against the counted positions'
//   losses and the reference, its gradient against finite differences, what masked positions hold
//   changing no bit, and micro-batches giving the global batch's masked mean.
// Every TEST_CASE starts its own StarPU Session (CTest runs each case in its own process). Shapes
// are deliberately not multiples of 8.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/gpt.hpp"
#include "models/gpt_files.hpp"
#include "models/token_rows.hpp"
#include "offload/engine.hpp"
#include "model_test_support.hpp"
#include "reference_gpt2.hpp"
#include "runtime/session.hpp"

using namespace starzero;

namespace {

using namespace starzero::testing;

// The micro model of the loss, gradient and bf16 tests: {maxT, V, Vp, L, NH, C}; hs = 4.
const GptShape kMicro{8, 11, 16, 2, 3, 12};
constexpr int kB = 2, kT = 5;  // T < maxT: the last wpe rows are unused (zero gradient)

// Forward loss: fp32 model vs the double reference, relative.
constexpr double kLossRtol = 1e-5;
// bf16 model vs fp32 model on the same parameters.
constexpr double kBf16LossRtol = 2e-2, kBf16MinCosine = 0.99;

// Random llm.c-order parameters: N(0, 0.1) weights and biases (padding rows of wte included:
// they must not matter), layernorm gains around 1 (U(0.5, 1.5)) and N(0, 0.1) layernorm biases.
std::vector<float> random_llmc_params(const GptShape& shape, std::uint32_t seed) {
  const reference::GptOffsets off(shape);
  return random_params_with_gains(off.total, 0.1f, std::size_t(shape.layers), std::size_t(shape.channels),
                                  {off.ln1w, off.ln2w}, off.lnfw, seed);
}

// "qkvw[l=1][37]": which llm.c tensor (and layer) element k of the flat vector belongs to.
std::string llmc_name(const GptShape& shape, std::size_t k) {
  const reference::GptOffsets o(shape);
  const std::size_t C = std::size_t(shape.channels), L = std::size_t(shape.layers);
  const struct {
    const char* name;
    std::size_t start, count;
    bool per_layer;
  } tensors[] = {{"wte", o.wte, o.wpe - o.wte, false},
                 {"wpe", o.wpe, o.ln1w - o.wpe, false},
                 {"ln1w", o.ln1w, L * C, true},
                 {"ln1b", o.ln1b, L * C, true},
                 {"qkvw", o.qkvw, L * 3 * C * C, true},
                 {"qkvb", o.qkvb, L * 3 * C, true},
                 {"attprojw", o.attprojw, L * C * C, true},
                 {"attprojb", o.attprojb, L * C, true},
                 {"ln2w", o.ln2w, L * C, true},
                 {"ln2b", o.ln2b, L * C, true},
                 {"fcw", o.fcw, L * 4 * C * C, true},
                 {"fcb", o.fcb, L * 4 * C, true},
                 {"fcprojw", o.fcprojw, L * 4 * C * C, true},
                 {"fcprojb", o.fcprojb, L * C, true},
                 {"lnfw", o.lnfw, C, false},
                 {"lnfb", o.lnfb, C, false}};
  for (const auto& t : tensors) {
    if (k < t.start || k >= t.start + t.count) continue;
    const std::size_t i = k - t.start;
    std::ostringstream s;
    if (t.per_layer)
      s << t.name << "[l=" << i / (t.count / L) << "][" << i % (t.count / L) << "]";
    else
      s << t.name << "[" << i << "]";
    return s.str();
  }
  return "?";
}

}  // namespace

TEST_CASE("fp32 forward loss matches the double-precision reference", "[gpt][loss]") {
  // One tile (each op one task) and two (each row-wise op one task per sequence).
  const int tiles = GENERATE(1, 2);
  INFO("tiles " << tiles);
  Session session(cpu_session());
  GptModel model(kMicro, DType::f32, kB, kT, tiles);
  check_loss_trials(
      model, 3, kMicro.vocab, kLossRtol, [](std::uint32_t trial) { return random_llmc_params(kMicro, 100 + trial); },
      [](const auto& p, const auto& inputs, const auto& targets) {
        return reference::gpt2_loss(p, kMicro, inputs, targets, kB, kT);
      });
}

TEST_CASE("every parameter's gradient matches finite differences of the reference", "[gpt][gradient]") {
  const int tiles = GENERATE(1, 2);
  INFO("tiles " << tiles);
  Session session(cpu_session());
  GptModel model(kMicro, DType::f32, kB, kT, tiles);
  // Token 3 both as an input and a target: its wte row gets the embedding's and the head's gradients.
  const BatchGradient g = check_reference_gradient(
      model, random_llmc_params(kMicro, 42), kMicro.vocab,
      [](const auto& p, const auto& inputs, const auto& targets) {
        return reference::gpt2_loss(p, kMicro, inputs, targets, kB, kT);
      },
      kReferenceFd, [](std::size_t k) { return llmc_name(kMicro, k); });

  // The tied embedding and the positions, specifically (covered above; named here).
  const reference::GptOffsets off(kMicro);
  const std::size_t C = std::size_t(kMicro.channels);
  // Padding rows of wte and wpe rows at t >= T take no part: exactly zero gradient.
  for (std::size_t i = std::size_t(kMicro.vocab) * C; i < off.wpe; ++i) REQUIRE(g.grad[i] == 0.0f);
  for (std::size_t i = off.wpe + std::size_t(kT) * C; i < off.ln1w; ++i) REQUIRE(g.grad[i] == 0.0f);
  // A token that is never an input: its wte row only has the classifier's gradient, still non-zero.
  const EmbeddingRows rows = embedding_rows(g, kMicro.vocab, C, off.wte);
  for (std::size_t v = 0; v < std::size_t(kMicro.vocab); ++v) {
    INFO("wte row " << v << (rows.is_input[v] ? " (input)" : " (classifier only)"));
    CHECK(rows.magnitude[v] > 0);
  }
}

TEST_CASE("bf16 model follows the fp32 model", "[gpt][bf16]") {
  Session session(cpu_session());
  check_bf16_follows_fp32<GptModel>([](DType dtype) { return std::make_unique<GptModel>(kMicro, dtype, kB, kT); },
                                    random_llmc_params(kMicro, 77), kMicro.vocab, kBf16LossRtol, kBf16MinCosine);
}

TEST_CASE("initial values: GPT-2's distributions, a function of (seed, layer) alone", "[gpt][init]") {
  Session session(cpu_session());
  const GptShape shape{64, 300, 320, 3, 4, 48};
  GptModel model(shape, DType::f32, 1, 8);
  const GptLayout& layout = model.layout();
  auto draw = [&](int layer, std::uint64_t seed) {
    std::vector<float> v(model.layer_params(layer));
    model.init_layer(layer, v, seed);
    return v;
  };
  // The sample standard deviation and mean of one tensor of one layer.
  auto moments = [&](const std::vector<float>& v, GptParam p, std::size_t count) {
    const GptTensor& t = layout[p];
    double sum = 0, squares = 0;
    for (std::size_t i = 0; i < count; ++i)
      sum += v[t.layer_offset + i], squares += double(v[t.layer_offset + i]) * v[t.layer_offset + i];
    const double mean = sum / double(count);
    return std::pair{mean, std::sqrt(squares / double(count) - mean * mean)};
  };
  const std::vector<float> embedding = draw(0, 7), block = draw(2, 7);
  const auto [wte_mean, wte_std] = moments(embedding, GptParam::wte, std::size_t(shape.vocab) * shape.channels);
  CHECK(std::abs(wte_std - 0.02) < 0.02 * 0.03);  // 14400 values: the std within 3 %
  CHECK(std::abs(wte_mean) < 0.001);
  const auto [proj_mean, proj_std] = moments(block, GptParam::attprojw, layout[GptParam::attprojw].layer_count);
  CHECK(std::abs(proj_std - 0.02 / std::sqrt(2.0 * shape.layers)) < 0.02 / std::sqrt(2.0 * shape.layers) * 0.05);
  // Padding rows of wte are zero, biases zero, layernorm gains one.
  const GptTensor& wte = layout[GptParam::wte];
  for (std::size_t i = std::size_t(shape.vocab) * shape.channels; i < wte.layer_count; ++i)
    REQUIRE(embedding[i] == 0.0f);
  for (std::size_t i = 0; i < layout[GptParam::qkvb].layer_count; ++i)
    REQUIRE(block[layout[GptParam::qkvb].layer_offset + i] == 0.0f);
  for (std::size_t i = 0; i < layout[GptParam::ln1w].layer_count; ++i)
    REQUIRE(block[layout[GptParam::ln1w].layer_offset + i] == 1.0f);
  // Deterministic, and different for another seed or another layer of the same kind.
  CHECK(draw(2, 7) == block);
  CHECK(draw(2, 8) != block);
  CHECK(draw(1, 7) != block);
}

TEST_CASE("the default initialisation starts at loss ln(V)", "[gpt][init]") {
  Session session(cpu_session());
  const GptShape shape = gpt_preset("tiny");
  REQUIRE(shape.vocab == 256);
  constexpr int B = 4, T = 32;
  GptModel model(shape, DType::f32, B, T);
  const double loss = initial_loss(model, shape.vocab);
  INFO("loss " << loss << ", ln 256 = " << std::log(256.0));
  CHECK(std::abs(loss - std::log(256.0)) < 0.1);
}

TEST_CASE("AdamW overfits one fixed batch", "[gpt][train]") {
  // One batch of random tokens, memorised. Measured on CPU workers: ln 64 = 4.16 -> ~1.6 after 25
  // steps, ~0.06 after 75, ~0.015 after 150 (0.014-0.016 over four seeds), so kOverfitThreshold
  // leaves a margin of more than 6x.
  constexpr int kOverfitSteps = 150;
  constexpr float kOverfitLr = 3e-3f;
  constexpr double kOverfitThreshold = 0.1;
  const GptShape shape{16, 64, 64, 2, 4, 32};  // {maxT, V, Vp, L, NH, C}
  constexpr int B = 2, T = 16;

  Session session(cpu_session());
  GptModel model(shape, DType::f32, B, T);
  const OverfitResult run = overfit_one_batch(model, shape.vocab, kOverfitSteps, kOverfitLr);
  INFO("initial loss " << run.initial << ", after " << kOverfitSteps << " steps " << run.final << "; trajectory"
                       << run.trajectory);
  CHECK(run.final < kOverfitThreshold);
}

namespace {

struct RunResult {
  std::vector<double> losses;
  Layers initial, master;
};

// `steps` AdamW steps of `model` on batches of `B` random sequences of `T` tokens drawn from
// `seed`: the master parameters before and after, and each step's loss.
RunResult run_steps(GptModel& model, Engine& engine, int B, int T, int vocab, int steps, std::uint32_t seed) {
  std::mt19937 rng(seed);
  RunResult result;
  result.initial = engine.master_params();
  for (int step = 1; step <= steps; ++step) {
    model.set_batch(random_tokens(rng, B * T, vocab), random_tokens(rng, B * T, vocab));
    engine.submit_step(1e-2f, step);
    result.losses.push_back(model.mean_loss());
  }
  result.master = engine.master_params();
  return result;
}

// A complete run in its own Session: 20 AdamW steps on seeded batches of 3 sequences, each
// row-wise op in `tiles` tasks.
RunResult train_run(const std::string& policy, int tiles = 1) {
  Session session(cpu_session(policy));
  const GptShape shape{16, 37, 40, 2, 2, 10};
  constexpr int B = 3, T = 12, kSteps = 20;
  GptModel model(shape, DType::f32, B, T, tiles);
  EngineOptions opts;
  opts.seed = 99;
  opts.adam.weight_decay = 0.1f;
  Engine engine(model, opts);  // default grad_clip: the clipping path is exercised too
  return run_steps(model, engine, B, T, shape.vocab, kSteps, 1234);
}

}  // namespace

TEST_CASE("training is bitwise deterministic on CPU workers, for every tile count", "[gpt][determinism]") {
  // Every gradient accumulation is ordered by task submission (sequential consistency), so the
  // results must not depend on which worker ran what, nor on the scheduling policy. Tiles of 1,
  // 2 (of 1 and 2 sequences: uneven) and 3 sequences.
  const int tiles = GENERATE(1, 2, 3);
  INFO("tiles " << tiles);
  const RunResult reference_run = train_run("lws", tiles);
  REQUIRE(reference_run.losses.size() == 20);
  // It trained: the parameters moved and the losses are finite.
  CHECK_FALSE(bitwise_equal(reference_run.initial, reference_run.master));
  CHECK(
      std::all_of(reference_run.losses.begin(), reference_run.losses.end(), [](double l) { return std::isfinite(l); }));
  for (const std::string policy : {"lws", "dmdas", "eager"}) {
    const RunResult run = train_run(policy, tiles);
    INFO("policy " << policy << " against the first lws run");
    CHECK(bitwise_equal(run.initial, reference_run.initial));
    CHECK(run.losses == reference_run.losses);  // exact comparison of doubles
    CHECK(bitwise_equal(run.master, reference_run.master));
  }
}

namespace {

// A run with attention cut into `head_groups` tasks per tile: 6 AdamW steps of a 3-block model
// of 5 heads of 7 channels (uneven groups for 2 and 3), batches of 3 sequences.
RunResult head_groups_run(const std::string& policy, DType dtype, int tiles, int head_groups,
                          const ActivationPolicy& activations) {
  Session session(cpu_session(policy));
  const GptShape shape{16, 37, 40, 3, 5, 35};
  constexpr int B = 3, T = 11, kSteps = 6;
  GptModel model(shape, dtype, B, T, tiles, activations, head_groups);
  REQUIRE(model.head_groups() == head_groups);
  EngineOptions opts;
  opts.seed = 7;
  Engine engine(model, opts);
  return run_steps(model, engine, B, T, shape.vocab, kSteps, 4321);
}

}  // namespace

TEST_CASE("attention by head groups: training is bitwise identical for every head-group count", "[gpt][heads]") {
  // Each head's math is the same kernel calls whatever its group, so grouping changes no bit: for
  // both precisions, one tile and two (uneven), every activation mode that re-runs the attention,
  // and every scheduling policy.
  const DType dtype = GENERATE(DType::f32, DType::bf16);
  const int tiles = GENERATE(1, 2);
  const int mode = GENERATE(0, 1);  // 0: keep everything; 1: full recompute with activation offload
  ActivationPolicy activations;
  if (mode == 1) activations = {Recompute::full, 1, ActivationOffload::cpu};
  INFO(dtype_name(dtype) << ", tiles " << tiles << (mode == 1 ? ", --recompute full --offload-activations cpu" : ""));
  const RunResult whole = head_groups_run("lws", dtype, tiles, 1, activations);
  CHECK_FALSE(bitwise_equal(whole.initial, whole.master));
  CHECK(std::all_of(whole.losses.begin(), whole.losses.end(), [](double l) { return std::isfinite(l); }));
  for (int head_groups : {2, 3, 5})
    for (const std::string policy : {"lws", "dmdas", "eager"}) {
      INFO(head_groups << " head groups, policy " << policy);
      const RunResult run = head_groups_run(policy, dtype, tiles, head_groups, activations);
      CHECK(run.losses == whole.losses);  // exact comparison of doubles
      CHECK(bitwise_equal(run.master, whole.master));
    }
}

TEST_CASE("head groups: the count is checked, and auto gives every CPU worker an attention task", "[gpt][heads]") {
  Session session(cpu_session());  // 2 CPU workers, no GPU
  const GptShape shape{16, 37, 40, 1, 5, 35};
  CHECK_THROWS_AS(GptModel(shape, DType::f32, 2, 8, 1, {}, 0), std::invalid_argument);
  CHECK_THROWS_AS(GptModel(shape, DType::f32, 2, 8, 1, {}, 6), std::invalid_argument);
  CHECK(GptModel(shape, DType::f32, 2, 8, 1, {}, 5).head_groups() == 5);
  CHECK(auto_head_groups(5, 1) == 2);  // one tile: two groups for two workers
  CHECK(auto_head_groups(5, 2) == 1);  // two tiles already keep both busy
  CHECK(auto_head_groups(1, 1) == 1);  // at most one group per head
}

TEST_CASE("tile counts agree to float rounding", "[gpt][determinism]") {
  // Not bit for bit: OpenBLAS's sgemm rounds some elements of a row differently depending on how
  // many rows one call has (measured on this machine: a few % of the outputs of a 256-row product
  // cut in two). Everything else (layernorm, attention, GELU, residuals, the loss, the weight
  // gradients over all rows) computes each row the same way whatever the tiles.
  const RunResult one = train_run("lws", 1);
  for (int tiles : {2, 3}) {
    const RunResult run = train_run("lws", tiles);
    INFO("tiles " << tiles);
    REQUIRE(run.losses.size() == one.losses.size());
    for (std::size_t s = 0; s < one.losses.size(); ++s) CHECK(std::abs(run.losses[s] - one.losses[s]) < 1e-4);
    CHECK(bitwise_equal(run.initial, one.initial));
    double worst = 0;
    for (std::size_t l = 0; l < one.master.size(); ++l)
      for (std::size_t i = 0; i < one.master[l].size(); ++i)
        worst = std::max(worst, double(std::abs(run.master[l][i] - one.master[l][i])));
    INFO("largest parameter difference after 20 steps " << worst);
    CHECK(worst < 1e-3);
  }
}

TEST_CASE("parameters change only through AdamW", "[gpt][adamw]") {
  Session session(cpu_session());
  GptModel model(kMicro, DType::f32, kB, kT);
  EngineOptions opts;
  opts.seed = 5;
  opts.adam.weight_decay = 0.0f;
  Engine engine(model, opts);
  std::mt19937 rng(21);
  const auto inputs = random_tokens(rng, kB * kT, kMicro.vocab);
  const auto targets = random_tokens(rng, kB * kT, kMicro.vocab);
  const Layers before = engine.master_params();
  model.set_batch(inputs, targets);
  engine.submit_forward();
  const double loss_before = model.mean_loss();

  // lr = 0, no weight decay: forward, backward, norm and Adam run, nothing moves.
  model.set_batch(inputs, targets);
  engine.submit_step(0.0f, 1);
  CHECK(bitwise_equal(engine.master_params(), before));
  // The model's own parameter copy did not move either: same forward loss, bit for bit.
  model.set_batch(inputs, targets);
  engine.submit_forward();
  CHECK(model.mean_loss() == loss_before);

  // lr > 0: every layer moves, and the loss on this batch goes down.
  model.set_batch(inputs, targets);
  engine.submit_step(1e-2f, 2);
  const Layers after = engine.master_params();
  for (std::size_t l = 0; l < after.size(); ++l) {
    INFO("layer " << l);
    CHECK(std::memcmp(after[l].data(), before[l].data(), after[l].size() * sizeof(float)) != 0);
  }
  model.set_batch(inputs, targets);
  engine.submit_forward();
  CHECK(model.mean_loss() < loss_before);
}

TEST_CASE("layer blocks <-> llm.c order: identity round trip at llm.c offsets", "[gpt][layout]") {
  // Host-side only, but GptModel registers StarPU data: a Session is needed.
  Session session(cpu_session());
  const GptShape shape = kMicro;
  GptModel model(shape, DType::f32, kB, kT);
  const std::size_t C = std::size_t(shape.channels), L = std::size_t(shape.layers);
  const std::size_t Vp = std::size_t(shape.padded_vocab), maxT = std::size_t(shape.max_seq);
  const reference::GptOffsets off(shape);
  REQUIRE(shape.param_count() == off.total);
  std::size_t sum = 0;
  for (int l = 0; l < model.layers(); ++l) sum += model.layer_params(l);
  REQUIRE(sum == shape.param_count());
  REQUIRE(model.layers() == int(L) + 2);

  // Every element of every block labelled by its own position: value = 100000·layer + index.
  Layers labelled;
  for (int l = 0; l < model.layers(); ++l) {
    labelled.emplace_back(model.layer_params(l));
    for (std::size_t i = 0; i < labelled.back().size(); ++i) labelled.back()[i] = float(100000 * l + int(i));
  }
  const std::vector<float> llmc = to_flat(model, labelled);
  auto label = [](int layer, std::size_t index) { return float(100000 * layer + int(index)); };

  SECTION("hand-computed offsets") {
    CHECK(llmc[0] == label(0, 0));                                              // wte
    CHECK(llmc[Vp * C] == label(0, Vp * C));                                    // wpe starts at Vp·C
    CHECK(llmc[Vp * C + maxT * C] == label(1, 0));                              // ln1w of block 0
    CHECK(llmc[Vp * C + maxT * C + C] == label(2, 0));                          // ln1w of block 1
    CHECK(llmc[Vp * C + maxT * C + L * C] == label(1, C));                      // ln1b of block 0
    CHECK(llmc[Vp * C + maxT * C + 2 * L * C] == label(1, 2 * C));              // qkvw of block 0
    CHECK(llmc[Vp * C + maxT * C + 2 * L * C + 3 * C * C] == label(2, 2 * C));  // qkvw of block 1
    CHECK(llmc[shape.param_count() - 2 * C] == label(int(L) + 1, 0));           // lnfw at param_count − 2C
    CHECK(llmc[shape.param_count() - C] == label(int(L) + 1, C));               // lnfb
    CHECK(llmc[shape.param_count() - 2 * C - 1] == label(int(L), 12 * C * C + 13 * C - 1));  // last fcprojb
  }

  SECTION("every block tensor at its llm.c offset") {
    // (llm.c tensor start, per-layer size) in block order.
    const std::pair<std::size_t, std::size_t> tensors[] = {{off.ln1w, C},
                                                           {off.ln1b, C},
                                                           {off.qkvw, 3 * C * C},
                                                           {off.qkvb, 3 * C},
                                                           {off.attprojw, C * C},
                                                           {off.attprojb, C},
                                                           {off.ln2w, C},
                                                           {off.ln2b, C},
                                                           {off.fcw, 4 * C * C},
                                                           {off.fcb, 4 * C},
                                                           {off.fcprojw, 4 * C * C},
                                                           {off.fcprojb, C}};
    for (std::size_t l = 0; l < L; ++l) {
      std::size_t in_block = 0;
      for (const auto& [start, size] : tensors) {
        for (std::size_t i = 0; i < size; ++i) REQUIRE(llmc[start + l * size + i] == label(int(l) + 1, in_block + i));
        in_block += size;
      }
      REQUIRE(in_block == model.layer_params(int(l) + 1));
    }
    for (std::size_t i = 0; i < off.ln1w; ++i) REQUIRE(llmc[i] == label(0, i));
    for (std::size_t i = 0; i < 2 * C; ++i) REQUIRE(llmc[off.lnfw + i] == label(int(L) + 1, i));
  }

  SECTION("round trips are the identity") {
    CHECK(bitwise_equal(to_layers(model, llmc), labelled));
    const std::vector<float> random = random_llmc_params(shape, 3);
    const std::vector<float> back = to_flat(model, to_layers(model, random));
    CHECK(std::memcmp(back.data(), random.data(), random.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("bf16 with the fp32 gradient-accumulation buffer: the sum of micro-batch gradients rounded once",
          "[gpt][grad_accum]") {
  Session session(cpu_session());
  constexpr int kMicroBatches = 4;
  std::mt19937 rng(23);
  std::vector<std::vector<int>> inputs, targets;
  for (int m = 0; m < kMicroBatches; ++m) {
    inputs.push_back(random_tokens(rng, kB * kT, kMicro.vocab));
    targets.push_back(random_tokens(rng, kB * kT, kMicro.vocab));
  }
  const EngineOptions opts = reference_options();

  // Reference: each micro-batch's bf16 gradient on its own, summed in double, rounded to bf16.
  std::vector<std::vector<double>> sum;
  {
    GptModel model(kMicro, DType::bf16, kB, kT);
    Engine engine(model, opts);
    for (int m = 0; m < kMicroBatches; ++m) {
      model.set_batch(inputs[std::size_t(m)], targets[std::size_t(m)]);
      engine.submit_gradients();
      const auto grads = engine.gradients();
      if (sum.empty())
        for (const auto& g : grads) sum.emplace_back(g.size(), 0.0);
      for (std::size_t l = 0; l < grads.size(); ++l)
        for (std::size_t i = 0; i < grads[l].size(); ++i) sum[l][i] += grads[l][i];
    }
  }
  // One optimizer step over the same micro-batches (lr 0: the parameters stay, the gradient of
  // the step stays in the engine's gradient buffers).
  auto step_gradients = [&](bool fp32_buffer) {
    EngineOptions o = opts;
    o.fp32_grad_accum = fp32_buffer;
    GptModel model(kMicro, DType::bf16, kB, kT);
    Engine engine(model, o);
    engine.submit_step(0.0f, 1, kMicroBatches,
                       [&](int m) { model.set_batch(inputs[std::size_t(m)], targets[std::size_t(m)]); });
    return engine.gradients();
  };
  const auto with_buffer = step_gradients(true);
  const auto without = step_gradients(false);
  std::size_t total = 0, mismatched_with = 0, mismatched_without = 0, nonzero = 0;
  for (std::size_t l = 0; l < sum.size(); ++l)
    for (std::size_t i = 0; i < sum[l].size(); ++i) {
      // Four bf16 values (8-bit significands) add exactly in fp32 unless their exponents are far
      // apart; the rounded sum is then the correctly rounded one.
      const float expected = to_float(from_float<bf16>(float(sum[l][i])));
      ++total;
      nonzero += expected != 0.0f;
      mismatched_with += with_buffer[l][i] != expected;
      mismatched_without += without[l][i] != expected;
    }
  INFO(total << " gradients, " << nonzero << " nonzero; mismatches with the fp32 buffer " << mismatched_with
             << ", with bf16 accumulation " << mismatched_without);
  CHECK(nonzero > total / 2);
  CHECK(mismatched_with == 0);
  // Without the buffer every addition rounds to bf16: some sums come out differently.
  CHECK(mismatched_without > 0);
}

TEST_CASE("with tiles, the gradient is cut into pieces of whole output channels", "[gpt][tiles]") {
  Session session(cpu_session());
  const GptShape shape{16, 37, 40, 2, 2, 10};  // C = 10, Vp = 40
  GptModel one(shape, DType::f32, 3, 12, 1);
  GptModel three(shape, DType::f32, 3, 12, 3);
  const std::size_t C = 10;
  for (int layer = 0; layer < one.layers(); ++layer) CHECK(one.gradient_pieces(layer).empty());
  // The embedding: wte's 40 rows in 3 pieces (13, 13, 14 rows), then wpe.
  CHECK(three.gradient_pieces(0) == std::vector<std::size_t>{13 * C, 13 * C, 14 * C, 16 * C});
  // A block: ln1 (w+b), qkvw (30 rows: 10 each), qkvb, attprojw (10 rows: 3, 3, 4), attprojb, ln2 (w+b),
  // fcw (40 rows: 13, 13, 14), fcb, fcprojw (10 rows of 4C: 3, 3, 4), fcprojb.
  CHECK(three.gradient_pieces(1) == std::vector<std::size_t>{2 * C, 10 * C, 10 * C, 10 * C, 3 * C, 3 * C, 3 * C, 4 * C,
                                                             C, 2 * C, 13 * C, 13 * C, 14 * C, 4 * C, 12 * C, 12 * C,
                                                             16 * C, C});
  for (int layer = 0; layer <= shape.layers; ++layer) {
    const std::vector<std::size_t> pieces = three.gradient_pieces(layer);
    std::size_t sum = 0;
    for (std::size_t n : pieces) sum += n;
    CHECK(sum == three.layer_params(layer));
  }
  CHECK(three.gradient_pieces(shape.layers + 1).empty());  // the final layernorm: one piece
  // The engine gives such a gradient a home in main memory (it is split there); whole, it stays
  // transient.
  Engine engine_three(three, EngineOptions{});
  Engine engine_one(one, EngineOptions{});
  CHECK(engine_three.layer_plan(1).buffer(LayerBuffer::grad).home == BufferHome::device);
  CHECK(engine_one.layer_plan(1).buffer(LayerBuffer::grad).home == BufferHome::transient);
  CHECK(engine_three.layer_plan(shape.layers + 1).buffer(LayerBuffer::grad).home == BufferHome::transient);
}

// ---- masked targets (tasks/loss_mask.hpp) ------------------------------------------------------------

namespace {

// Sequence 0's last two targets masked (padding after a completion) and sequence 1's targets at
// positions 1 and 2 (a prompt): `targets`; `unmasked` holds the tokens at those positions.
struct MaskedBatch {
  std::vector<int> inputs, targets, unmasked;
};
const std::vector<int> kMaskedPositions = {kT - 2, kT - 1, kT + 1, kT + 2};

MaskedBatch masked_batch(std::uint32_t seed) {
  std::mt19937 rng(seed);
  MaskedBatch m;
  m.inputs = random_tokens(rng, kB * kT, kMicro.vocab);
  m.unmasked = random_tokens(rng, kB * kT, kMicro.vocab);
  m.targets = m.unmasked;
  for (int i : kMaskedPositions) m.targets[std::size_t(i)] = kMaskedTarget;
  return m;
}

struct LossAndGradient {
  double loss;
  std::vector<float> grad;  // llm.c's order
};

LossAndGradient loss_and_gradient(GptModel& model, Engine& engine, const std::vector<float>& params,
                                  const std::vector<int>& inputs, const std::vector<int>& targets) {
  engine.set_master_params(to_layers(model, params));
  model.set_batch(inputs, targets);
  engine.submit_gradients();
  return {model.mean_loss(), to_flat(model, engine.gradients())};
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("masked positions: their tokens change neither the loss nor any gradient bit", "[gpt][mask]") {
  // A masked position has no label; what else lives only there is the input of a sequence's last
  // positions (padding after a completion): causal attention shows it to those positions alone.
  const int tiles = GENERATE(1, 2);
  INFO("tiles " << tiles);
  Session session(cpu_session());
  GptModel model(kMicro, DType::f32, kB, kT, tiles);
  Engine engine(model, reference_options());
  const std::vector<float> params = random_llmc_params(kMicro, 61);
  const MaskedBatch m = masked_batch(31);
  std::vector<int> other = m.inputs;
  for (int i : {kT - 2, kT - 1}) other[std::size_t(i)] = (other[std::size_t(i)] + 4) % kMicro.vocab;

  const LossAndGradient a = loss_and_gradient(model, engine, params, m.inputs, m.targets);
  const LossAndGradient b = loss_and_gradient(model, engine, params, other, m.targets);
  INFO("losses " << std::setprecision(17) << a.loss << " and " << b.loss);
  CHECK(same_bits(a.loss, b.loss));
  CHECK(same_bits(a.grad, b.grad));
  // Not vacuous: with those positions' targets counted, the same change moves the loss and the gradient.
  const LossAndGradient c = loss_and_gradient(model, engine, params, m.inputs, m.unmasked);
  const LossAndGradient d = loss_and_gradient(model, engine, params, other, m.unmasked);
  CHECK(c.loss != d.loss);
  CHECK_FALSE(same_bits(c.grad, d.grad));
}

TEST_CASE("masked mean loss: the mean of the counted positions' losses", "[gpt][mask]") {
  const int tiles = GENERATE(1, 2);
  INFO("tiles " << tiles);
  Session session(cpu_session());
  GptModel model(kMicro, DType::f32, kB, kT, tiles);
  Engine engine(model, reference_options());
  const std::vector<float> params = random_llmc_params(kMicro, 62);
  engine.set_master_params(to_layers(model, params));
  const MaskedBatch m = masked_batch(32);

  // Each position's loss in an unmasked run, −log p[target] from its probabilities, in double.
  model.set_batch(m.inputs, m.unmasked);
  engine.submit_forward();
  const double unmasked = model.mean_loss();
  double counted_sum = 0, all_sum = 0;
  std::size_t counted = 0;
  for (int b = 0; b < kB; ++b)
    for (int t = 0; t < kT; ++t) {
      const std::size_t i = std::size_t(b * kT + t);
      const double loss = -std::log(double(model.probabilities(b, t)[std::size_t(m.unmasked[i])]));
      all_sum += loss;
      if (m.targets[i] == kMaskedTarget) continue;
      counted_sum += loss;
      ++counted;
    }
  REQUIRE(counted == std::size_t(kB * kT) - kMaskedPositions.size());
  const double expected = counted_sum / double(counted);

  model.set_batch(m.inputs, m.targets);
  engine.submit_forward();
  const double loss = model.mean_loss();
  INFO("masked " << std::setprecision(10) << loss << ", expected " << expected << ", unmasked " << unmasked);
  CHECK(std::abs(loss - expected) <= 1e-6 * std::abs(expected));
  // The independent reference's masked mean, as the unmasked loss is checked against it.
  const double reference = reference::gpt2_loss(params, kMicro, m.inputs, m.targets, kB, kT);
  CHECK(std::abs(loss - reference) <= kLossRtol * std::abs(reference));
  // Not vacuous: the mean over every position is another number.
  CHECK(std::abs(unmasked - all_sum / double(kB * kT)) <= 1e-6 * unmasked);
  CHECK(std::abs(unmasked - expected) > 1e-3 * expected);
  // The forward of the gradients computes the same loss.
  engine.submit_gradients();
  CHECK(same_bits(model.mean_loss(), loss));
}

TEST_CASE("under a mask, every parameter's gradient matches finite differences of the reference", "[gpt][mask]") {
  const int tiles = GENERATE(1, 2);
  INFO("tiles " << tiles);
  Session session(cpu_session());
  GptModel model(kMicro, DType::f32, kB, kT, tiles);
  Engine engine(model, reference_options());
  const std::vector<float> params = random_llmc_params(kMicro, 63);
  const MaskedBatch m = masked_batch(33);
  const LossAndGradient g = loss_and_gradient(model, engine, params, m.inputs, m.targets);
  check_finite_differences(
      g.grad, params,
      [&](const std::vector<double>& p) { return reference::gpt2_loss(p, kMicro, m.inputs, m.targets, kB, kT); },
      kReferenceFd.rtol, kReferenceFd.atol, kReferenceFd.step, [](std::size_t k) { return llmc_name(kMicro, k); });
}

TEST_CASE("masked micro-batches: the step's loss and gradient are the global batch's masked mean's",
          "[gpt][mask][grad_accum]") {
  // A global batch of 2 micro-batches of kB sequences, set as a Trainable sets them
  // (set_batch_rows): micro-batch 0 with 8 of its 10 targets masked, micro-batch 1 with 1. The
  // engine sums the micro-batches' gradients and AdamW divides by 2; the trainer averages their
  // losses. Both must be those of one micro-batch holding the whole global batch.
  Session session(cpu_session());
  constexpr int kMicroBatches = 2;
  const std::vector<float> params = random_llmc_params(kMicro, 64);
  std::mt19937 rng(34);
  Batch global{random_tokens(rng, kMicroBatches * kB * kT, kMicro.vocab),
               random_tokens(rng, kMicroBatches * kB * kT, kMicro.vocab)};
  for (int i = 0; i < kB * kT; ++i)
    if (i != 3 && i != 7) global.targets[std::size_t(i)] = kMaskedTarget;
  global.targets[std::size_t(kB * kT + 4)] = kMaskedTarget;
  const EngineOptions opts = reference_options();

  GptModel whole_model(kMicro, DType::f32, kMicroBatches * kB, kT);
  Engine whole_engine(whole_model, opts);
  const LossAndGradient whole = loss_and_gradient(whole_model, whole_engine, params, global.inputs, global.targets);
  const double reference = reference::gpt2_loss(params, kMicro, global.inputs, global.targets, kMicroBatches * kB, kT);
  CHECK(std::abs(whole.loss - reference) <= kLossRtol * std::abs(reference));

  GptModel model(kMicro, DType::f32, kB, kT);
  Engine engine(model, opts);
  engine.set_master_params(to_layers(model, params));
  double loss_sum = 0;
  std::vector<TargetCount> counts;
  engine.submit_step(0.0f, 1, kMicroBatches, [&](int micro) {  // lr 0: the step's gradient stays in the buffers
    if (micro > 0) loss_sum += model.mean_loss();
    counts.push_back(set_batch_rows(model, global, BatchRows{micro * kB, kB, kMicroBatches * kB}));
  });
  const double loss = (loss_sum + model.mean_loss()) / kMicroBatches;
  std::vector<float> grad = to_flat(model, engine.gradients());
  for (float& x : grad) x /= float(kMicroBatches);
  for (const TargetCount& c : counts) {
    CHECK(c.total == std::size_t(kMicroBatches * kB * kT));
    CHECK(c.counted == std::size_t(kMicroBatches * kB * kT - 8 - 1));
  }
  INFO("micro-batches " << std::setprecision(10) << loss << ", whole " << whole.loss << ", reference " << reference);
  CHECK(std::abs(loss - whole.loss) <= 1e-6 * std::abs(whole.loss));
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    worst = std::max(worst, std::abs(double(grad[i]) - double(whole.grad[i])));
    largest = std::max(largest, std::abs(double(whole.grad[i])));
  }
  INFO("gradient: largest " << largest << ", worst difference " << worst);
  CHECK(worst <= 1e-5 * largest);

  // Not vacuous: each micro-batch's own masked mean, averaged, is another loss and gradient.
  GptModel alone(kMicro, DType::f32, kB, kT);
  Engine alone_engine(alone, opts);
  double naive_loss = 0, naive_worst = 0;
  std::vector<float> naive(grad.size(), 0.0f);
  for (int micro = 0; micro < kMicroBatches; ++micro) {
    const auto part = [&](const std::vector<int>& v) {
      return std::vector<int>(v.begin() + micro * kB * kT, v.begin() + (micro + 1) * kB * kT);
    };
    const LossAndGradient g = loss_and_gradient(alone, alone_engine, params, part(global.inputs), part(global.targets));
    naive_loss += g.loss / kMicroBatches;
    for (std::size_t i = 0; i < naive.size(); ++i) naive[i] += g.grad[i] / float(kMicroBatches);
  }
  for (std::size_t i = 0; i < naive.size(); ++i)
    naive_worst = std::max(naive_worst, std::abs(double(naive[i]) - double(whole.grad[i])));
  INFO("per micro-batch means: loss " << naive_loss << ", worst gradient difference " << naive_worst);
  CHECK(std::abs(naive_loss - whole.loss) > 1e-3 * std::abs(whole.loss));
  CHECK(naive_worst > 1e-2 * largest);
}

TEST_CASE("set_batch takes kMaskedTarget as a target only", "[gpt][mask]") {
  Session session(cpu_session());
  GptModel model(kMicro, DType::f32, kB, kT);
  std::mt19937 rng(35);
  const std::vector<int> inputs = random_tokens(rng, kB * kT, kMicro.vocab);
  std::vector<int> targets = random_tokens(rng, kB * kT, kMicro.vocab);
  targets[2] = kMaskedTarget;
  model.set_batch(inputs, targets);
  std::vector<int> bad_inputs = inputs;
  bad_inputs[2] = kMaskedTarget;
  CHECK_THROWS_AS(model.set_batch(bad_inputs, targets), std::invalid_argument);
  std::vector<int> bad_targets = targets;
  bad_targets[3] = -2;
  CHECK_THROWS_AS(model.set_batch(inputs, bad_targets), std::invalid_argument);
  // A global batch's count that cannot hold this micro-batch's mask.
  CHECK_THROWS_AS(model.set_batch(inputs, targets, TargetCount{std::size_t(kB * kT), std::size_t(kB * kT)}),
                  std::invalid_argument);
}
