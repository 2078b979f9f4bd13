#include "models/mask_shard.hpp"

#include <array>
#include <climits>
#include <stdexcept>
#include <string>

#include "models/llmc_format.hpp"
#include "runtime/files.hpp"

namespace starzero {

namespace {

// The llm.c token shards a mask shard may be taken for.
constexpr std::array<LlmcOtherMagic, 2> kNotMaskShard{{{20240520, "GPT-2 token shard"}, {20240801, "Llama 3 token shard"}}};

std::size_t checked_count(FileReader& in) {
  const std::filesystem::path& path = in.path();
  if (in.size() < kLlmcHeaderBytes)
    throw_format_error(path, "truncated mask shard header: file has " + std::to_string(in.size()) +
                                 " bytes, the header needs " + std::to_string(kLlmcHeaderBytes));
  LlmcHeaderWords header{};
  in.read_exact(header.data(), kLlmcHeaderBytes);
  if (header[0] != kMaskShardMagic) {
    std::string message = "wrong magic " + std::to_string(header[0]) + " (a mask shard has " +
                          std::to_string(kMaskShardMagic) + ")";
    for (const LlmcOtherMagic& other : kNotMaskShard)
      if (header[0] == other.magic) message += ": this is a " + std::string(other.is) + ", not its mask";
    throw_format_error(path, message);
  }
  if (header[1] != kMaskShardVersion)
    throw_format_error(path, "unknown mask shard version " + std::to_string(header[1]) + " (known: " +
                                 std::to_string(kMaskShardVersion) + ")");
  if (header[2] < 0) throw_format_error(path, "negative mask count " + std::to_string(header[2]));
  const std::size_t count = std::size_t(header[2]);
  if (in.size() != kLlmcHeaderBytes + count)
    throw_format_error(path, "mask count " + std::to_string(count) + " inconsistent with the file size: " +
                                 describe_size_mismatch(in.size(), kLlmcHeaderBytes + count, "the header"));
  return count;
}

}  // namespace

void write_mask_shard(const std::filesystem::path& path, std::span<const std::uint8_t> counted) {
  if (counted.size() > std::size_t(INT32_MAX))
    throw std::invalid_argument("mask shard " + path.string() + ": " + std::to_string(counted.size()) +
                                " values do not fit the int32 count of the header");
  for (std::size_t i = 0; i < counted.size(); ++i)
    if (counted[i] > 1)
      throw std::invalid_argument("mask shard " + path.string() + ": value " + std::to_string(counted[i]) +
                                  " at " + std::to_string(i) + " is neither 0 nor 1");
  write_file_atomically(path, [&](std::ostream& os) {
    LlmcHeaderWords header{};
    header[0] = kMaskShardMagic;
    header[1] = kMaskShardVersion;
    header[2] = std::int32_t(counted.size());
    write_bytes(os, header.data(), sizeof header);
    write_bytes(os, counted.data(), counted.size());
  });
}

std::size_t read_mask_shard_count(const std::filesystem::path& path) {
  FileReader in(path);
  return checked_count(in);
}

void read_mask_range(const std::filesystem::path& path, std::size_t offset, std::span<std::uint8_t> out) {
  std::size_t count = 0;
  {
    FileReader in(path);
    count = checked_count(in);
  }
  if (offset > count || out.size() > count - offset)
    throw std::invalid_argument("mask shard " + path.string() + ": values [" + std::to_string(offset) + ", " +
                                std::to_string(offset + out.size()) + ") are past its " + std::to_string(count));
  if (out.empty()) return;
  read_file_at(path, kLlmcHeaderBytes + offset, out.data(), out.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i] > 1)
      throw_format_error(path, "mask value " + std::to_string(out[i]) + " at " + std::to_string(offset + i) +
                                   " is neither 0 nor 1");
}

}  // namespace starzero
