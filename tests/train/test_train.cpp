// The training library (train/) with a real model (the MLP of models/mlp.hpp) and real StarPU
// sessions: checkpoints written and read back, resume, consolidate, the model registry's
// shape rules, and starzero's own layer checkpoint file.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <random>

#include "comm/ranks.hpp"
#include "models/gpt_files.hpp"
#include "models/layer_checkpoint.hpp"
#include "models/mlp.hpp"
#include "models/registry.hpp"
#include "offload/engine.hpp"
#include "runtime/session.hpp"
#include "tests/temp_dir.hpp"
#include "train/checkpoint.hpp"
#include "train/trainer.hpp"

using namespace starzero;
using starzero::testing::TempDir;

namespace {

SessionOptions cpu_session() {
  SessionOptions o;
  o.cpu_workers = 2;
  o.cuda_workers = 0;
  return o;
}

// Random values for every layer of a layout (non-trivial bits, so bf16 rounding shows).
std::vector<std::vector<float>> random_layers(const StateLayout& layout, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> layers;
  for (std::size_t count : layout.layer_params) {
    std::vector<float> values(count);
    for (float& v : values) v = normal(rng);
    layers.push_back(std::move(values));
  }
  return layers;
}

LayerSource source_of(const std::vector<std::vector<float>>& layers) {
  return [&layers](int layer, std::size_t begin, std::span<float> out) {
    std::copy_n(layers[std::size_t(layer)].begin() + std::ptrdiff_t(begin), out.size(), out.begin());
  };
}

std::vector<char> file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// 12 MLP steps at constant lr, the way `starzero train --model mlp` runs them.
TrainingSummary train_mlp(Trainable& model, Engine& engine, int steps, std::uint64_t first_step = 1) {
  const DataParallelRanks ranks;
  TrainerOptions options;
  options.global_batch = model.micro_batch();
  options.steps = steps;
  options.schedule.lr = 1e-2f;
  options.schedule.warmup = 0;
  options.schedule.final = 1.0f;
  options.val_every = 0;
  options.quiet = true;
  Trainer trainer(model, engine, ranks, options);
  return trainer.run(first_step);
}

}  // namespace

TEST_CASE("layer checkpoint: fp32 round trip is exact, bf16 rounds to nearest even", "[train]") {
  TempDir dir("layer_ckpt");
  const MlpShape shape{64, 7, 2};  // odd sizes: nothing aligned
  const LayerCheckpointFormat format("mlp", shape.state_layout());
  const auto layers = random_layers(shape.state_layout(), 3);
  format.write(dir / "a.bin", source_of(layers), DType::f32);
  CHECK(format.read_layers(dir / "a.bin") == layers);
  format.write(dir / "b.bin", source_of(layers), DType::bf16);
  const auto halves = format.read_layers(dir / "b.bin");
  for (std::size_t l = 0; l < layers.size(); ++l)
    for (std::size_t i = 0; i < layers[l].size(); ++i)
      REQUIRE(halves[l][i] == bf16_to_float(float_to_bf16(layers[l][i])));
  const LayerCheckpointHeader header = read_layer_checkpoint_header(dir / "a.bin");
  CHECK(header.family == "mlp");
  CHECK(header.shape_fields == StateShapeFields{64, 7, 2, 0, 0, 0});
  CHECK(dir.entries() == std::vector<std::string>{"a.bin", "b.bin"});  // no temporary left
}

TEST_CASE("layer checkpoint: malformed files are FileFormatError", "[train]") {
  TempDir dir("layer_bad");
  const MlpShape shape{64, 5, 1};
  const LayerCheckpointFormat format("mlp", shape.state_layout());
  const auto layers = random_layers(shape.state_layout(), 4);
  format.write(dir / "good.bin", source_of(layers), DType::f32);
  const std::vector<char> good = file_bytes(dir / "good.bin");
  auto write = [&](const std::string& name, std::vector<char> bytes) {
    std::ofstream(dir / name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return dir / name;
  };
  CHECK_THROWS_AS(format.read_layers(write("short.bin", {good.begin(), good.end() - 1})), FileFormatError);
  std::vector<char> longer = good;
  longer.push_back(0);
  CHECK_THROWS_AS(format.read_layers(write("long.bin", longer)), FileFormatError);
  std::vector<char> magic = good;
  magic[0] = 'X';
  CHECK_THROWS_AS(format.read_layers(write("magic.bin", magic)), FileFormatError);
  // Another shape (C = 6) or another family.
  CHECK_THROWS_AS(LayerCheckpointFormat("mlp", MlpShape{64, 6, 1}.state_layout()).read_layers(dir / "good.bin"),
                  FileFormatError);
  CHECK_THROWS_AS(LayerCheckpointFormat("other", shape.state_layout()).read_layers(dir / "good.bin"), FileFormatError);
  CHECK_THROWS_AS(format.read_layers(dir / "missing.bin"), FileFormatError);
}

TEST_CASE("checkpoint save with a relative path keeps its state, and a resume continues exactly", "[train]") {
  TempDir dir("resume");
  const std::filesystem::path cwd = std::filesystem::current_path();
  REQUIRE(::chdir(dir.path().c_str()) == 0);
  Session session(cpu_session());
  const MlpShape shape{64, 16, 2};
  const LayerCheckpointFormat format("mlp", shape.state_layout());
  const DataParallelRanks ranks;
  TokenClassifier straight(shape, 8, 5);
  Engine straight_engine(straight, EngineOptions{});
  train_mlp(straight, straight_engine, 6);

  TokenClassifier first(shape, 8, 5);
  Engine first_engine(first, EngineOptions{});
  train_mlp(first, first_engine, 3);
  save_checkpoint("half.bin", format, first_engine, ranks, 3, DType::f32);  // relative, in the cwd
  CHECK(std::filesystem::exists("half.bin.state"));                         // it was once deleted as "another run's"

  TokenClassifier second(shape, 8, 5);
  Engine second_engine(second, EngineOptions{});
  const ResumeFiles files = read_resume_files("half.bin", format);
  REQUIRE(files.state);
  CHECK(apply_resume_files(files, second_engine) == 3);
  train_mlp(second, second_engine, 3, 4);
  CHECK(second_engine.master_params() == straight_engine.master_params());
  CHECK(second_engine.optimizer_state().size() == straight_engine.optimizer_state().size());
  for (std::size_t l = 0; l < second_engine.optimizer_state().size(); ++l) {
    CHECK(second_engine.optimizer_state()[l].m == straight_engine.optimizer_state()[l].m);
    CHECK(second_engine.optimizer_state()[l].v == straight_engine.optimizer_state()[l].v);
  }

  // consolidate rebuilds the checkpoint from the state file alone, whichever family wrote it.
  const ConsolidateResult merged =
      consolidate_checkpoint("half.bin", "merged.bin", checkpoint_format_of_state, DType::f32);
  CHECK(merged.ranks == 1);
  CHECK(merged.step == 3);
  CHECK(file_bytes("merged.bin") == file_bytes("half.bin"));
  REQUIRE(::chdir(cwd.c_str()) == 0);
}

TEST_CASE("registry: unknown models and contradicting shape flags are errors naming both", "[train]") {
  TempDir dir("registry");
  ModelRequest unknown;
  unknown.family = "resnet";
  REQUIRE_THROWS_AS(prepare_model(unknown), std::invalid_argument);
  try {
    prepare_model(unknown);
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("gpt, mlp") != std::string::npos);
  }

  // An MLP checkpoint defines the shape; --channels that contradicts it names both values.
  const MlpShape shape{64, 12, 2};
  LayerCheckpointFormat("mlp", shape.state_layout())
      .write(dir / "mlp.bin", source_of(random_layers(shape.state_layout(), 1)), DType::f32);
  ModelRequest from_file;
  from_file.family = "mlp";
  from_file.checkpoint = dir / "mlp.bin";
  CHECK(prepare_model(from_file)->parameter_count() == shape.state_layout().param_count());
  from_file.channels = 20;
  try {
    prepare_model(from_file);
    FAIL("a contradicting --channels was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("20") != std::string::npos);
    CHECK(std::string(e.what()).find("12") != std::string::npos);
  }
  // A GPT checkpoint defines the GPT shape without any preset flag.
  GptShape gpt = gpt_preset("tiny");
  gpt.layers = 1;
  gpt.channels = 16;
  gpt.heads = 2;
  gpt.max_seq = 8;
  GptCheckpointFile::write(dir / "gpt.bin", gpt, std::vector<float>(gpt.param_count(), 0.5f));
  {
    std::ofstream text(dir / "text.txt");
    for (int i = 0; i < 200; ++i) text << "some training text " << i << "\n";
  }
  ModelRequest gpt_request;
  gpt_request.checkpoint = dir / "gpt.bin";
  gpt_request.data = dir / "text.txt";
  CHECK(prepare_model(gpt_request)->parameter_count() == gpt.param_count());
  gpt_request.preset = "gpt2-124M";
  CHECK_THROWS_AS(prepare_model(gpt_request), std::invalid_argument);
}

TEST_CASE("validation's mean over batches: the plain mean unmasked, over the counted targets masked", "[train]") {
  // Unmasked: the mean of the batches' losses, the expression of a run without masks, bit for bit.
  BatchLossMean plain;
  plain.add(2.5, std::nullopt);
  plain.add(0.1, TargetCount{40, 40});
  plain.add(1.0 / 3.0, TargetCount{40, 40});
  const double sum = 2.5 + 0.1 + 1.0 / 3.0;
  CHECK(plain.mean() == sum / double(3));
  // Masked: batches of 40 targets, 10, 40 and 30 counted, with those means: the mean over the 80
  // counted targets, not the mean of the three means.
  BatchLossMean masked;
  masked.add(2.0, TargetCount{40, 10});
  masked.add(1.0, TargetCount{40, 40});
  masked.add(4.0, TargetCount{40, 30});
  CHECK(masked.mean() == Approx((2.0 * 10 + 1.0 * 40 + 4.0 * 30) / 80.0).epsilon(1e-15));
  CHECK(masked.mean() != Approx((2.0 + 1.0 + 4.0) / 3.0));
  // Every target masked: no counted target, loss 0.
  BatchLossMean none;
  none.add(0.0, TargetCount{40, 0});
  CHECK(none.mean() == 0.0);
}
