#include "models/llmc_format.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <stdexcept>

#include "runtime/dtype.hpp"

namespace starzero {

static_assert(std::endian::native == std::endian::little,
              "llm.c files are little-endian; a big-endian host would need byte swapping");

namespace {

void check_pieces(std::size_t count, const std::filesystem::path& path, const std::string& shape,
                  std::span<const std::size_t> pieces) {
  std::size_t total = 0;
  for (std::size_t n : pieces) total += n;
  if (total != count)
    throw std::invalid_argument("checkpoint " + path.string() + ": pieces of " + std::to_string(total) +
                                " parameters, shape " + shape + " has " + std::to_string(count));
}

}  // namespace

void read_llmc_params(FileReader& in, bool bf16, std::span<float> out) {
  if (!bf16) return in.read_exact(out.data(), out.size() * sizeof(float));
  std::vector<bf16_bits> chunk(std::min<std::size_t>(std::max<std::size_t>(out.size(), 1), std::size_t(1) << 20));
  for (std::size_t done = 0; done < out.size();) {
    const std::size_t n = std::min(chunk.size(), out.size() - done);
    in.read_exact(chunk.data(), n * sizeof(bf16_bits));
    for (std::size_t i = 0; i < n; ++i) out[done + i] = bf16_to_float(chunk[i]);
    done += n;
  }
}

void read_llmc_param_pieces(FileReader& in, bool bf16, std::size_t count, const std::filesystem::path& path,
                            const std::string& shape,
                            const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                            std::span<const std::size_t> pieces) {
  check_pieces(count, path, shape, pieces);
  std::size_t offset = 0;
  for (std::size_t n : pieces) {
    const std::span<float> out = destination(offset, n);
    if (out.size() != n)
      throw std::invalid_argument("checkpoint " + path.string() + ": a destination of the wrong size");
    read_llmc_params(in, bf16, out);
    offset += n;
  }
}

std::vector<std::size_t> llmc_param_pieces(std::size_t count) {
  std::vector<std::size_t> pieces;
  for (std::size_t done = 0; done < count; done += pieces.back())
    pieces.push_back(std::min<std::size_t>(count - done, std::size_t(1) << 20));
  return pieces;
}

void write_llmc_params_file(const std::filesystem::path& path, std::span<const std::byte> header, bool bf16,
                            std::size_t count, const std::string& shape,
                            const std::function<void(std::size_t, std::span<float>)>& fill,
                            std::span<const std::size_t> pieces) {
  check_pieces(count, path, shape, pieces);
  const std::size_t largest = pieces.empty() ? 0 : *std::max_element(pieces.begin(), pieces.end());
  write_file_atomically(path, [&](std::ostream& os) {
    write_bytes(os, header.data(), header.size());
    std::vector<float> values(largest);
    std::vector<bf16_bits> halves(bf16 ? largest : 0);
    std::size_t offset = 0;
    for (std::size_t n : pieces) {
      const std::span<float> piece(values.data(), n);
      fill(offset, piece);
      if (!bf16) {
        write_bytes(os, piece.data(), piece.size_bytes());
      } else {
        std::transform(piece.begin(), piece.end(), halves.begin(), float_to_bf16);
        write_bytes(os, halves.data(), n * sizeof(bf16_bits));
      }
      offset += n;
    }
  });
}

// ---- headers and token shards -------------------------------------------------------------------

LlmcHeaderWords read_llmc_header(FileReader& in, std::int32_t magic, std::string_view name,
                                 std::span<const LlmcOtherMagic> others) {
  const std::filesystem::path& path = in.path();
  if (in.size() < kLlmcHeaderBytes)
    throw_format_error(path, "truncated header: file has " + std::to_string(in.size()) + " bytes, the header needs " +
                                 std::to_string(kLlmcHeaderBytes));
  LlmcHeaderWords header{};
  in.read_exact(header.data(), kLlmcHeaderBytes);
  if (header[0] != magic) {
    std::string message = "wrong magic " + std::to_string(header[0]) + " (an " + std::string(name) + " has " +
                          std::to_string(magic) + ")";
    for (const LlmcOtherMagic& other : others)
      if (header[0] == other.magic) message += ": this is a " + std::string(other.is);
    throw_format_error(path, message);
  }
  return header;
}

void check_llmc_checkpoint_version(const std::filesystem::path& path, int version) {
  if (version != 3 && version != 5)
    throw_format_error(path, "unknown version " + std::to_string(version) + " (known: 3 = fp32, 5 = bf16)");
}

void check_llmc_checkpoint_size(const FileReader& in, int version, std::size_t count, const std::string& shape) {
  const std::size_t elem = version == 3 ? sizeof(float) : sizeof(bf16_bits);
  const std::size_t need = kLlmcHeaderBytes + count * elem;
  if (in.size() != need) throw_format_error(in.path(), describe_size_mismatch(in.size(), need, "shape " + shape));
}

void check_llmc_write_version(std::string_view name, int version) {
  if (version != 3 && version != 5)
    throw std::invalid_argument(std::string(name) + " checkpoint version must be 3 (fp32) or 5 (bf16), not " +
                                std::to_string(version));
}

void check_llmc_param_count(const std::filesystem::path& path, std::size_t given, std::size_t count,
                            const std::string& shape) {
  if (given != count)
    throw std::invalid_argument("checkpoint " + path.string() + ": " + std::to_string(given) +
                                " parameters given, shape " + shape + " has " + std::to_string(count));
}

std::size_t llmc_token_count(const FileReader& in, const LlmcHeaderWords& header, std::int32_t version,
                             std::size_t token_bytes) {
  const std::filesystem::path& path = in.path();
  if (header[1] != version)
    throw_format_error(path, "unknown version " + std::to_string(header[1]) + " (known: " + std::to_string(version) + ")");
  if (header[2] < 0) throw_format_error(path, "negative token count " + std::to_string(header[2]));
  const std::size_t count = std::size_t(header[2]);
  const std::size_t need = kLlmcHeaderBytes + count * token_bytes;
  if (in.size() != need)
    throw_format_error(path, "token count " + std::to_string(count) + " inconsistent with the file size: " +
                                 describe_size_mismatch(in.size(), need, "the header"));
  return count;
}

void write_llmc_token_file(const std::filesystem::path& path, std::int32_t magic, std::int32_t version,
                           std::span<const std::byte> tokens, std::size_t count) {
  if (count > std::size_t(INT32_MAX))
    throw std::invalid_argument("token shard " + path.string() + ": " + std::to_string(count) +
                                " tokens do not fit the int32 count of the header");
  write_file_atomically(path, [&](std::ostream& os) {
    LlmcHeaderWords header{};
    header[0] = magic;
    header[1] = version;
    header[2] = std::int32_t(count);
    write_bytes(os, header.data(), sizeof header);
    write_bytes(os, tokens.data(), tokens.size());
  });
}

std::int32_t file_magic(const std::filesystem::path& path) {
  FileReader in(path);
  if (in.size() < sizeof(std::int32_t)) return 0;
  return in.read_value<std::int32_t>();
}

}  // namespace starzero
