#include "models/llama_files.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <string>

#include "models/llmc_params.hpp"
#include "runtime/dtype.hpp"
#include "tasks/llama_kernels.hpp"

namespace starzero {

static_assert(std::endian::native == std::endian::little,
              "llm.c files are little-endian; a big-endian host would need byte swapping");

namespace {

constexpr std::size_t kHeaderBytes = kLlamaHeaderInts * sizeof(std::int32_t);
constexpr std::int32_t kMaxGenBatchSize = 4;  // llm.c's LlamaConfig default

// Meta's published Llama 3 models: what their header fields stand for. Keyed by version and
// width; the header's truncated ffn_dim_multiplier and multiple_of are checked against them.
struct KnownModel {
  int major, minor, channels, heads, kv_heads;
  float ffn_dim_multiplier;
  int multiple_of;
  const char* name;
};
constexpr KnownModel kKnownModels[] = {
    {3, 0, 4096, 32, 8, 1.3f, 1024, "Llama 3 8B"},       {3, 0, 8192, 64, 8, 1.3f, 4096, "Llama 3 70B"},
    {3, 1, 4096, 32, 8, 1.3f, 1024, "Llama 3.1 8B"},     {3, 1, 8192, 64, 8, 1.3f, 4096, "Llama 3.1 70B"},
    {3, 1, 16384, 128, 8, 1.2f, 4096, "Llama 3.1 405B"}, {3, 2, 2048, 32, 8, 1.5f, 256, "Llama 3.2 1B"},
    {3, 2, 3072, 24, 8, 1.0f, 256, "Llama 3.2 3B"},
};

// A float field as train_llama3.py stores it in the int32 header: truncated toward zero; saturated
// at int32's range (a float cannot hold 2^31 - 1: a rope_theta read from a header of 2147483647 is
// 2^31 and is written back as 2147483647), NaN as 0.
std::int32_t header_int(float value) {
  if (std::isnan(value)) return 0;
  if (value >= 2147483648.0f) return INT32_MAX;
  if (value <= -2147483648.0f) return INT32_MIN;
  return std::int32_t(value);
}

std::string field(const char* name, std::int32_t value) { return std::string(name) + " " + std::to_string(value); }

// Reads and checks the header and the file's size; `in` is left at the first parameter.
LlamaCheckpoint read_header(FileReader& in, const LlamaShape* expected) {
  const std::filesystem::path& path = in.path();
  if (in.size() < kHeaderBytes)
    throw_format_error(path, "truncated header: file has " + std::to_string(in.size()) + " bytes, the header needs " +
                                 std::to_string(kHeaderBytes));
  LlamaHeader header{};
  in.read_exact(header.data(), kHeaderBytes);
  if (header[0] != kLlamaCheckpointMagic)
    throw_format_error(path, "wrong magic " + std::to_string(header[0]) + " (an llm.c Llama 3 checkpoint has " +
                                 std::to_string(kLlamaCheckpointMagic) + ")" +
                                 (header[0] == 20240326 ? ": this is a GPT-2 checkpoint" : "") +
                                 (header[0] == kLlamaTokenMagic ? ": this is a token shard" : ""));
  const int version = header[1];
  if (version != kLlamaCheckpointFp32 && version != kLlamaCheckpointBf16)
    throw_format_error(path, "unknown version " + std::to_string(version) + " (known: 3 = fp32, 5 = bf16)");
  LlamaCheckpoint ckpt;
  ckpt.version = version;
  ckpt.shape = llama_shape_from_header(header, path);
  if (expected && !ckpt.shape.same_model(*expected))
    throw_format_error(path,
                       "shape mismatch: file has " + ckpt.shape.to_string() + ", expected " + expected->to_string());
  const std::size_t elem = version == kLlamaCheckpointFp32 ? sizeof(float) : sizeof(bf16_bits);
  const std::size_t need = kHeaderBytes + ckpt.shape.param_count() * elem;
  if (in.size() != need)
    throw_format_error(path, describe_size_mismatch(in.size(), need, "shape " + ckpt.shape.to_string()));
  return ckpt;
}

}  // namespace

LlamaHeader llama_checkpoint_header(const LlamaShape& s, int version) {
  LlamaHeader header{};
  header[0] = kLlamaCheckpointMagic;
  header[1] = version;
  header[2] = s.max_seq;
  header[3] = s.vocab;
  header[4] = s.layers;
  header[5] = s.heads;
  header[6] = s.kv_heads;
  header[7] = s.channels;
  // As train_llama3.py: float fields assigned to int32 (truncated toward zero, header_int).
  header[8] = header_int(s.ffn_dim_multiplier);
  header[9] = s.multiple_of;
  header[10] = header_int(s.norm_eps);
  header[11] = header_int(s.rope_theta);
  header[12] = s.use_scaled_rope ? 1 : 0;
  header[13] = kMaxGenBatchSize;
  header[14] = s.major_version;
  header[15] = s.minor_version;
  return header;
}

LlamaShape llama_shape_from_header(const LlamaHeader& h, const std::filesystem::path& path) {
  LlamaShape s;
  s.max_seq = h[2];
  s.vocab = h[3];
  s.layers = h[4];
  s.heads = h[5];
  s.kv_heads = h[6];
  s.channels = h[7];
  s.multiple_of = h[9];
  s.major_version = h[14];
  s.minor_version = h[15];
  if (s.major_version != 3 || s.minor_version < 0)
    throw_format_error(path, "inconsistent header: version " + std::to_string(s.major_version) + "." +
                                 std::to_string(s.minor_version) + " is no Llama 3");
  if (h[10] != 0)
    throw_format_error(path, "inconsistent header: " + field("norm_eps", h[10]) +
                                 " (llm.c stores int(1e-5) = 0; the model uses 1e-5)");
  s.norm_eps = 1e-5f;
  if (h[11] <= 0) throw_format_error(path, "inconsistent header: " + field("rope_theta", h[11]));
  s.rope_theta = float(h[11]);
  if (h[12] != 0 && h[12] != 1)
    throw_format_error(path, "inconsistent header: " + field("use_scaled_rope", h[12]) + " (0 or 1)");
  s.use_scaled_rope = h[12] == 1;
  if (s.multiple_of <= 0) throw_format_error(path, "inconsistent header: " + field("multiple_of", s.multiple_of));
  if (h[8] < 0) throw_format_error(path, "inconsistent header: " + field("ffn_dim_multiplier", h[8]));
  s.ffn_dim_multiplier = float(h[8]);
  for (const KnownModel& m : kKnownModels) {
    if (m.major != s.major_version || m.minor != s.minor_version || m.channels != s.channels || m.heads != s.heads ||
        m.kv_heads != s.kv_heads)
      continue;
    if (h[8] != std::int32_t(m.ffn_dim_multiplier) || h[9] != m.multiple_of)
      throw_format_error(path, "inconsistent header: " + field("ffn_dim_multiplier", h[8]) + ", " +
                                   field("multiple_of", h[9]) + ", but " + m.name + " has " +
                                   std::to_string(m.ffn_dim_multiplier) + " and " + std::to_string(m.multiple_of));
    s.ffn_dim_multiplier = m.ffn_dim_multiplier;
    break;
  }
  if (s.channels > 0 && s.channels <= INT_MAX / 4) {
    // llama_ffn_hidden returns its hidden size as an int without a check: refuse the fields for
    // which it could pass INT_MAX (it is at most max(multiplier, 1) · 8C/3 + multiple_of).
    if (double(std::max(s.ffn_dim_multiplier, 1.0f)) * (8.0 * s.channels / 3.0) + double(s.multiple_of) > INT_MAX)
      throw_format_error(path, "inconsistent header: " + field("n_embd", s.channels) + ", " +
                                   field("ffn_dim_multiplier", h[8]) + ", " + field("multiple_of", h[9]) +
                                   ": the feed-forward hidden size overflows int");
    s.ffn_hidden = kernels::llama_ffn_hidden(s.channels, s.ffn_dim_multiplier, s.multiple_of);
  }
  try {
    s.validate();
  } catch (const std::invalid_argument& e) {
    throw_format_error(path, std::string("invalid shape: ") + e.what());
  }
  return s;
}

LlamaCheckpoint read_llama_checkpoint_header(const std::filesystem::path& path) {
  FileReader in(path);
  return read_header(in, nullptr);
}

LlamaCheckpoint read_llama_checkpoint_header(const std::filesystem::path& path, const LlamaShape& expected) {
  FileReader in(path);
  return read_header(in, &expected);
}

LlamaCheckpoint read_llama_checkpoint(const std::filesystem::path& path) {
  FileReader in(path);
  LlamaCheckpoint ckpt = read_header(in, nullptr);
  ckpt.params.resize(ckpt.shape.param_count());
  read_llmc_params(in, ckpt.version == kLlamaCheckpointBf16, ckpt.params);
  return ckpt;
}

int read_llama_checkpoint_streamed(const std::filesystem::path& path, const LlamaShape& expected,
                                   const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                                   std::span<const std::size_t> pieces) {
  FileReader in(path);
  const LlamaCheckpoint header = read_header(in, &expected);
  read_llmc_param_pieces(in, header.version == kLlamaCheckpointBf16, header.shape.param_count(), path,
                         header.shape.to_string(), destination, pieces);
  return header.version;
}

void write_llama_checkpoint(const std::filesystem::path& path, const LlamaShape& shape, std::span<const float> params,
                            int version) {
  if (params.size() != shape.param_count())
    throw std::invalid_argument("checkpoint " + path.string() + ": " + std::to_string(params.size()) +
                                " parameters given, shape " + shape.to_string() + " has " +
                                std::to_string(shape.param_count()));
  const std::vector<std::size_t> pieces = llmc_param_pieces(params.size());
  write_llama_checkpoint_streamed(
      path, shape, version,
      [&](std::size_t offset, std::span<float> out) {
        std::copy_n(params.begin() + std::ptrdiff_t(offset), out.size(), out.begin());
      },
      pieces);
}

void write_llama_checkpoint_streamed(const std::filesystem::path& path, const LlamaShape& shape, int version,
                                     const std::function<void(std::size_t, std::span<float>)>& fill,
                                     std::span<const std::size_t> pieces) {
  shape.validate();
  if (version != kLlamaCheckpointFp32 && version != kLlamaCheckpointBf16)
    throw std::invalid_argument("llm.c Llama 3 checkpoint version must be 3 (fp32) or 5 (bf16), not " +
                                std::to_string(version));
  // What the file's header says must be what the shape is: a reader rebuilds H from it.
  const LlamaHeader header = llama_checkpoint_header(shape, version);
  if (!llama_shape_from_header(header, path).same_model(shape))
    throw std::invalid_argument("checkpoint " + path.string() + ": llm.c's header cannot describe " +
                                shape.to_string() + " (ffn_dim_multiplier " + std::to_string(shape.ffn_dim_multiplier) +
                                ", multiple_of " + std::to_string(shape.multiple_of) + ")");
  write_llmc_params_file(path, std::as_bytes(std::span(header)), version == kLlamaCheckpointBf16, shape.param_count(),
                         shape.to_string(), fill, pieces);
}

// ---- token shards -------------------------------------------------------------------------------

std::vector<std::uint32_t> read_llama_token_shard(const std::filesystem::path& path) {
  FileReader in(path);
  if (in.size() < kHeaderBytes)
    throw_format_error(path, "truncated header: file has " + std::to_string(in.size()) + " bytes, the header needs " +
                                 std::to_string(kHeaderBytes));
  LlamaHeader header{};
  in.read_exact(header.data(), kHeaderBytes);
  if (header[0] != kLlamaTokenMagic)
    throw_format_error(path, "wrong magic " + std::to_string(header[0]) + " (an llm.c Llama 3 token shard has " +
                                 std::to_string(kLlamaTokenMagic) + ")");
  if (header[1] != kLlamaTokenVersion)
    throw_format_error(path, "unknown version " + std::to_string(header[1]) + " (known: 7)");
  if (header[2] < 0) throw_format_error(path, "negative token count " + std::to_string(header[2]));
  const std::size_t count = std::size_t(header[2]);
  const std::size_t need = kHeaderBytes + count * sizeof(std::uint32_t);
  if (in.size() != need)
    throw_format_error(path, "token count " + std::to_string(count) + " inconsistent with the file size: " +
                                 describe_size_mismatch(in.size(), need, "the header"));
  std::vector<std::uint32_t> tokens(count);
  in.read_exact(tokens.data(), count * sizeof(std::uint32_t));
  return tokens;
}

void write_llama_token_shard(const std::filesystem::path& path, std::span<const std::uint32_t> tokens) {
  if (tokens.size() > std::size_t(INT32_MAX))
    throw std::invalid_argument("token shard " + path.string() + ": too many tokens for the int32 count");
  write_file_atomically(path, [&](std::ostream& os) {
    LlamaHeader header{};
    header[0] = kLlamaTokenMagic;
    header[1] = kLlamaTokenVersion;
    header[2] = std::int32_t(tokens.size());
    write_bytes(os, header.data(), sizeof header);
    write_bytes(os, tokens.data(), tokens.size_bytes());
  });
}

std::int32_t file_magic(const std::filesystem::path& path) {
  FileReader in(path);
  if (in.size() < sizeof(std::int32_t)) return 0;
  return in.read_value<std::int32_t>();
}

}  // namespace starzero
