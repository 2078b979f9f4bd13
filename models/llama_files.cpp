#include "models/llama_files.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "tasks/nn_llama_kernels.hpp"

namespace starzero {

namespace {

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

}  // namespace

LlmcHeaderWords llama_checkpoint_header(const LlamaShape& s, int version) {
  LlmcHeaderWords header{};
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

LlamaShape llama_shape_from_header(const LlmcHeaderWords& h, const std::filesystem::path& path) {
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
  check_llmc_shape(path, s);
  return s;
}

LlmcHeaderWords LlamaLlmcCodec::checkpoint_header(const LlamaShape& shape, int version,
                                                  const std::filesystem::path& path) {
  // What the file's header says must be what the shape is: a reader rebuilds H from it.
  const LlmcHeaderWords header = llama_checkpoint_header(shape, version);
  if (!llama_shape_from_header(header, path).same_model(shape))
    throw std::invalid_argument("checkpoint " + path.string() + ": llm.c's header cannot describe " +
                                shape.to_string() + " (ffn_dim_multiplier " + std::to_string(shape.ffn_dim_multiplier) +
                                ", multiple_of " + std::to_string(shape.multiple_of) + ")");
  return header;
}

}  // namespace starzero
