#pragma once
// Loss-mask shards: beside each llm.c token shard DIR/train_000000.bin that `starzero tokenize`
// writes, DIR/train_000000.mask holds one value per token: 1 when the token is learned as a target
// (predicted from the tokens before it), 0 when it is not (a prompt token, the begin-of-text;
// models/jsonl_data.hpp). The format, little-endian as llm.c's:
//
//   256 int32 of header: [0] magic 20261207, [1] version 1, [2] count; the rest 0
//   then `count` uint8 values, each 0 or 1; the file is exactly 1024 + count bytes
//
// Readers never read a shard whole: read_mask_range reads one range at its offset. Every reader
// checks the header against the file's size and throws FileFormatError naming the file.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace starzero {

inline constexpr std::int32_t kMaskShardMagic = 20261207;
inline constexpr std::int32_t kMaskShardVersion = 1;

// Writes `counted` atomically (runtime/files.hpp). std::invalid_argument for a value other than
// 0 or 1, or more values than the int32 count holds.
void write_mask_shard(const std::filesystem::path& path, std::span<const std::uint8_t> counted);

// The count of the header, checked: FileFormatError naming the file for a file shorter than the
// header, another magic (a token shard's is named as such), another version, a negative count or
// a count that disagrees with the file's size.
std::size_t read_mask_shard_count(const std::filesystem::path& path);

// Values [offset, offset + out.size()) into `out`, read at their offset (the header is checked as
// read_mask_shard_count does). FileFormatError naming the file for a value other than 0 or 1;
// std::invalid_argument naming it for a range past the count.
void read_mask_range(const std::filesystem::path& path, std::size_t offset, std::span<std::uint8_t> out);

}  // namespace starzero
