#include "models/mask_shard.hpp"

#include <array>
#include <limits>
#include <stdexcept>
#include <string>

#include "models/llmc_format.hpp"
#include "runtime/files.hpp"

namespace starzero {

void write_mask_shard(const std::filesystem::path& path, std::span<const std::uint8_t> counted) {
  for (std::size_t i = 0; i < counted.size(); ++i)
    if (counted[i] > 1)
      throw std::invalid_argument("mask value " + std::to_string(counted[i]) + " at index " + std::to_string(i) +
                                  " is not 0 or 1");
  write_llmc_token_file(path, kMaskShardMagic, kMaskShardVersion, std::as_bytes(counted), counted.size());
}

std::size_t read_mask_shard_count(const std::filesystem::path& path) {
  FileReader in(path);
  if (in.size() < kLlmcHeaderBytes) throw_format_error(path, "shorter than the mask shard's 1024-byte header");
  std::array<std::int32_t, kLlmcHeaderWords> header{};
  in.read_exact(header.data(), kLlmcHeaderBytes);
  if (header[0] != kMaskShardMagic)
    throw_format_error(path, "not a loss-mask shard (magic " + std::to_string(header[0]) + ", expected " +
                                 std::to_string(kMaskShardMagic) + ")");
  if (header[1] != kMaskShardVersion)
    throw_format_error(path, "loss-mask shard version " + std::to_string(header[1]) + " (this build reads " +
                                 std::to_string(kMaskShardVersion) + ")");
  if (header[2] < 0) throw_format_error(path, "negative count " + std::to_string(header[2]));
  const std::size_t count = std::size_t(header[2]);
  if (in.size() != kLlmcHeaderBytes + count)
    throw_format_error(path, describe_size_mismatch(in.size(), kLlmcHeaderBytes + count,
                                                    "the header's " + std::to_string(count) + " mask values"));
  return count;
}

void read_mask_range(const std::filesystem::path& path, std::size_t offset, std::span<std::uint8_t> out) {
  read_file_at(path, kLlmcHeaderBytes + offset, out.data(), out.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i] > 1)
      throw_format_error(path, "mask value " + std::to_string(out[i]) + " at index " + std::to_string(offset + i) +
                                   " is not 0 or 1");
}

}  // namespace starzero
