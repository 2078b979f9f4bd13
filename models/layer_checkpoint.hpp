#pragma once
// starzero's own checkpoint file for models without a format of their own (the MLP): every
// layer's parameters in order, behind a header that names the model family and its shape.
// Host-side, no StarPU. Layout (native little-endian):
//   0   char[4]   "SZCK"
//   4   uint32    version (kLayerCheckpointVersion)
//   8   char[16]  model family, NUL-padded ("mlp")
//   24  int32[6]  the family's shape fields (as in its .state files)
//   48  uint32    storage: 0 fp32, 1 bf16 (round to nearest even)
//   52  uint32    number of layers n
//   56  uint64[n] parameters per layer
//   then every layer's values in order; nothing after.
// Writes are atomic (write_file_atomically); reads check everything and throw FileFormatError.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/files.hpp"
#include "train/state_layout.hpp"
#include "train/trainable.hpp"

namespace starzero {

inline constexpr std::uint32_t kLayerCheckpointVersion = 1;

// The CheckpointFormat of a model family that stores its layers in this file.
class LayerCheckpointFormat final : public CheckpointFormat {
 public:
  // `family`: at most 15 characters; `layout`: the shape fields and layer sizes files must have.
  LayerCheckpointFormat(std::string family, StateLayout layout);

  StateLayout state_layout() const override { return layout_; }
  void write(const std::filesystem::path& path, const LayerSource& source, DType precision) const override;
  void check(const std::filesystem::path& path) const override;
  void read(const std::filesystem::path& path, const LayerDestination& destination) const override;
  DType stored_precision(const std::filesystem::path& path) const override;
  std::string describe(DType precision) const override;

 private:
  std::uint32_t read_checked_header(FileReader& in) const;
  std::string family_;
  StateLayout layout_;
};

// The family and shape fields a layer checkpoint's header names (a checkpoint defines the shape
// of the model that resumes from it); FileFormatError when it is no layer checkpoint.
struct LayerCheckpointHeader {
  std::string family;
  StateShapeFields shape_fields{};
};
LayerCheckpointHeader read_layer_checkpoint_header(const std::filesystem::path& path);
// True when the file starts with the "SZCK" magic (to tell it from another family's format).
bool is_layer_checkpoint(const std::filesystem::path& path);

}  // namespace starzero
