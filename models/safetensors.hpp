#pragma once
// Hugging Face's safetensors files, host-side (no StarPU): an 8-byte little-endian header length
// N, N bytes of JSON header {"NAME": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {str: str}}, then the raw little-endian tensors (offsets from the first byte
// after the header).
//
// The reader checks the whole header against the file before it trusts any of it (the length
// against the file's size and a 100 MB cap, the JSON, each dtype, shape and span, that the
// tensors tile the data region without overlap or gap) and throws FileFormatError naming the
// file and what is wrong. Tensors are then read one at a time, never the whole file: F32 as is,
// BF16 and F16 widened exactly to fp32. The writer computes the header from the shapes up front
// and streams the tensors through write_file_atomically.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/files.hpp"

namespace starzero {

enum class SafeDType { f32, bf16, f16 };

// "F32", "BF16", "F16".
const char* safetensors_dtype_name(SafeDType dtype);
std::size_t safetensors_dtype_size(SafeDType dtype);

struct SafeTensorInfo {
  std::string name;
  SafeDType dtype = SafeDType::f32;
  std::vector<std::size_t> shape;
  std::uint64_t begin = 0, end = 0;  // bytes, from the start of the data region
  std::size_t count() const;         // elements (1 for shape [])
};

// Largest JSON header the reader accepts.
inline constexpr std::uint64_t kSafetensorsMaxHeader = 100u << 20;

class SafetensorsFile {
 public:
  // Reads and checks the header (FileFormatError naming `path`).
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }  // by data offset
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor named `name`, or null.
  const SafeTensorInfo* find(const std::string& name) const;
  // Its values, widened to fp32; out.size() must be tensor.count().
  void read(const SafeTensorInfo& tensor, std::span<float> out) const;

 private:
  std::filesystem::path path_;
  std::uint64_t data_start_ = 0;
  std::vector<SafeTensorInfo> tensors_;
  std::map<std::string, std::size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: its name, stored type and shape.
struct SafeTensorSpec {
  std::string name;
  SafeDType dtype = SafeDType::f32;
  std::vector<std::size_t> shape;
};

// Writes `path` atomically: the header (tensors in the given order, padded with spaces to a
// multiple of 8 bytes), then each tensor's values, which `fill(index, values)` sets in fp32
// (rounded to BF16/F16 to nearest even), one tensor in memory at a time.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafeTensorSpec>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(std::size_t, std::span<float>)>& fill);

// IEEE half <-> float (exact widening; narrowing rounds to nearest even).
float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);

}  // namespace starzero
