#pragma once
// A loss-mask shard, beside a token shard NAME.bin as NAME.mask: one value per token, 1 when the
// token is learned as a target (predicted from those before it), 0 when it is not (a prompt's).
// Layout: 256 int32 header [0] magic 20261207, [1] version 1, [2] count; then `count` uint8 values.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace starzero {

inline constexpr std::int32_t kMaskShardMagic = 20261207;
inline constexpr std::int32_t kMaskShardVersion = 1;

// Written atomically; std::invalid_argument for a value other than 0 or 1 or a count over int32.
void write_mask_shard(const std::filesystem::path& path, std::span<const std::uint8_t> counted);
// The header's count, checked against the file's size (FileFormatError naming the file otherwise).
std::size_t read_mask_shard_count(const std::filesystem::path& path);
// Values [offset, offset + out.size()), read by offset; FileFormatError past the end or for a value
// other than 0 or 1.
void read_mask_range(const std::filesystem::path& path, std::size_t offset, std::span<std::uint8_t> out);

}  // namespace starzero
