#pragma once
// Tiles of a micro-batch (`--tiles N`): groups of whole sequences, since attention needs whole
// sequences. Tile k holds sequences()[k] consecutive sequences, B·(k+1)/N − B·k/N of them, so the
// counts differ by at most one. With one tile every tensor is one handle, which StarPU allocates
// where it is first written (transient); with more, a tensor lives in main memory and is split into
// one piece per tile (runtime/tensor.hpp), and a model's row-wise tasks run per tile on the pieces.
// Used by models/gpt.cpp and models/llama.cpp.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/dtype.hpp"
#include "runtime/tensor.hpp"

namespace starzero {

class SequenceTiles {
 public:
  // `count` tiles of a micro-batch of `batch` sequences; std::invalid_argument unless
  // 1 <= count <= batch.
  SequenceTiles(int batch, int count) : batch_(batch) {
    if (count < 1 || count > batch)
      throw std::invalid_argument(std::to_string(count) + " tiles for a micro-batch of " + std::to_string(batch) +
                                  " sequences: a tile holds whole sequences, so 1 <= tiles <= B");
    for (int k = 0; k < count; ++k) sequences_.push_back(batch * (k + 1) / count - batch * k / count);
  }

  int batch() const { return batch_; }
  int count() const { return int(sequences_.size()); }
  // Sequences per tile, in tile order (they add up to batch()).
  const std::vector<int>& sequences() const { return sequences_; }

  // A host tensor of `per_sequence` elements per sequence, split into one piece per tile (one
  // tile: whole). Its home is main memory (pinned when there are CUDA workers).
  Tensor host(DType dtype, std::size_t per_sequence, const std::string& name) const {
    Tensor tensor = Tensor::host(dtype, std::size_t(batch_) * per_sequence, name);
    std::vector<std::size_t> counts;
    for (int n : sequences_) counts.push_back(std::size_t(n) * per_sequence);
    tensor.split(counts);
    return tensor;
  }
  // The same, but transient when there is one tile.
  Tensor make(DType dtype, std::size_t per_sequence, const std::string& name) const {
    if (count() == 1) return Tensor::transient(dtype, std::size_t(batch_) * per_sequence, name);
    return host(dtype, per_sequence, name);
  }

 private:
  int batch_;
  std::vector<int> sequences_;
};

}  // namespace starzero
