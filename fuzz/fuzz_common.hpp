#pragma once
// Shared by the libFuzzer harnesses (fuzz/README.md): a scratch directory of this process, the
// fuzz input written to a file there (readers take a path), and a check that aborts with a message
// (libFuzzer then saves the input as a crash).
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace starzero::fuzz {

// A directory of its own for this process: under $STARZERO_FUZZ_TMP, else /dev/shm when it is
// writable, else the system temp dir; removed with everything in it when the process exits.
class ScratchDir {
 public:
  ScratchDir() {
    std::filesystem::path base;
    if (const char* env = std::getenv("STARZERO_FUZZ_TMP"); env && *env)
      base = env;
    else if (::access("/dev/shm", W_OK) == 0)
      base = "/dev/shm";
    else
      base = std::filesystem::temp_directory_path();
    path_ = base / ("starzero-fuzz-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline const std::filesystem::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

// Replaces `path`'s contents with `size` bytes (aborts when that fails: no finding to report).
inline void write_input(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    done += std::size_t(n);
  }
  ::close(fd);
}

// A broken property of a reader that accepted its input: report and abort (a crash to libFuzzer).
#define FUZZ_CHECK(cond)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);     \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

// The bytes of a file the harness wrote.
inline std::vector<std::uint8_t> file_bytes(const std::filesystem::path& path) {
  std::vector<std::uint8_t> bytes(std::filesystem::file_size(path));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  return bytes;
}

// Files in the scratch directory (a writer must leave no temporary behind).
inline std::size_t files_in_scratch() {
  std::size_t n = 0;
  for ([[maybe_unused]] const std::filesystem::directory_entry& entry :
       std::filesystem::directory_iterator(scratch_dir()))
    ++n;
  return n;
}

}  // namespace starzero::fuzz
