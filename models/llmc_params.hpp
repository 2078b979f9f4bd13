#pragma once
// The parameter body of llm.c's checkpoints, GPT-2's (models/llmc_files.hpp) and Llama 3's
// (models/llama_files.hpp) alike: after the 256-int header, every parameter as fp32 (version 3)
// or bf16 (version 5), read into and written from pieces so that no file-sized buffer is needed.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/files.hpp"

namespace starzero {

// Reads `out.size()` parameters at the reader's position into `out`, widening bf16 exactly.
void read_llmc_params(FileReader& in, bool bf16, std::span<float> out);

// Reads `count` parameters at the reader's position piece by piece into destination(offset, n).
// std::invalid_argument when the pieces do not add up to `count` ("checkpoint PATH: pieces of N
// parameters, SHAPE has COUNT") or a destination has the wrong size.
void read_llmc_param_pieces(FileReader& in, bool bf16, std::size_t count, const std::filesystem::path& path,
                            const std::string& shape,
                            const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                            std::span<const std::size_t> pieces);

// `count` parameters as pieces of at most 2^20.
std::vector<std::size_t> llmc_param_pieces(std::size_t count);

// Writes `header` and then `count` parameters, each piece filled by fill(offset, piece), through
// write_file_atomically. Checks the pieces add up to `count` like read_llmc_param_pieces.
void write_llmc_params_file(const std::filesystem::path& path, std::span<const std::byte> header, bool bf16,
                            std::size_t count, const std::string& shape,
                            const std::function<void(std::size_t, std::span<float>)>& fill,
                            std::span<const std::size_t> pieces);

}  // namespace starzero
