#include "models/layer_checkpoint.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "runtime/dtype.hpp"
#include "runtime/files.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[4] = {'S', 'Z', 'C', 'K'};
constexpr std::size_t kFamilyChars = 16;

struct Header {
  char magic[4];
  std::uint32_t version;
  char family[kFamilyChars];
  std::int32_t shape[6];
  std::uint32_t storage;  // 0 fp32, 1 bf16
  std::uint32_t layers;
};
static_assert(sizeof(Header) == 56);

Header read_header(FileReader& in) {
  const Header header = in.read_value<Header>();
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0)
    throw_format_error(in.path(), "not a starzero layer checkpoint (bad magic)");
  if (header.version != kLayerCheckpointVersion)
    throw_format_error(in.path(), "unsupported version " + std::to_string(header.version));
  return header;
}

}  // namespace

LayerCheckpointHeader read_layer_checkpoint_header(const fs::path& path) {
  FileReader in(path);
  const Header header = read_header(in);
  LayerCheckpointHeader out;
  out.family.assign(header.family, strnlen(header.family, kFamilyChars));
  std::copy(std::begin(header.shape), std::end(header.shape), out.shape_fields.begin());
  return out;
}

LayerCheckpointFormat::LayerCheckpointFormat(std::string family, StateLayout layout)
    : family_(std::move(family)), layout_(std::move(layout)) {
  if (family_.empty() || family_.size() >= kFamilyChars)
    throw std::invalid_argument("model family name must have 1.." + std::to_string(kFamilyChars - 1) + " characters");
}

std::string LayerCheckpointFormat::describe(DType precision) const {
  return std::string("starzero layer checkpoint, ") + (precision == DType::f32 ? "fp32" : "bf16");
}

void LayerCheckpointFormat::write(const fs::path& path, const LayerSource& source, DType precision) const {
  if (precision != DType::f32 && precision != DType::bf16)
    throw std::invalid_argument("a layer checkpoint stores fp32 or bf16");
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.version = kLayerCheckpointVersion;
  std::copy(family_.begin(), family_.end(), header.family);
  std::copy(layout_.shape_fields.begin(), layout_.shape_fields.end(), header.shape);
  header.storage = precision == DType::f32 ? 0 : 1;
  header.layers = std::uint32_t(layout_.layer_params.size());
  write_file_atomically(path, [&](std::ostream& os) {
    os.write(reinterpret_cast<const char*>(&header), sizeof header);
    for (std::size_t count : layout_.layer_params) {
      const std::uint64_t n = count;
      os.write(reinterpret_cast<const char*>(&n), sizeof n);
    }
    for (std::size_t l = 0; l < layout_.layer_params.size(); ++l) {
      std::vector<float> values(layout_.layer_params[l]);
      source(int(l), 0, values);
      if (precision == DType::f32) {
        os.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
        continue;
      }
      std::vector<bf16_bits> halves(values.size());
      std::transform(values.begin(), values.end(), halves.begin(), float_to_bf16);
      os.write(reinterpret_cast<const char*>(halves.data()), std::streamsize(halves.size() * sizeof(bf16_bits)));
    }
  });
}

// Checks the header, the layer counts and the file's size against the format; `in` is left at
// the first value. Returns the storage (0: fp32, 1: bf16).
std::uint32_t LayerCheckpointFormat::read_checked_header(FileReader& in) const {
  const fs::path& path = in.path();
  const Header header = read_header(in);
  const std::string family(header.family, strnlen(header.family, kFamilyChars));
  if (family != family_) throw_format_error(path, "a checkpoint of model '" + family + "', not '" + family_ + "'");
  if (!std::equal(layout_.shape_fields.begin(), layout_.shape_fields.end(), header.shape))
    throw_format_error(path, "shape fields differ from the model's");
  if (header.storage > 1) throw_format_error(path, "unknown storage " + std::to_string(header.storage));
  if (header.layers != layout_.layer_params.size())
    throw_format_error(
        path, std::to_string(header.layers) + " layers, expected " + std::to_string(layout_.layer_params.size()));
  std::vector<std::uint64_t> counts(header.layers);
  in.read_exact(counts.data(), counts.size() * sizeof(std::uint64_t));
  const std::size_t value_bytes = header.storage == 0 ? sizeof(float) : sizeof(bf16_bits);
  std::size_t expected_size = sizeof(Header) + counts.size() * sizeof(std::uint64_t);
  for (std::size_t l = 0; l < counts.size(); ++l) {
    if (counts[l] != layout_.layer_params[l])
      throw_format_error(path, "layer " + std::to_string(l) + " has " + std::to_string(counts[l]) +
                                   " parameters, expected " + std::to_string(layout_.layer_params[l]));
    expected_size += layout_.layer_params[l] * value_bytes;
  }
  // The whole size is checked before any layer is read.
  if (in.size() != expected_size)
    throw_format_error(path, describe_size_mismatch(in.size(), expected_size, "the layer checkpoint"));
  return header.storage;
}

void LayerCheckpointFormat::check(const fs::path& path) const {
  FileReader in(path);
  read_checked_header(in);
}

DType LayerCheckpointFormat::stored_precision(const fs::path& path) const {
  FileReader in(path);
  return read_checked_header(in) == 1 ? DType::bf16 : DType::f32;
}

void LayerCheckpointFormat::read(const fs::path& path, const LayerDestination& destination) const {
  FileReader in(path);
  const std::uint32_t storage = read_checked_header(in);
  for (std::size_t l = 0; l < layout_.layer_params.size(); ++l) {
    const std::span<float> values = destination(int(l), layout_.layer_params[l]);
    if (storage == 0) {
      in.read_exact(values.data(), values.size() * sizeof(float));
    } else {
      std::vector<bf16_bits> halves(values.size());
      in.read_exact(halves.data(), halves.size() * sizeof(bf16_bits));
      std::transform(halves.begin(), halves.end(), values.begin(), bf16_to_float);
    }
  }
}

bool is_layer_checkpoint(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, sizeof magic);
  return in && std::memcmp(magic, kMagic, sizeof kMagic) == 0;
}

}  // namespace starzero
