// models/gpt_layout: the one table of GPT-2's parameter tensors and what derives from it (layer
// blocks, llm.c's order, the .state layout, the planner's footprint), checked against
// independent arithmetic (reference_gpt2.hpp's offsets, the planner's formulas). Host only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/gpt_layout.hpp"
#include "models/gpt_files.hpp"
#include "offload/footprint.hpp"
#include "reference_gpt2.hpp"

using namespace starzero;

namespace {

// Non-square on purpose: C = 12 with NH = 3, V = 11 padded to 16, maxT = 8, L = 2.
const GptShape kMicro{8, 11, 16, 2, 3, 12};

const std::vector<std::string> kLlmcNames = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                             "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                             "fcprojw",  "fcprojb",  "lnfw", "lnfb"};

std::size_t product(const std::vector<std::size_t>& dims) {
  std::size_t n = 1;
  for (std::size_t d : dims) n *= d;
  return n;
}

std::vector<std::size_t> reference_starts(const GptShape& shape) {
  const reference::GptOffsets o(shape);
  return {o.wte,  o.wpe,  o.ln1w, o.ln1b, o.qkvw,    o.qkvb,    o.attprojw, o.attprojb,
          o.ln2w, o.ln2b, o.fcw,  o.fcb,  o.fcprojw, o.fcprojb, o.lnfw,     o.lnfb};
}

// Copies llm.c -> blocks or blocks -> llm.c along the layout's runs, as GptModel does.
std::vector<std::vector<float>> to_blocks(const GptLayout& layout, const std::vector<float>& llmc) {
  std::vector<std::vector<float>> blocks;
  for (int l = 0; l < layout.layers(); ++l) {
    blocks.emplace_back(layout.layer_params(l));
    for (const LlmcRun& run : layout.layer_runs(l))
      std::copy_n(llmc.begin() + std::ptrdiff_t(run.llmc_offset), run.count,
                  blocks.back().begin() + std::ptrdiff_t(run.layer_offset));
  }
  return blocks;
}

std::vector<float> to_llmc(const GptLayout& layout, const std::vector<std::vector<float>>& blocks) {
  std::vector<float> llmc(layout.param_count());
  for (int l = 0; l < layout.layers(); ++l)
    for (const LlmcRun& run : layout.layer_runs(l))
      std::copy_n(blocks[std::size_t(l)].begin() + std::ptrdiff_t(run.layer_offset), run.count,
                  llmc.begin() + std::ptrdiff_t(run.llmc_offset));
  return llmc;
}

}  // namespace

TEST_CASE("GPT layout table: names, shapes and llm.c offsets", "[gpt_layout]") {
  for (const GptShape& shape : {kMicro, gpt_preset("tiny"), GptShape::gpt2_124m()}) {
    INFO(shape.to_string());
    const GptLayout layout(shape);
    const std::size_t L = std::size_t(shape.layers), C = std::size_t(shape.channels);
    REQUIRE(layout.tensors().size() == kGptParamCount);
    const auto starts = reference_starts(shape);
    std::size_t llmc_end = 0;
    for (std::size_t i = 0; i < kGptParamCount; ++i) {
      const GptTensor& t = layout.tensors()[i];
      CHECK(std::size_t(t.id) == i);
      CHECK(&layout[t.id] == &t);
      CHECK(t.name == kLlmcNames[i]);
      CHECK(t.llmc_offset == llmc_end);  // contiguous, non-overlapping, in llm.c's order
      CHECK(t.llmc_offset == starts[i]);
      CHECK(t.count == product(t.dims));
      CHECK(t.per_layer == (t.layer_kind == LlmcLayerKind::block));
      CHECK(t.per_layer == (t.dims.front() == L));
      CHECK(t.layer_count * (t.per_layer ? L : 1) == t.count);
      llmc_end += t.count;
    }
    CHECK(llmc_end == shape.param_count());
    CHECK(layout.param_count() == shape.param_count());
    CHECK(layout.param_count() == reference::GptOffsets(shape).total);

    using enum GptParam;
    CHECK(layout[wte].dims == std::vector<std::size_t>{std::size_t(shape.padded_vocab), C});
    CHECK(layout[wpe].dims == std::vector<std::size_t>{std::size_t(shape.max_seq), C});
    CHECK(layout[qkvw].dims == std::vector<std::size_t>{L, 3 * C, C});
    CHECK(layout[fcb].dims == std::vector<std::size_t>{L, 4 * C});
    CHECK(layout[fcprojw].dims == std::vector<std::size_t>{L, C, 4 * C});
    CHECK(layout[lnfb].dims == std::vector<std::size_t>{C});
  }
}

TEST_CASE("GPT layout table: layer blocks", "[gpt_layout]") {
  for (const GptShape& shape : {kMicro, GptShape::gpt2_124m()}) {
    INFO(shape.to_string());
    const GptLayout layout(shape);
    const std::size_t C = std::size_t(shape.channels);
    REQUIRE(layout.layers() == shape.layers + 2);
    std::size_t total = 0;
    for (int l = 0; l < layout.layers(); ++l) {
      INFO("layer " << l);
      // The layer's tensors tile its block: contiguous, non-overlapping, from 0 to layer_params.
      std::size_t layer_end = 0;
      for (const GptTensor& t : layout.tensors()) {
        if (t.layer_kind != layout.layer_kind(l)) continue;
        CHECK(t.layer_offset == layer_end);
        layer_end += t.layer_count;
      }
      CHECK(layer_end == layout.layer_params(l));
      std::size_t run_sum = 0;
      for (const LlmcRun& run : layout.layer_runs(l)) run_sum += run.count;
      CHECK(run_sum == layout.layer_params(l));
      total += layout.layer_params(l);
    }
    CHECK(total == shape.param_count());
    CHECK(layout.layer_kind(0) == LlmcLayerKind::embedding);
    CHECK(layout.layer_kind(1) == LlmcLayerKind::block);
    CHECK(layout.layer_kind(shape.layers) == LlmcLayerKind::block);
    CHECK(layout.layer_kind(shape.layers + 1) == LlmcLayerKind::head);
    CHECK(layout.layer_params(1) == 12 * C * C + 13 * C);
    CHECK(layout.layer_params(shape.layers + 1) == 2 * C);
    CHECK_THROWS_AS(layout.layer_params(-1), std::out_of_range);
    CHECK_THROWS_AS(layout.layer_params(shape.layers + 2), std::out_of_range);
  }
  CHECK(GptLayout(GptShape::gpt2_124m()).layer_params(1) == 7'087'872u);
  CHECK(GptLayout(GptShape::gpt2_124m()).layer_params(0) == 39'419'904u);
  CHECK_THROWS_AS(GptLayout(GptShape{8, 11, 16, 2, 5, 12}), std::invalid_argument);  // 12 % 5 != 0
}

TEST_CASE("GPT layout: the layer runs cover llm.c's vector exactly once, round trip", "[gpt_layout]") {
  const GptLayout layout(kMicro);
  std::vector<int> covered(layout.param_count(), 0);
  for (int l = 0; l < layout.layers(); ++l)
    for (const LlmcRun& run : layout.layer_runs(l))
      for (std::size_t i = 0; i < run.count; ++i) ++covered[run.llmc_offset + i];
  CHECK(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }));

  // Block 1 (layers 1..L are blocks 0..L-1) holds slice 1 of qkvw, at llm.c's qkvw + 1·3C².
  const std::size_t C = std::size_t(kMicro.channels);
  const reference::GptOffsets off(kMicro);
  const auto runs = layout.layer_runs(2);
  const LlmcRun& qkvw_run = runs[std::size_t(GptParam::qkvw) - std::size_t(GptParam::ln1w)];
  CHECK(qkvw_run.llmc_offset == off.qkvw + 3 * C * C);
  CHECK(qkvw_run.layer_offset == 2 * C);
  CHECK(qkvw_run.count == 3 * C * C);

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> llmc(layout.param_count());
  for (float& x : llmc) x = normal(rng);
  const auto blocks = to_blocks(layout, llmc);
  const std::vector<float> back = to_llmc(layout, blocks);
  CHECK(std::memcmp(back.data(), llmc.data(), llmc.size() * sizeof(float)) == 0);
  // The last element of the last block is fcprojb of the last layer, just before lnfw.
  CHECK(blocks[std::size_t(kMicro.layers)].back() == llmc[off.lnfw - 1]);
  CHECK(blocks[std::size_t(kMicro.layers) + 1].front() == llmc[off.lnfw]);
}

TEST_CASE("GPT layout: llm.c tensor specs come from the table", "[gpt_layout]") {
  const GptLayout layout(kMicro);
  const auto specs = llmc_tensor_specs(kMicro);
  REQUIRE(specs.size() == kGptParamCount);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CHECK(specs[i].name == layout.tensors()[i].name);
    CHECK(specs[i].count == layout.tensors()[i].count);
    CHECK(specs[i].offset == layout.tensors()[i].llmc_offset);
    CHECK(specs[i].per_layer == layout.tensors()[i].per_layer);
    CHECK(specs[i].layer_count(kMicro.layers) == layout.tensors()[i].layer_count);
  }
}

TEST_CASE("GPT presets: one table", "[gpt_layout]") {
  CHECK(gpt_preset_names() == std::vector<std::string>{"tiny", "gpt2-124M", "gpt2-350M", "gpt2-774M", "gpt2-1558M"});
  CHECK(gpt_presets().size() == gpt_preset_names().size());
  CHECK(gpt_preset("gpt2-124M") == GptShape::gpt2_124m());
  CHECK(gpt_preset("gpt2-124M").param_count() == 124'475'904u);
  CHECK(gpt_preset("tiny") == GptShape{64, 256, 256, 4, 4, 128});
  CHECK(gpt_preset("gpt2-1558M").channels == 1600);
  for (const GptPreset& preset : gpt_presets()) CHECK_NOTHROW(preset.shape.validate());
  try {
    gpt_preset("gpt3");
    FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK(message.find("gpt3") != std::string::npos);
    CHECK(message.find("tiny, gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M") != std::string::npos);
  }
}

TEST_CASE("GPT state layout: llm.c's header fields and the layer blocks", "[gpt_layout]") {
  const StateLayout state = GptLayout(kMicro).state_layout();
  CHECK(state.shape_fields == StateShapeFields{8, 11, 2, 3, 12, 16});  // maxT, V, L, NH, C, Vp
  CHECK(GptShape::from_fields(state.shape_fields) == kMicro);
  CHECK(kMicro.fields() == state.shape_fields);
  const GptLayout layout(kMicro);
  REQUIRE(state.layer_params.size() == std::size_t(layout.layers()));
  for (int l = 0; l < layout.layers(); ++l) CHECK(state.layer_params[std::size_t(l)] == layout.layer_params(l));
  CHECK(state.param_count() == kMicro.param_count());
  CHECK(state.describe(state.shape_fields) == kMicro.to_string());
  CHECK(gpt_state_layout_from_fields(state.shape_fields).layer_params == state.layer_params);
  CHECK_THROWS_AS(gpt_state_layout_from_fields({8, 11, 2, 3, 0, 16}), std::invalid_argument);
  CHECK(StateLayout{{1, 2, 3, 4, 5, 6}, {}}.describe({1, 2, 3, 4, 5, 6}) == "[1 2 3 4 5 6]");
}

TEST_CASE("GPT footprint: the planner's numbers for GPT-2 124M", "[gpt_layout]") {
  const std::int64_t L = 12, B = 4, T = 1024, C = 768, NH = 12, Vp = 50304;
  const ModelFootprint f = gpt_footprint(GptShape::gpt2_124m(), int(B));
  CHECK(f.params == 124'475'904);
  REQUIRE(f.layer_kinds.size() == 3);
  CHECK(f.layer_kinds[0].name == "embedding");
  CHECK(f.layer_kinds[0].count == 39'419'904);
  CHECK(f.layer_kinds[1].name == "block");
  CHECK(f.layer_kinds[1].count == 7'087'872);
  CHECK(f.layer_kinds[2].name == "final layernorm");
  CHECK(f.layer_kinds[2].count == 2 * C);
  CHECK(f.largest_layer().name == "embedding");

  REQUIRE(f.activation_tensors.size() == 22);
  const std::vector<std::string> names = {"encoded",   "ln1",      "ln1_mean", "ln1_rstd", "qkv",      "atty",
                                          "att_lse",   "attproj",  "residual2", "ln2",     "ln2_mean", "ln2_rstd",
                                          "fch",       "fch_gelu", "fcproj",   "residual3", "lnf",     "lnf_mean",
                                          "lnf_rstd",  "logits",   "probs",    "losses"};
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(f.activation_tensors[i].name == names[i]);
  CHECK(f.activation_tensors[0].count == B * T * C);           // encoded
  CHECK(f.activation_tensors[4].count == L * B * T * 3 * C);   // qkv
  CHECK(f.activation_tensors[6].count == L * B * NH * T);      // att_lse
  CHECK(f.activation_tensors[12].count == L * B * T * 4 * C);  // fch
  CHECK(f.activation_tensors[20].count == B * T * Vp);         // probs
  CHECK(f.activation_tensors[21].count == B * T);              // losses
  // The planner's total (tests/sim/test_planner.cpp, "GPT activations").
  const std::int64_t expected = B * T * C                  // encoded
                                + L * B * T * C            // ln1
                                + 2 * L * B * T            // ln1_mean, ln1_rstd
                                + L * B * T * 3 * C        // qkv
                                + L * B * T * C            // atty
                                + L * B * NH * T           // att_lse
                                + 3 * L * B * T * C        // attproj, residual2, ln2
                                + 2 * L * B * T            // ln2_mean, ln2_rstd
                                + 2 * L * B * T * 4 * C    // fch, fch_gelu
                                + 2 * L * B * T * C        // fcproj, residual3
                                + B * T * C + 2 * B * T    // lnf, lnf_mean, lnf_rstd
                                + 2 * B * T * Vp + B * T;  // logits, probs, losses
  CHECK(f.activation_elements() == expected);

  // A wide model with a small vocabulary: a block is the largest layer.
  const ModelFootprint wide = gpt_footprint(GptShape{1024, 1000, 1024, 12, 64, 8192}, 4);
  CHECK(wide.largest_layer().name == "block");
  CHECK(wide.largest_layer().count == 12LL * 8192 * 8192 + 13LL * 8192);
}

TEST_CASE("GPT footprint: invalid input and overflow give one-line errors", "[gpt_layout]") {
  auto one_line_error = [](const GptShape& shape, int batch) {
    try {
      gpt_footprint(shape, batch);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find('\n') == std::string::npos && std::string(e.what()).size() > 0;
    }
    return false;
  };
  const GptShape gpt2 = GptShape::gpt2_124m();
  CHECK(one_line_error(gpt2, 0));
  CHECK(one_line_error(GptShape{1024, 50257, 50304, 12, 5, 768}, 4));  // NH does not divide C
  CHECK(one_line_error(GptShape{1024, 50257, 50304, 0, 12, 768}, 4));
  // Attention scores L·B·NH·T² overflow 64 bits.
  CHECK(one_line_error(GptShape{1 << 30, 50257, 50304, 1 << 20, 1, 768}, 1 << 20));
  CHECK(one_line_error(GptShape{1024, 50257, 50304, 12, 1, 1 << 30}, 1 << 30));
}
