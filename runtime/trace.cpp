#include "runtime/trace.hpp"

#include <starpu.h>
#include <starpu_fxt.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace starzero {

void convert_fxt_trace(const std::string& fxt_file, const std::string& out_dir) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(fxt_file, ec);
  if (ec) throw std::runtime_error("FxT trace " + fxt_file + ": " + ec.message());
  if (size == 0) throw std::runtime_error("FxT trace " + fxt_file + " is empty");
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw std::runtime_error("cannot create " + out_dir + ": " + ec.message());

  // StarPU 1.3.10 leaves fields uninitialised: zero the struct before its own init.
  starpu_fxt_options options;
  std::memset(&options, 0, sizeof options);
  starpu_fxt_options_init(&options);
  std::vector<char> input(fxt_file.begin(), fxt_file.end());
  input.push_back('\0');
  std::vector<char> dir(out_dir.begin(), out_dir.end());
  dir.push_back('\0');
  options.filenames[0] = input.data();
  options.ninputfiles = 1;
  options.dir = dir.data();
  starpu_fxt_options_set_dir(&options);
  starpu_fxt_generate_trace(&options);
  starpu_fxt_options_shutdown(&options);
  if (!std::filesystem::exists(std::filesystem::path(out_dir) / "paje.trace"))
    throw std::runtime_error("StarPU wrote no paje.trace into " + out_dir);
}

}  // namespace starzero
