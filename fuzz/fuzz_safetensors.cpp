// libFuzzer harness: Hugging Face safetensors files (models/safetensors.hpp). The input is the
// file. The reader may only reject it with FileFormatError; a file it accepts has tensors that
// tile the data region exactly, each readable, and it round trips through the writer: the same
// names, dtypes, shapes and values (NaNs as NaNs) and metadata, read back from the written file.
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/safetensors.hpp"

using namespace starzero;

namespace {

bool same_value(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = fuzz::scratch_dir() / "input.safetensors";
  fuzz::write_input(path, data, size);
  std::optional<SafetensorsFile> file;
  try {
    file.emplace(path);
  } catch (const FileFormatError&) {
    return 0;
  }
  // The tensors tile [0, data bytes) in order; the data region ends the file.
  std::uint64_t at = 0;
  std::size_t elements = 0;
  for (const SafeTensorInfo& t : file->tensors()) {
    FUZZ_CHECK(t.begin == at && t.end >= t.begin);
    FUZZ_CHECK(t.end - t.begin == t.count() * safetensors_dtype_size(t.dtype));
    FUZZ_CHECK(file->find(t.name) == &t);
    at = t.end;
    elements += t.count();
  }
  if (elements > (std::size_t(1) << 22)) return 0;  // the file is that big: keep a run's memory small
  std::vector<std::vector<float>> values;
  std::vector<SafeTensorSpec> specs;
  for (const SafeTensorInfo& t : file->tensors()) {
    values.emplace_back(t.count());
    file->read(t, values.back());
    specs.push_back({t.name, t.dtype, t.shape});
  }
  const std::filesystem::path copy = fuzz::scratch_dir() / "copy.safetensors";
  write_safetensors(copy, specs, file->metadata(), [&](std::size_t i, std::span<float> out) {
    std::copy(values[i].begin(), values[i].end(), out.begin());
  });
  const SafetensorsFile back(copy);
  FUZZ_CHECK(back.metadata() == file->metadata());
  FUZZ_CHECK(back.tensors().size() == file->tensors().size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const SafeTensorInfo* t = back.find(specs[i].name);
    FUZZ_CHECK(t != nullptr && t->dtype == specs[i].dtype && t->shape == specs[i].shape);
    std::vector<float> again(t->count());
    back.read(*t, again);
    for (std::size_t k = 0; k < again.size(); ++k) FUZZ_CHECK(same_value(again[k], values[i][k]));
  }
  return 0;
}
