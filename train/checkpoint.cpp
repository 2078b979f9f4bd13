#include "train/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/sharding.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

// Files FILE.*.state of another rank count than `ranks`: a resume must never mix runs. Names are
// compared within FILE's folder (paths would differ in spelling: "./x" is not "x").
void remove_other_training_states(const fs::path& checkpoint, int ranks) {
  const fs::path dir = checkpoint.has_parent_path() ? checkpoint.parent_path() : fs::path(".");
  const std::string prefix = checkpoint.filename().string() + ".";
  for (const auto& entry : fs::directory_iterator(dir)) {
    const fs::path name = entry.path().filename();
    if (!name.string().starts_with(prefix) || !name.string().ends_with(".state")) continue;
    bool mine = false;
    for (int r = 0; r < ranks; ++r) mine = mine || name == training_state_path(checkpoint, r, ranks).filename();
    if (!mine) fs::remove(entry.path());
  }
}

void write_rank_state(const fs::path& checkpoint, const CheckpointFormat& format, Engine& engine,
                      std::uint64_t step, std::uint64_t data_position) {
  TrainingState state;
  state.step = step;
  state.data_position = data_position;
  for (const LayerOptimizerState& layer : engine.optimizer_state()) {
    state.master.insert(state.master.end(), layer.master.begin(), layer.master.end());
    state.m.insert(state.m.end(), layer.m.begin(), layer.m.end());
    state.v.insert(state.v.end(), layer.v.begin(), layer.v.end());
  }
  write_training_state(training_state_path(checkpoint, engine.rank(), engine.ranks()), format.state_layout(), state);
}

}  // namespace

const CheckpointFormat& hugging_face_format(const CheckpointFormat& native, std::unique_ptr<CheckpointFormat>& held) {
  if (!held) held = native.hugging_face();
  if (!held) throw std::invalid_argument("this model has no Hugging Face format (GPT-2 and Llama 3 have)");
  return *held;
}

const CheckpointFormat& checkpoint_format_at(const fs::path& path, const CheckpointFormat& native,
                                             std::unique_ptr<CheckpointFormat>& held) {
  return fs::is_directory(path) ? hugging_face_format(native, held) : native;
}

ResumeFiles read_resume_files(const fs::path& checkpoint, const CheckpointFormat& format) {
  format.check(checkpoint);
  return ResumeFiles{checkpoint, &format, ShardedTrainingState::find(checkpoint, format.state_layout())};
}

std::uint64_t apply_resume_files(const ResumeFiles& files, Engine& engine) {
  engine.load_master_params(
      [&](const Engine::LayerValues& destination) { files.format->read(files.checkpoint, destination); });
  if (!files.state) return 0;
  // This rank's part of the saved state, whatever number of ranks wrote it (re-sharding).
  const ShardedTrainingState& saved = *files.state;
  const std::vector<std::size_t> sizes = files.format->state_layout().layer_params;
  std::vector<LayerOptimizerState> layers;
  for (std::size_t l = 0; l < sizes.size(); ++l) {
    const std::size_t count = sizes[l];
    const std::size_t shard = engine.sharded() ? shard_count(count, engine.ranks()) : count;
    const std::size_t begin = engine.sharded() ? shard * std::size_t(engine.rank()) : 0;
    LayerOptimizerState state{std::vector<float>(shard), std::vector<float>(shard), std::vector<float>(shard)};
    saved.read(int(l), ShardedTrainingState::Array::master, begin, state.master);
    saved.read(int(l), ShardedTrainingState::Array::m, begin, state.m);
    saved.read(int(l), ShardedTrainingState::Array::v, begin, state.v);
    layers.push_back(std::move(state));
  }
  engine.set_optimizer_state(layers);
  return saved.step();
}

namespace {

void check_finite(const std::vector<float>& values, std::size_t layer, std::uint64_t step) {
  if (!std::all_of(values.begin(), values.end(), [](float x) { return std::isfinite(x); }))
    throw std::runtime_error("not saving step " + std::to_string(step) + ": layer " + std::to_string(layer) +
                             " has non-finite parameters");
}

// The leader writes `checkpoint` from every layer gathered at once (collective when sharded).
void write_gathered(const fs::path& checkpoint, const CheckpointFormat& format, Engine& engine,
                    const DataParallelRanks& ranks, std::uint64_t step, DType precision) {
  const std::vector<std::vector<float>> layers = engine.master_params();  // collective when sharded
  for (std::size_t l = 0; l < layers.size(); ++l) check_finite(layers[l], l, step);
  if (ranks.leader())
    format.write(
        checkpoint,
        [&](int layer, std::size_t begin, std::span<float> out) {
          const std::vector<float>& values = layers.at(std::size_t(layer));
          std::copy_n(values.begin() + std::ptrdiff_t(begin), out.size(), out.begin());
        },
        precision);
}

// The same for a format that asks for the layers in order: every rank gathers them one at a time
// (the same collectives in the same order), and the leader's writer reads each as it asks for it.
// A non-finite layer stops every rank at that layer, before the leader's file is complete.
void write_layer_by_layer(const fs::path& checkpoint, const CheckpointFormat& format, Engine& engine,
                          const DataParallelRanks& ranks, std::uint64_t step, DType precision) {
  const int layers = int(format.state_layout().layer_params.size());
  int next = 0;
  std::vector<float> current;
  const auto gather_through = [&](int layer) {
    for (; next <= layer; ++next) {
      current = engine.master_layer(next);
      check_finite(current, std::size_t(next), step);
    }
  };
  if (ranks.leader())
    format.write(
        checkpoint,
        [&](int layer, std::size_t begin, std::span<float> out) {
          if (layer < next - 1) throw std::logic_error("a layer-ordered checkpoint format asked for an earlier layer");
          gather_through(layer);
          std::copy_n(current.begin() + std::ptrdiff_t(begin), out.size(), out.begin());
        },
        precision);
  gather_through(layers - 1);
}

}  // namespace

void save_checkpoint(const fs::path& checkpoint, const CheckpointFormat& format, Engine& engine,
                     const DataParallelRanks& ranks, std::uint64_t step, DType precision,
                     std::optional<std::uint64_t> data_position) {
  engine.flush();  // a delayed update is applied first: the files hold the updated state
  if (format.writes_layers_in_order())
    write_layer_by_layer(checkpoint, format, engine, ranks, step, precision);
  else
    write_gathered(checkpoint, format, engine, ranks, step, precision);
  write_rank_state(checkpoint, format, engine, step, data_position.value_or(step));
  ranks.barrier();  // every rank's file is written
  if (ranks.leader()) remove_other_training_states(checkpoint, ranks.size());
}

void save_checkpoint_set(const CheckpointSets& sets, int keep, const CheckpointFormat& format, Engine& engine,
                         const DataParallelRanks& ranks, std::uint64_t step, DType precision,
                         std::optional<std::uint64_t> data_position) {
  fs::path model;
  try {
    if (ranks.leader()) model = sets.begin(step);
    const long leader_pid = long(ranks.from_leader(::getpid()));  // the partial folder's name; after begin
    if (!ranks.leader()) model = sets.partial_model_file(step, leader_pid);
    save_checkpoint(model, format, engine, ranks, step, precision, data_position);  // ends once every rank's files are written
    if (ranks.leader()) sets.commit(step, keep);
  } catch (...) {
    if (ranks.leader()) sets.abandon(step);
    throw;
  }
}

ConsolidateResult consolidate_checkpoint(const fs::path& checkpoint, const fs::path& out,
                                         const FormatOfState& format_of_state, DType precision) {
  std::unique_ptr<CheckpointFormat> format;
  const auto saved = ShardedTrainingState::find(checkpoint, [&](const StateShapeFields& fields) {
    format = format_of_state(fields);
    return format->state_layout();
  });
  if (!saved)
    throw std::invalid_argument("no training state beside '" + checkpoint.string() +
                                "' (expected FILE.state or FILE.rank0-of-N.state)");
  ConsolidateResult result{saved->ranks(), saved->step(), 0, format->describe(precision)};
  format->write(
      out,
      [&](int layer, std::size_t begin, std::span<float> slice) {
        result.largest_slice = std::max(result.largest_slice, slice.size());
        saved->read(layer, ShardedTrainingState::Array::master, begin, slice);
      },
      precision);
  return result;
}

}  // namespace starzero
