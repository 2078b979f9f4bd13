#pragma once
// The padded shard layout every sharded buffer uses: `count` elements split over `ranks` as
// shards of shard_count(count, ranks) = ceil(count / ranks) elements, padded to ranks·shard;
// rank r owns elements [r·shard, (r+1)·shard). (No MPI here: file formats use it too.)
#include <cstddef>

namespace starzero {

inline std::size_t shard_count(std::size_t count, std::size_t ranks) { return (count + ranks - 1) / ranks; }

}  // namespace starzero
