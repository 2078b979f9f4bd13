// libFuzzer harness: starzero's layer checkpoint (models/layer_checkpoint.hpp, "SZCK" version 1,
// the MLP's checkpoint file). The input is the file. read_layer_checkpoint_header,
// is_layer_checkpoint, and LayerCheckpointFormat::check and ::read for a small model ("mlp" with 4
// classes, 2 hidden units and 1 block: the seed corpus's) may only reject it with
// FileFormatError; check and read must agree, and an accepted file holds exactly the values read.
#include <cstring>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/layer_checkpoint.hpp"
#include "runtime/dtype.hpp"

using namespace starzero;
namespace fs = std::filesystem;

namespace {

// MlpShape{classes 4, hidden 2, blocks 1}.state_layout(): V·C + C, C·C + C, V·C + V.
StateLayout mlp_layout() {
  StateLayout layout;
  layout.shape_fields = {4, 2, 1, 0, 0, 0};
  layout.layer_params = {10, 6, 12};
  return layout;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path path = fuzz::scratch_dir() / "mlp.ckpt";
  static const LayerCheckpointFormat format("mlp", mlp_layout());
  fuzz::write_input(path, data, size);

  const bool magic = is_layer_checkpoint(path);
  FUZZ_CHECK(magic == (size >= 4 && std::memcmp(data, "SZCK", 4) == 0));
  try {
    const LayerCheckpointHeader header = read_layer_checkpoint_header(path);
    FUZZ_CHECK(magic && header.family.size() <= 16);
    FUZZ_CHECK(std::memcmp(header.shape_fields.data(), data + 24, sizeof header.shape_fields) == 0);
  } catch (const FileFormatError&) {
  }

  bool checked = true;
  try {
    format.check(path);
  } catch (const FileFormatError&) {
    checked = false;
  }
  const StateLayout layout = format.state_layout();
  std::vector<std::vector<float>> layers;
  bool read = true;
  try {
    format.read(path, [&](int layer, std::size_t count) {
      FUZZ_CHECK(std::size_t(layer) == layers.size() && count == layout.layer_params[std::size_t(layer)]);
      layers.emplace_back(count, -1.0f);
      return std::span<float>(layers.back());
    });
  } catch (const FileFormatError&) {
    read = false;
  }
  FUZZ_CHECK(checked == read);
  if (!read) return 0;

  // Accepted: header, counts, then every layer's values, nothing after.
  std::uint32_t storage;
  std::memcpy(&storage, data + 48, sizeof storage);
  FUZZ_CHECK(storage <= 1);
  std::size_t offset = 56 + 8 * layout.layer_params.size();
  for (const std::vector<float>& values : layers) {
    for (float value : values) {
      std::uint32_t bits;
      if (storage == 0) {
        std::memcpy(&bits, data + offset, sizeof bits);
        offset += 4;
      } else {
        bf16_bits half;
        std::memcpy(&half, data + offset, sizeof half);
        bits = std::uint32_t(half) << 16;
        offset += 2;
      }
      FUZZ_CHECK(std::memcmp(&bits, &value, sizeof bits) == 0);
    }
  }
  FUZZ_CHECK(offset == size);
  return 0;
}
