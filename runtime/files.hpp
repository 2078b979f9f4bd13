#pragma once
// Host-side file helpers that know no file format (POSIX, no StarPU): the error every reader
// throws, an owned file descriptor, a reader that knows a file's size before it reads, reads at
// an offset, and the atomic write every writer goes through.
//
// Readers check a whole file before trusting it and throw FileFormatError with the file name
// and what is wrong; writers go through write_file_atomically, so a crash or error never leaves
// a half-written target behind.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace starzero {

// A file that cannot be used: missing, truncated, wrong magic/version/shape, trailing bytes.
class FileFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws FileFormatError("<path>: <what>").
[[noreturn]] void throw_format_error(const std::filesystem::path& path, const std::string& what);

// "truncated data: file has <have> bytes, <what> needs exactly <need>" (or "trailing data: ..."
// when the file is longer than it should be).
std::string describe_size_mismatch(std::size_t have, std::size_t need, const std::string& what);

// Owns a POSIX file descriptor (-1: none) and closes it on destruction; close_checked() closes
// it on the success path and reports the error.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept;
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();
  // Returns 0 or the errno of close().
  int close_checked();

 private:
  int fd_ = -1;
};

// A regular file opened for reading from its start, with its size known up front so that every
// format check can be made before any large allocation. Every failure is a FileFormatError
// naming the file (cannot open, not a regular file, read error, end of file).
class FileReader {
 public:
  explicit FileReader(const std::filesystem::path& path);
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // The next `n` bytes, or FileFormatError.
  void read_exact(void* out, std::size_t n);
  template <class T>
  T read_value() {
    T value;
    read_exact(&value, sizeof value);
    return value;
  }

 private:
  std::filesystem::path path_;
  FileDescriptor fd_;
  std::size_t size_ = 0;
};

// The whole file's bytes; FileFormatError when it cannot be opened or read.
std::string read_whole_file(const std::filesystem::path& path);

// Reads `bytes` bytes at byte `offset` of `path` without reading the rest; FileFormatError when
// the file cannot be opened or ends (or fails) before.
void read_file_at(const std::filesystem::path& path, std::uint64_t offset, void* out, std::size_t bytes);

// os.write of `n` raw bytes.
void write_bytes(std::ostream& os, const void* data, std::size_t n);

// Writes `path` through a temporary file in the same directory (<name>.tmp.<pid>): `write` fills
// the stream, then the file is fsync'ed, renamed over `path`, and the directory fsync'ed. On any
// failure (including `write` throwing or leaving the stream bad) the temporary file is removed,
// `path` is left as it was and the error propagates (I/O errors as std::system_error).
void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);

// Whether process `pid` still runs (this process counts; another user's too).
bool process_running(long pid);
// Whether `file`, named after process `pid` (a temporary file, a partial folder), may still be
// that process's: it runs, and it started before the file was last modified (a pid reused by
// a process started later does not own the file). Linux: the start time from /proc.
bool process_may_own(long pid, const std::filesystem::path& file);

// Writes `text` to `path` atomically, as write_file_atomically does.
void write_text_atomically(const std::filesystem::path& path, const std::string& text);

// Removes the temporary files that write_file_atomically left behind when its process was killed:
// files beside `path` named <name>*.tmp.<pid> whose name starts with path's (FILE.tmp.<pid>,
// FILE.state.tmp.<pid>, FILE.rank0-of-2.state.tmp.<pid>) and whose process no longer runs. A
// running process's file is left alone, as is everything else. Returns the removed paths.
std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& path);

}  // namespace starzero
