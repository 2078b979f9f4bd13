// Writes the seed corpus of the fuzz harnesses (fuzz/README.md) with the real writers: small valid
// files of each format and corner cases made from them (truncated, trailing bytes, header only,
// wrong magic, version or shape). Usage: make_corpus OUT_DIR (then OUT_DIR/<harness>/<seed>).
// scripts/fuzz.sh --make-corpus builds it and writes fuzz/corpus/.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/fuzz_llmc.hpp"
#include "models/layer_checkpoint.hpp"
#include "models/llama_files.hpp"
#include "models/mask_shard.hpp"
#include "models/gpt_files.hpp"
#include "models/safetensors.hpp"
#include "tasks/nn_llama_kernels.hpp"
#include "train/sharded_state.hpp"
#include "train/state_files.hpp"

using namespace starzero;
namespace fs = std::filesystem;
using Bytes = std::vector<char>;

namespace {

fs::path out_root;

Bytes read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void save(const std::string& harness, const std::string& name, const Bytes& bytes) {
  const fs::path dir = out_root / harness;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
}

template <class T>
Bytes patched(Bytes bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
  return bytes;
}

Bytes first(const Bytes& bytes, std::size_t n) { return Bytes(bytes.begin(), bytes.begin() + std::ptrdiff_t(n)); }
Bytes plus(Bytes bytes, const std::string& more) {
  bytes.insert(bytes.end(), more.begin(), more.end());
  return bytes;
}

std::vector<float> values(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * float(int(i % 7) - 3) / 4.0f;
  if (n > 2) v[1] = -0.0f;
  return v;
}

GptShape shape(int maxT, int V, int Vp, int L, int NH, int C) { return fuzz::gpt_shape(maxT, V, Vp, L, NH, C); }

// The seeds of every llm.c checkpoint reader (GPT-2's and Llama 3's both write version 3 as fp32
// and 5 as bf16), written through `write(path, shape, values, version)` to `file`: `tiny` and
// `other` in both versions, tiny's fp32 file truncated, its bf16 file with trailing bytes, the
// header alone or cut, an empty file. Returns tiny's version 3 and 5 files, for seeds of its own.
template <class Shape, class Write>
std::pair<Bytes, Bytes> checkpoint_seeds(const std::string& h, const fs::path& file, const Shape& tiny,
                                         const Shape& other, const Write& write) {
  const auto written = [&](const Shape& shape, float scale, int version) {
    write(file, shape, values(shape.param_count(), scale), version);
    return read_bytes(file);
  };
  const Bytes v3 = written(tiny, 1.0f, 3), v5 = written(tiny, 2.0f, 5);
  save(h, "v3_tiny", v3);
  save(h, "v5_tiny", v5);
  save(h, "v3_other_shape", written(other, 0.5f, 3));
  save(h, "v5_other_shape", written(other, 0.5f, 5));
  save(h, "v3_truncated", first(v3, v3.size() - 6));
  save(h, "v5_trailing", plus(v5, "xy"));
  save(h, "header_only", first(v3, 1024));
  save(h, "header_truncated", first(v3, 100));
  save(h, "empty", {});
  return {v3, v5};
}

void llmc_checkpoints(const fs::path& tmp) {
  const std::string h = "fuzz_llmc_checkpoint";
  const GptShape tiny = fuzz::tiny_gpt_shape();
  const GptShape other = shape(2, 3, 4, 2, 1, 2);
  const auto [v3, v5] = checkpoint_seeds(h, tmp / "ckpt.bin", tiny, other, [](const auto&... a) {
    GptCheckpointFile::write(a...);
  });
  save(h, "wrong_magic_token_shard", patched(v3, 0, kLlmcTokenMagic));
  save(h, "version_4", patched(v3, 4, std::int32_t(4)));
  save(h, "v3_as_v5", patched(v3, 4, kLlmcCheckpointBf16));
  save(h, "heads_not_dividing", patched(first(v3, 1024), 20, std::int32_t(3)));
  save(h, "negative_layers", patched(first(v3, 1024), 16, std::int32_t(-1)));
  save(h, "vp_below_v", patched(first(v3, 1024), 28, std::int32_t(2)));
  Bytes big = first(v3, 1024);  // gpt2-124M's header without its 500 MB of values
  const StateShapeFields fields = GptShape::gpt2_124m().fields();
  std::memcpy(big.data() + 8, fields.data(), sizeof fields);
  save(h, "gpt2_124m_header_only", big);
  Bytes huge = first(v3, 1024);  // the largest int32 dimensions
  for (int i = 2; i < 8; ++i) huge = patched(huge, std::size_t(4 * i), std::int32_t(0x7fffffff));
  save(h, "int32_max_shape", huge);
}

void token_shards(const fs::path& tmp) {
  const std::string h = "fuzz_token_shard";
  const fs::path file = tmp / "shard.bin";
  std::vector<std::uint16_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back(std::uint16_t((i * 1237) % 50257));
  GptTokenShardFile::write(file, tokens);
  const Bytes valid = read_bytes(file);
  GptTokenShardFile::write(file, {});
  const Bytes empty = read_bytes(file);
  GptTokenShardFile::write(file, std::vector<std::uint16_t>{50256, 50257, 65535});
  const Bytes out_of_vocab = read_bytes(file);
  GptTokenShardFile::write(file, std::vector<std::uint16_t>{7});
  const Bytes one = read_bytes(file);
  save(h, "valid_40", valid);
  save(h, "valid_1", one);
  save(h, "empty_shard", empty);
  save(h, "out_of_vocab", out_of_vocab);
  save(h, "truncated", first(valid, valid.size() - 1));
  save(h, "trailing", plus(valid, "z"));
  save(h, "header_truncated", first(valid, 64));
  save(h, "count_too_large", patched(first(valid, 1024), 8, std::int32_t(1000000)));
  save(h, "negative_count", patched(valid, 8, std::int32_t(-40)));
  save(h, "version_2", patched(valid, 4, std::int32_t(2)));
  save(h, "checkpoint_magic", patched(valid, 0, kLlmcCheckpointMagic));
}

using fuzz::llama_shape;

// Header field i (int32) of an llm.c file.
Bytes field(const Bytes& bytes, int i, std::int32_t value) { return patched(bytes, std::size_t(4 * i), value); }

void llama_checkpoints(const fs::path& tmp) {
  const std::string h = "fuzz_llama_checkpoint";
  const LlamaShape tiny = fuzz::tiny_llama_shape();
  // H = int(2 · int(8·2/3)) = 10 rounded up to 12, Llama 3.1's scaled RoPE, 198 parameters.
  LlamaShape other = llama_shape(2, 2, 1, 1, 3, 2, 2.0f, 3);
  other.use_scaled_rope = true;
  other.rope_theta = 500000.0f;
  const auto [v3, v5] = checkpoint_seeds(h, tmp / "llama.bin", tiny, other, [](const auto&... a) {
    LlamaCheckpointFile::write(a...);
  });
  save(h, "gpt2_magic", field(v3, 0, kLlmcCheckpointMagic));
  save(h, "token_shard_magic", field(v3, 0, kLlamaTokenMagic));
  save(h, "version_4", field(v3, 1, 4));
  save(h, "v3_as_v5", field(v3, 1, kLlmcCheckpointBf16));
  save(h, "llama_2", field(v3, 14, 2));
  save(h, "norm_eps_1", field(v3, 10, 1));
  save(h, "rope_theta_0", field(v3, 11, 0));
  save(h, "scaled_rope_2", field(v3, 12, 2));
  save(h, "multiple_of_0", field(v3, 9, 0));
  save(h, "multiplier_negative", field(v3, 8, -1));
  save(h, "heads_not_dividing", field(v3, 5, 3));
  save(h, "odd_head_size", field(field(v3, 5, 4), 6, 1));
  save(h, "kv_heads_not_dividing", field(v3, 6, 3));
  save(h, "ignored_fields_set", field(field(v3, 13, 77), 200, -5));  // max_gen_batch_size, padding
  // The largest rope_theta and ffn_dim_multiplier the int32 header holds (floats round them up to
  // 2^31). A valid file: writing it back converted 2^31 to int32 (undefined; now saturated).
  save(h, "rope_theta_int32_max", field(v3, 11, 0x7fffffff));
  save(h, "multiplier_int32_max", field(first(v3, 1024), 8, 0x7fffffff));
  // A multiplier with int(multiplier · int(8C/3)) = 2^32 + 64 for C = 4: an int H wraps to 64; the
  // file has the size of that H (868 parameters) and was accepted as H = 64 (now refused).
  save(h, "ffn_hidden_wraps", field(plus(first(v3, 1024), std::string(868 * 4, '\0')), 8, 429496736));
  // Meta's shapes, header only (their values are gigabytes), right and wrong ffn fields.
  const LlamaShape b8 = llama_preset("llama3-8B");
  const Bytes header_8b = first(v3, 1024);
  Bytes meta = header_8b;
  const LlmcHeaderWords meta_header = llama_checkpoint_header(b8, kLlmcCheckpointBf16);
  std::memcpy(meta.data(), meta_header.data(), sizeof meta_header);
  save(h, "llama3_8b_header_only", meta);
  save(h, "llama3_8b_wrong_multiple_of", field(meta, 9, 256));
  save(h, "llama3_1b_wrong_multiplier", field(field(field(field(meta, 7, 2048), 15, 2), 8, 2), 9, 256));
  Bytes huge = first(v3, 1024);  // the largest int32 dimensions
  for (int i = 2; i < 8; ++i) huge = field(huge, i, 0x7fffffff);
  save(h, "int32_max_shape", huge);
}

void llama_token_shards(const fs::path& tmp) {
  const std::string h = "fuzz_llama_token_shard";
  const fs::path file = tmp / "shard.bin";
  std::vector<std::uint32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back(std::uint32_t((i * 40009) % kLlama3Vocab));
  LlamaTokenShardFile::write(file, tokens);
  const Bytes valid = read_bytes(file);
  LlamaTokenShardFile::write(file, {});
  const Bytes empty = read_bytes(file);
  LlamaTokenShardFile::write(file, std::vector<std::uint32_t>{128255, 128256, 0x7fffffff, 0x80000000, 0xffffffff});
  const Bytes out_of_vocab = read_bytes(file);
  LlamaTokenShardFile::write(file, std::vector<std::uint32_t>{7});
  const Bytes one = read_bytes(file);
  save(h, "valid_40", valid);
  save(h, "valid_1", one);
  save(h, "empty_shard", empty);
  save(h, "out_of_vocab", out_of_vocab);
  save(h, "truncated", first(valid, valid.size() - 1));
  save(h, "trailing", plus(valid, "z"));
  save(h, "header_truncated", first(valid, 64));
  save(h, "count_too_large", field(first(valid, 1024), 2, 1000000));
  save(h, "count_int32_max", field(first(valid, 1024), 2, 0x7fffffff));
  save(h, "negative_count", field(valid, 2, -40));
  save(h, "version_1", field(valid, 1, 1));
  save(h, "gpt2_shard_magic", field(valid, 0, kLlmcTokenMagic));
  save(h, "checkpoint_magic", field(valid, 0, kLlamaCheckpointMagic));
  save(h, "ignored_fields_set", field(valid, 100, 12345));
}

StateLayout small_layout() {  // fuzz_state_file.cpp's and fuzz_sharded_state.cpp's
  StateLayout layout;
  layout.shape_fields = {8, 10, 2, 2, 4, 16};
  layout.layer_params = {5, 7, 4};
  return layout;
}

TrainingState state_of(std::size_t n, std::uint64_t step) {
  TrainingState state;
  state.step = step;
  state.data_position = step * 3;
  state.rng.seed(step + 11);
  state.rng.discard(5);
  state.master = values(n, 1.0f);
  state.m = values(n, 0.25f);
  state.v = values(n, 0.125f);
  return state;
}

Bytes state_bytes(const fs::path& tmp, const StateLayout& layout, const TrainingState& state) {
  const fs::path file = tmp / "x.state";
  write_training_state(file, layout, state);
  return read_bytes(file);
}

void state_files(const fs::path& tmp) {
  const std::string h = "fuzz_state_file";
  const StateLayout small = small_layout();
  const Bytes full = state_bytes(tmp, small, state_of(16, 5));
  const Bytes shard = state_bytes(tmp, small, state_of(6, 5));  // a 1/3 shard: 2 + 3 + 2
  const Bytes empty = state_bytes(tmp, small, state_of(0, 0));
  // A GPT shape small enough to be read against its own layout (fuzz_state_file's second reader).
  const GptShape gpt = shape(2, 3, 4, 1, 1, 2);
  const Bytes gpt_full = state_bytes(tmp, GptLayout(gpt).state_layout(), state_of(gpt.param_count(), 9));
  save(h, "full", full);
  save(h, "shard", shard);
  save(h, "no_elements", empty);
  save(h, "gpt_shape_full", gpt_full);
  save(h, "truncated", first(full, full.size() - 3));
  save(h, "trailing", plus(full, "!"));
  save(h, "header_only", first(full, 64));
  save(h, "header_truncated", first(full, 40));
  save(h, "wrong_magic", patched(full, 0, std::uint32_t(0x4b435a53)));  // "SZCK"
  save(h, "version_2", patched(full, 4, std::uint32_t(2)));
  save(h, "other_shape", patched(full, 24, std::int32_t(8)));
  save(h, "too_many_elements", patched(full, 48, std::uint64_t(17)));
  save(h, "rng_text_huge", patched(full, 56, std::uint64_t(1) << 40));
  Bytes bad_rng = full;  // a letter inside the RNG text
  bad_rng[64 + 3] = 'x';
  save(h, "rng_text_corrupt", bad_rng);
  save(h, "rng_text_short", patched(full, 56, std::uint64_t(10)));
}

void sharded_states(const fs::path& tmp) {
  const std::string h = "fuzz_sharded_state";
  const std::string sep = "|SZ|";
  const StateLayout small = small_layout();
  const auto set = [&](const std::string& names, const std::vector<Bytes>& files) {
    Bytes out(names.begin(), names.end());
    for (const Bytes& file : files) {
      out.insert(out.end(), sep.begin(), sep.end());
      out.insert(out.end(), file.begin(), file.end());
    }
    return out;
  };
  const Bytes full = state_bytes(tmp, small, state_of(16, 4));
  // 2 ranks: shards of ceil(5/2) + ceil(7/2) + ceil(4/2) = 3 + 4 + 2 = 9; 3 ranks: 2 + 3 + 2 = 7.
  std::vector<Bytes> two, three, three_full;
  for (int r = 0; r < 2; ++r) two.push_back(state_bytes(tmp, small, state_of(9, 4)));
  for (int r = 0; r < 3; ++r) three.push_back(state_bytes(tmp, small, state_of(7, 4)));
  for (int r = 0; r < 3; ++r) three_full.push_back(full);
  save(h, "one_rank", set("", {full}));
  save(h, "two_ranks_sharded", set("", two));
  save(h, "three_ranks_sharded", set("", three));
  save(h, "three_ranks_unsharded", set("", three_full));
  save(h, "steps_differ", set("", {two[0], state_bytes(tmp, small, state_of(9, 5))}));
  save(h, "missing_rank", set("3", two));
  save(h, "rank_count_0", set("0", {full}));
  save(h, "rank_count_leading_zero", set("02", two));
  save(h, "rank_count_huge", set("99999999999", {full}));
  save(h, "shard_truncated", set("", {two[0], first(two[1], two[1].size() - 4)}));
  save(h, "rng_offset_wraps", set("", {patched(full, 56, ~std::uint64_t(0) - 63)}));
  const GptShape gpt = shape(2, 3, 4, 1, 1, 2);
  save(h, "gpt_shape", set("", {state_bytes(tmp, GptLayout(gpt).state_layout(), state_of(gpt.param_count(), 2))}));
  save(h, "no_files", set("", {}));
}

void layer_checkpoints(const fs::path& tmp) {
  const std::string h = "fuzz_layer_checkpoint";
  StateLayout layout;  // fuzz_layer_checkpoint.cpp's mlp_layout()
  layout.shape_fields = {4, 2, 1, 0, 0, 0};
  layout.layer_params = {10, 6, 12};
  const LayerCheckpointFormat format("mlp", layout);
  const fs::path file = tmp / "mlp.ckpt";
  const auto source = [](int layer, std::size_t begin, std::span<float> out) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = float(layer) + float(begin + i) / 8.0f;
  };
  format.write(file, source, DType::f32);
  const Bytes fp32 = read_bytes(file);
  format.write(file, source, DType::bf16);
  const Bytes bf16 = read_bytes(file);
  save(h, "fp32", fp32);
  save(h, "bf16", bf16);
  save(h, "truncated", first(fp32, fp32.size() - 2));
  save(h, "trailing", plus(bf16, "??"));
  save(h, "header_only", first(fp32, 56));
  save(h, "counts_only", first(fp32, 56 + 24));
  save(h, "storage_2", patched(fp32, 48, std::uint32_t(2)));
  save(h, "bf16_as_fp32", patched(bf16, 48, std::uint32_t(0)));
  save(h, "layers_4", patched(fp32, 52, std::uint32_t(4)));
  save(h, "layers_huge", patched(fp32, 52, std::uint32_t(0xffffffff)));
  save(h, "count_changed", patched(fp32, 56, std::uint64_t(11)));
  save(h, "family_gpt", patched(fp32, 8, std::array<char, 4>{'g', 'p', 't', '\0'}));
  save(h, "family_unterminated", patched(fp32, 8, std::array<char, 16>{'m', 'l', 'p', 'x', 'x', 'x', 'x', 'x', 'x',
                                                                     'x', 'x', 'x', 'x', 'x', 'x', 'x'}));
  save(h, "version_0", patched(fp32, 4, std::uint32_t(0)));
  save(h, "llmc_magic", patched(fp32, 0, kLlmcCheckpointMagic));
}

void command_lines() {
  const std::string h = "fuzz_cli";
  const auto line = [&](const std::string& name, const std::vector<std::string>& args) {
    Bytes out;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (i > 0) out.push_back('\0');
      out.insert(out.end(), args[i].begin(), args[i].end());
    }
    save(h, name, out);
  };
  line("train_like", {"--steps", "100", "--lr=3e-4", "--batch", "4", "--precision=bf16", "--verbose"});
  line("plan_like", {"--params=1.5B", "--memory", "80GiB", "--ranks=1,8,64"});
  line("session", {"--sched=dmda", "--sched-alpha=0.5", "--sched-beta", "2e0", "--sched-gamma=1K",
                   "--priorities=critical-path", "--cpu-workers", "4", "--cuda-workers=0"});
  line("accumulate_auto", {"--accumulate=auto", "--resume=false", "--trace", "/tmp/t"});
  line("accumulate_count", {"--accumulate", "16", "--resume=yes"});
  line("byte_units", {"--memory=1.5TB", "--memory=512MiB", "--memory=4096", "--memory=24gib"});
  line("count_units", {"--params=7e9", "--params=125M", "--params=2T", "--steps=4K"});
  line("bad_boolean", {"--verbose=maybe"});
  line("missing_value", {"--steps"});
  line("value_is_flag", {"--steps", "--verbose"});
  line("unknown_flag", {"--nope=1"});
  line("positional", {"word"});
  line("dash_dash", {"--"});
  line("fraction_count", {"--steps=1.5"});
  line("negative", {"--lr=-1"});
  line("exponent", {"--params=1e-3K", "--memory=1E+3kb"});
  line("list_gaps", {"--ranks=1,,2"});
  line("empty_value", {"--steps="});
  line("real_past_float", {"--lr=1e39"});  // was read as an infinite learning rate
  line("empty", {});
}

void deepspeed_configs() {
  const std::string h = "fuzz_deepspeed_config";
  const auto text = [&](const std::string& name, const std::string& json) { save(h, name, Bytes(json.begin(), json.end())); };
  // DeepSpeed's Getting Started sample (docs/_tutorials/getting-started.md), as it is (fp16: refused).
  text("getting_started", R"({"train_batch_size": 8, "gradient_accumulation_steps": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 0.00015}}, "fp16": {"enabled": true}, "zero_optimization": true})");
  text("offload_cosine", R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
    "gradient_clipping": 0.5, "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.85, 0.95], "eps": 1e-7, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.1, "warmup_num_steps": 3,
      "total_num_steps": 8, "cos_min_ratio": 0.05, "warmup_type": "linear"}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "pin_memory": false},
      "offload_param": {"device": "cpu"}, "overlap_comm": false, "contiguous_gradients": true}})");
  text("hf_auto", R"({"fp16": {"enabled": "auto", "loss_scale": 0}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
      "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9}, "train_batch_size": "auto"})");
  text("warmup_lr", R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.001, "warmup_num_steps": 1000}},
    "activation_checkpointing": {"partition_activations": true}, "steps_per_print": 10})");
  text("truncated", R"({"train_batch_size": 8, "optimizer": {"type": "Ada)");
  text("wrong_types", R"({"train_batch_size": "eight", "zero_optimization": {"stage": 2.5}, "gradient_clipping": null})");
  text("huge_numbers", R"({"train_batch_size": 1e300, "gradient_accumulation_steps": 9223372036854775807,
    "optimizer": {"params": {"lr": 1e39, "betas": [1, -0.1]}}})");
  text("not_an_object", "[1, 2, 3]");
  text("empty_object", "{}");
  text("negative_zero", R"({"optimizer": {"params": {"lr": -0e3, "betas": [-0.0, 0.9]}}, "gradient_clipping": -0.0})");
  text("empty_keys", R"({"": {"device": "nvme"}, "zero_optimization": {"": 1, "stage": 1}})");  // once an empty name
}

void machine_files() {
  const std::string h = "fuzz_machine_json";
  const auto text = [&](const std::string& name, const std::string& json) { save(h, name, Bytes(json.begin(), json.end())); };
  const std::string fields = R"("cpus": 2, "gpus": 0, "gpu_memory_bytes": 0, "host_to_gpu_Bps": 0, "gpu_to_host_Bps": 0,
    "pcie_latency_s": 0, "gpu_to_gpu_Bps": 0, "gpu_to_gpu_latency_s": 0, "gpu_bf16_flops": 0, "gpu_fp32_flops": 0,
    "gpu_memory_Bps": 0, "cpu_core_flops": 3e10, "host_memory_Bps": 2e10, "gemm_efficiency": 0.75,
    "elementwise_efficiency": 0.8, "kernel_launch_s": 5e-06, "disk_read_Bps": 6.5e9, "disk_write_Bps": 3.5e9,
    "disk_latency_s": 0.0001)";
  // As `starzero calibrate` writes it: two CPU cores, overheads measured under three policies.
  text("calibrated", R"({"name": "this-machine", )" + fields + R"(, "cpu_task_overhead": {
    "dmda": {"us_per_task": 27.5, "wake_us": 10.6, "tasks": 35458}, "dmdas": {"us_per_task": 32.4, "wake_us": 11.8,
    "tasks": 35459}, "lws": {"us_per_task": 25.6, "wake_us": 7.6, "tasks": 61464}}})");
  text("no_overhead", R"({"name": "box1", )" + fields + "}");  // written before overheads were measured
  text("h200", R"({"name": "h200x1", "cpus": 32, "gpus": 1, "gpu_memory_bytes": 141e9, "host_to_gpu_Bps": 55e9,
    "gpu_to_host_Bps": 55e9, "pcie_latency_s": 1e-05, "gpu_to_gpu_Bps": 0, "gpu_to_gpu_latency_s": 0,
    "gpu_bf16_flops": 989e12, "gpu_fp32_flops": 67e12, "gpu_memory_Bps": 4.8e12, "cpu_core_flops": 3e10,
    "host_memory_Bps": 3.07e11, "gemm_efficiency": 0.75, "elementwise_efficiency": 0.8, "kernel_launch_s": 5e-06,
    "disk_read_Bps": 6.5e9, "disk_write_Bps": 3.5e9, "disk_latency_s": 0.0001})");
  text("overhead_missing_field", R"({"name": "box1", )" + fields + R"(, "cpu_task_overhead": {"lws": {"us_per_task": 1}}})");
  text("overhead_huge", R"({"name": "box1", )" + fields + R"(, "cpu_task_overhead": {"a": {"us_per_task": 1,
    "wake_us": 0, "tasks": 1e308}, "b": {"us_per_task": 1e308, "wake_us": 1e308, "tasks": 1e308}}})");
  text("overhead_bad_policy", R"({"name": "box1", )" + fields + R"(, "cpu_task_overhead": {"l w s": {"us_per_task": 1,
    "wake_us": 0, "tasks": 1}, "": {"us_per_task": 1, "wake_us": 0, "tasks": 1}}})");
  text("cpus_past_int", R"({"name": "box1", "cpus": 4294967298, )" + fields.substr(fields.find("\"gpus\"")) + "}");
  text("truncated", R"({"name": "box1", "cpus": 2, "gp)");
  text("not_an_object", "[\"name\"]");
}

// fuzz_jsonl: records of both kinds (with a long one, CRLF, blank lines, escapes), one of each bad
// record, and mask shards: valid ones and broken headers and values.
void jsonl_files(const fs::path& tmp) {
  const std::string h = "fuzz_jsonl";
  const auto text = [&](const std::string& name, const std::string& lines) { save(h, name, Bytes(lines.begin(), lines.end())); };
  text("text", "{\"text\": \"the cat\"}\n\n{\"text\": \"  the the\\n\\u00e9 <|end_of_text|>\", \"id\": 1}\r\n"
               "{\"text\": \"a record longer than eight tokens\"}");
  text("prompt_completion", "{\"prompt\": \"Q: 1+1?\\n\", \"completion\": \" 2\"}\n{\"prompt\": \"\", \"completion\": \"x\"}\n"
                            "{\"completion\": \"the end\", \"prompt\": \"<|begin_of_text|>\"}\n");
  text("bad_records", "{\"text\": \"a\"\n[1]\n{}\n{\"text\": \"a\", \"prompt\": \"b\"}\n{\"prompt\": \"a\"}\n{\"completion\": \"a\"}\n"
                      "{\"text\": 5}\n{\"text\": \"\"}\n{\"prompt\": \"a\", \"completion\": \"\"}\n{\"text\": \"\\ud800\"}\n"
                      "{\"text\": \"ok\"}\n{\"prompt\": \"a\", \"completion\": \"b\"}\n");
  text("empty", "");
  const fs::path file = tmp / "m.mask";
  write_mask_shard(file, std::vector<std::uint8_t>{1, 0, 0, 1, 1, 1, 0});
  const Bytes mask = read_bytes(file);
  save(h, "mask", mask);
  write_mask_shard(file, {});
  save(h, "mask_empty", read_bytes(file));
  save(h, "mask_value_2", [&] { Bytes b = mask; b[1024 + 2] = 2; return b; }());
  save(h, "mask_count_past", patched(mask, 8, std::int32_t(8)));
  save(h, "mask_version_2", patched(mask, 4, std::int32_t(2)));
  save(h, "mask_token_magic", patched(mask, 0, std::int32_t(20240520)));
  save(h, "mask_truncated", Bytes(mask.begin(), mask.begin() + 100));
}

// fuzz_safetensors: a small file of each dtype with metadata, an empty one, and broken headers.
void safetensors_files(const fs::path& tmp) {
  const std::string h = "fuzz_safetensors";
  const fs::path file = tmp / "m.safetensors";
  const auto fill = [](std::size_t i, std::span<float> v) {
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(i + 1) * 0.25f - float(k);
  };
  write_safetensors(file,
                    {{"wte.weight", SafeDType::f32, {3, 2}}, {"h.0.ln_1.weight", SafeDType::bf16, {2}},
                     {"h.0.attn.c_attn.weight", SafeDType::f16, {2, 3}}, {"scalar", SafeDType::f32, {}}},
                    {{"format", "pt"}}, fill);
  const Bytes three = read_bytes(file);
  save(h, "three_dtypes", three);
  write_safetensors(file, {}, {}, fill);
  save(h, "empty", read_bytes(file));
  Bytes overlapping = three;
  std::uint64_t length = 0;
  std::memcpy(&length, three.data(), 8);
  std::string changed(three.begin() + 8, three.begin() + 8 + std::ptrdiff_t(length));
  changed.replace(changed.find("[24,28]"), 7, "[20,24]");  // h.0.ln_1.weight over wte.weight's end
  std::copy(changed.begin(), changed.end(), overlapping.begin() + 8);
  save(h, "overlapping", overlapping);
  save(h, "truncated", Bytes(three.begin(), three.end() - 3));
  Bytes huge = three;
  huge[6] = 1;  // a header length of 2^48 and more
  save(h, "header_too_large", huge);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus OUT_DIR\n");
    return 2;
  }
  out_root = argv[1];
  const fs::path tmp = out_root / ".tmp";
  fs::create_directories(tmp);
  llmc_checkpoints(tmp);
  token_shards(tmp);
  llama_checkpoints(tmp);
  llama_token_shards(tmp);
  state_files(tmp);
  sharded_states(tmp);
  layer_checkpoints(tmp);
  command_lines();
  deepspeed_configs();
  machine_files();
  safetensors_files(tmp);
  jsonl_files(tmp);
  fs::remove_all(tmp);
  return 0;
}
