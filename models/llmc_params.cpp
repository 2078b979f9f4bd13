#include "models/llmc_params.hpp"

#include <algorithm>
#include <stdexcept>

#include "runtime/dtype.hpp"

namespace starzero {

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

}  // namespace starzero
