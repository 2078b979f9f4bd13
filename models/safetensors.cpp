#include "models/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "runtime/dtype.hpp"

namespace starzero {

namespace fs = std::filesystem;
using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors are little-endian, as this code assumes");

const char* safetensors_dtype_name(SafeDType dtype) {
  return dtype == SafeDType::f32 ? "F32" : dtype == SafeDType::bf16 ? "BF16" : "F16";
}

std::size_t safetensors_dtype_size(SafeDType dtype) { return dtype == SafeDType::f32 ? 4 : 2; }

std::size_t SafeTensorInfo::count() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa · 2^-24, exact in fp32.
  const float magnitude = float(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

std::uint16_t float_to_half(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);  // NaN
  if (magnitude >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // rounds past 65504: inf
  if (magnitude < 0x38800000u) {                                       // below 2^-14: subnormal half
    const float scaled = std::bit_cast<float>(magnitude) * 0x1p24f;      // exact; rint: nearest even
    return std::uint16_t(sign | std::uint16_t(std::nearbyint(scaled)));
  }
  const std::uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return std::uint16_t(sign | ((rounded - (112u << 23)) >> 13));
}

namespace {

SafeDType parse_dtype(const fs::path& path, const std::string& name, const json& value) {
  if (!value.is_string()) throw_format_error(path, "tensor '" + name + "': dtype is not a string");
  const std::string dtype = value.get<std::string>();
  if (dtype == "F32") return SafeDType::f32;
  if (dtype == "BF16") return SafeDType::bf16;
  if (dtype == "F16") return SafeDType::f16;
  throw_format_error(path, "tensor '" + name + "': dtype '" + dtype + "' is not F32, BF16 or F16");
}

std::uint64_t parse_unsigned(const fs::path& path, const std::string& what, const json& value) {
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<std::int64_t>() >= 0))
    throw_format_error(path, what + " is not a non-negative integer");
  return value.get<std::uint64_t>();
}

SafeTensorInfo parse_tensor(const fs::path& path, const std::string& name, const json& entry) {
  if (!entry.is_object()) throw_format_error(path, "tensor '" + name + "' is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) throw_format_error(path, "tensor '" + name + "' has no " + key);
  SafeTensorInfo info;
  info.name = name;
  info.dtype = parse_dtype(path, name, entry["dtype"]);
  const json& shape = entry["shape"];
  if (!shape.is_array() || shape.size() > 8) throw_format_error(path, "tensor '" + name + "': shape is not an array of up to 8 sizes");
  // The byte span the shape needs, checked against overflow before it is compared.
  std::uint64_t bytes = safetensors_dtype_size(info.dtype);
  for (const json& d : shape) {
    const std::uint64_t size = parse_unsigned(path, "tensor '" + name + "': a shape entry", d);
    if (size != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / size)
      throw_format_error(path, "tensor '" + name + "': shape overflows");
    bytes *= size;
    info.shape.push_back(std::size_t(size));
  }
  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    throw_format_error(path, "tensor '" + name + "': data_offsets is not [begin, end]");
  info.begin = parse_unsigned(path, "tensor '" + name + "': data_offsets[0]", offsets[0]);
  info.end = parse_unsigned(path, "tensor '" + name + "': data_offsets[1]", offsets[1]);
  if (info.end < info.begin) throw_format_error(path, "tensor '" + name + "': data_offsets end before begin");
  if (info.end - info.begin != bytes)
    throw_format_error(path, "tensor '" + name + "': data_offsets span " + std::to_string(info.end - info.begin) +
                                 " bytes, its dtype and shape need " + std::to_string(bytes));
  return info;
}

std::map<std::string, std::string> parse_metadata(const fs::path& path, const json& value) {
  if (!value.is_object()) throw_format_error(path, "__metadata__ is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, text] : value.items()) {
    if (!text.is_string()) throw_format_error(path, "__metadata__ '" + key + "' is not a string");
    metadata[key] = text.get<std::string>();
  }
  return metadata;
}

// The tensors sorted by offset must tile [0, data_bytes): no overlap, no gap, nothing past the end.
void check_tiling(const fs::path& path, const std::vector<SafeTensorInfo>& tensors, std::uint64_t data_bytes) {
  std::uint64_t at = 0;
  const SafeTensorInfo* previous = nullptr;
  for (const SafeTensorInfo& t : tensors) {
    if (t.end > data_bytes)
      throw_format_error(path, "tensor '" + t.name + "': data_offsets [" + std::to_string(t.begin) + ", " +
                                   std::to_string(t.end) + ") out of range: the data region has " +
                                   std::to_string(data_bytes) + " bytes");
    if (t.begin < at)
      throw_format_error(path, "tensors '" + previous->name + "' and '" + t.name + "' overlap");
    if (t.begin > at) throw_format_error(path, "a gap of " + std::to_string(t.begin - at) + " bytes before tensor '" + t.name + "'");
    at = t.end;
    if (t.end > t.begin) previous = &t;
  }
  if (at != data_bytes)
    throw_format_error(path, describe_size_mismatch(data_bytes, at, "the tensors' data region") );
}

}  // namespace

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path) {
  FileReader reader(path);
  if (reader.size() < 8) throw_format_error(path, "shorter than the 8-byte header length");
  const std::uint64_t header_bytes = reader.read_value<std::uint64_t>();
  if (header_bytes > kSafetensorsMaxHeader)
    throw_format_error(path, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                                 std::to_string(kSafetensorsMaxHeader) + " bytes");
  if (header_bytes > reader.size() - 8)
    throw_format_error(path, "header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                                 std::to_string(reader.size()) + " bytes)");
  std::string text(header_bytes, '\0');
  reader.read_exact(text.data(), text.size());
  data_start_ = 8 + header_bytes;
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    throw_format_error(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw_format_error(path, "header is not a JSON object");
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__")
      metadata_ = parse_metadata(path, entry);
    else
      tensors_.push_back(parse_tensor(path, name, entry));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const SafeTensorInfo& a, const SafeTensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_tiling(path, tensors_, reader.size() - data_start_);
  for (std::size_t i = 0; i < tensors_.size(); ++i) by_name_[tensors_[i].name] = i;
}

const SafeTensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::read(const SafeTensorInfo& tensor, std::span<float> out) const {
  if (out.size() != tensor.count()) throw std::invalid_argument("SafetensorsFile::read: wrong output size");
  const std::size_t element = safetensors_dtype_size(tensor.dtype);
  constexpr std::size_t kChunk = std::size_t(1) << 20;  // elements per read
  std::vector<char> bytes;
  for (std::size_t first = 0; first < out.size(); first += kChunk) {
    const std::size_t n = std::min(kChunk, out.size() - first);
    bytes.resize(n * element);
    read_file_at(path_, data_start_ + tensor.begin + first * element, bytes.data(), bytes.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (tensor.dtype == SafeDType::f32) {
        std::memcpy(&out[first + i], bytes.data() + 4 * i, 4);
        continue;
      }
      std::uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[first + i] = tensor.dtype == SafeDType::bf16 ? bf16_to_float(h) : half_to_float(h);
    }
  }
}

namespace {

std::string header_text(const std::vector<SafeTensorSpec>& tensors, const std::map<std::string, std::string>& metadata) {
  // Built by hand to keep the tensors in the given order (nlohmann's objects sort their keys).
  std::string text = "{";
  if (!metadata.empty()) text += "\"__metadata__\":" + json(metadata).dump();
  std::uint64_t at = 0;
  for (const SafeTensorSpec& t : tensors) {
    std::uint64_t bytes = safetensors_dtype_size(t.dtype);
    for (std::size_t d : t.shape) bytes *= d;
    json entry = {{"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    text += (text.size() > 1 ? "," : "") + json(t.name).dump() + ":" + entry.dump();
    at += bytes;
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

void write_safetensors(const fs::path& path, const std::vector<SafeTensorSpec>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(std::size_t, std::span<float>)>& fill) {
  const std::string header = header_text(tensors, metadata);
  write_file_atomically(path, [&](std::ostream& os) {
    const std::uint64_t length = header.size();
    write_bytes(os, &length, 8);
    write_bytes(os, header.data(), header.size());
    std::vector<float> values;
    std::vector<std::uint16_t> narrow;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      std::size_t count = 1;
      for (std::size_t d : tensors[i].shape) count *= d;
      values.assign(count, 0.0f);
      fill(i, values);
      if (tensors[i].dtype == SafeDType::f32) {
        write_bytes(os, values.data(), values.size() * 4);
        continue;
      }
      narrow.resize(count);
      for (std::size_t k = 0; k < count; ++k)
        narrow[k] = tensors[i].dtype == SafeDType::bf16 ? float_to_bf16(values[k]) : float_to_half(values[k]);
      write_bytes(os, narrow.data(), narrow.size() * 2);
    }
  });
}

}  // namespace starzero
