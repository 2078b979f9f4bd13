#pragma once
// The training state of a run, as the files its ranks wrote (one per rank, FILE.rank<r>-of-<N>.state,
// or FILE.state for one rank), read piece by piece without loading any file whole: what
// `starzero consolidate` needs (one layer's slice in memory at a time) and what a resume with a
// different number of ranks needs (each new rank reads its own new shard from the old ones).
//
// Each file holds this rank's fp32 master weights, then m, then v; each of them, for every layer
// in order, this rank's shard of the layer (shard_count(count, N) elements, zero padded past
// the layer's end). A file of an unsharded run (ZeRO-0, or one rank) holds every layer whole.
// One file's format is in train/state_files.hpp. The model is described by a StateLayout
// (train/state_layout.hpp): any model can use these files; GPT's is GptLayout::state_layout
// (models/gpt_layout.hpp).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "train/state_files.hpp"
#include "train/state_layout.hpp"

namespace starzero {

// FILE.state (ranks = 1) or FILE.rank<r>-of-<ranks>.state.
std::filesystem::path training_state_path(const std::filesystem::path& checkpoint, int rank, int ranks);

class ShardedTrainingState {
 public:
  enum class Array { master, m, v };

  // The state files beside `checkpoint` (FILE.state, or FILE.rank*-of-N.state for one N), or
  // nullopt when there are none. Throws FileFormatError for missing ranks, files of other shape
  // fields, inconsistent sizes or steps.
  static std::optional<ShardedTrainingState> find(const std::filesystem::path& checkpoint, const StateLayout& layout);
  // The same, with the layout derived from the shape fields the files store (rank 0's header),
  // e.g. find(checkpoint, gpt_state_layout_from_fields). `layout_of` throws std::invalid_argument
  // for fields that describe no valid model (reported as a FileFormatError).
  using LayoutOfFields = std::function<StateLayout(const StateShapeFields&)>;
  static std::optional<ShardedTrainingState> find(const std::filesystem::path& checkpoint,
                                                  const LayoutOfFields& layout_of);

  int ranks() const { return int(files_.size()); }
  bool sharded() const { return sharded_; }
  std::uint64_t step() const { return step_; }
  // The training data's stream position after step() (rank 0's file; Trainable::data_position_after).
  std::uint64_t data_position() const { return data_position_; }
  const StateLayout& layout() const { return layout_; }

  // Elements [begin, begin + out.size()) of one layer's full (unpadded) array; positions past
  // the layer's end read as 0 (the padding of a new shard).
  void read(int layer, Array array, std::size_t begin, std::span<float> out) const;

 private:
  struct File {
    std::filesystem::path path;
    std::uint64_t arrays_offset = 0;  // bytes to master[0]
    std::uint64_t count = 0;          // elements per array
  };
  void read_file(const File& file, std::uint64_t element, std::span<float> out) const;

  StateLayout layout_;
  std::vector<File> files_;
  bool sharded_ = false;
  std::uint64_t step_ = 0, data_position_ = 0;
  std::vector<std::size_t> layer_start_;  // per layer: first element in a rank's arrays
};

}  // namespace starzero
