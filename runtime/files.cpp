#include "runtime/files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <streambuf>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace starzero {

namespace {

[[noreturn]] void throw_io(int err, const std::filesystem::path& path, std::string_view what) {
  throw std::system_error(err, std::generic_category(), path.string() + ": " + std::string(what));
}

// Returns 0 or errno.
int write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    data += w;
    n -= std::size_t(w);
  }
  return 0;
}

// An output stream buffer over a file descriptor that remembers the first write error.
class FdStreambuf : public std::streambuf {
 public:
  explicit FdStreambuf(int fd) : fd_(fd), buffer_(std::size_t(1) << 20) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type ch) override {
    if (!flush_buffer()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    // Large writes (parameter arrays) skip the copy into the buffer.
    if (n >= std::streamsize(buffer_.size())) {
      if (!flush_buffer()) return 0;
      if ((error_ = write_all(fd_, s, std::size_t(n))) != 0) return 0;
      return n;
    }
    return std::streambuf::xsputn(s, n);
  }
  int sync() override { return flush_buffer() ? 0 : -1; }

 private:
  bool flush_buffer() {
    if (error_ != 0) return false;
    const std::size_t n = std::size_t(pptr() - pbase());
    if (n > 0 && (error_ = write_all(fd_, pbase(), n)) != 0) return false;
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return true;
  }

  int fd_;
  std::vector<char> buffer_;
  int error_ = 0;
};

FileDescriptor open_for_reading(const std::filesystem::path& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) throw_format_error(path, std::string("cannot open: ") + std::strerror(errno));
  return fd;
}

}  // namespace

void throw_format_error(const std::filesystem::path& path, const std::string& what) {
  throw FileFormatError(path.string() + ": " + what);
}

std::string describe_size_mismatch(std::size_t have, std::size_t need, const std::string& what) {
  const bool truncated = have < need;
  return std::string(truncated ? "truncated data" : "trailing data") + ": file has " + std::to_string(have) +
         " bytes, " + what + " needs exactly " + std::to_string(need);
}

// ---- FileDescriptor ---------------------------------------------------------------------------

FileDescriptor::FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void FileDescriptor::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int FileDescriptor::close_checked() {
  const int fd = std::exchange(fd_, -1);
  return (fd >= 0 && ::close(fd) != 0) ? errno : 0;
}

// ---- reading ----------------------------------------------------------------------------------

FileReader::FileReader(const std::filesystem::path& path) : path_(path), fd_(open_for_reading(path)) {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) throw_format_error(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw_format_error(path, "not a regular file");
  size_ = std::size_t(st.st_size);
}

void FileReader::read_exact(void* out, std::size_t n) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t r = ::read(fd_.get(), p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_format_error(path_, std::string("read error: ") + std::strerror(errno));
    }
    if (r == 0) throw_format_error(path_, "unexpected end of file (file changed while reading?)");
    p += r;
    n -= std::size_t(r);
  }
}

std::string read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_format_error(path, "cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw_format_error(path, "read error");
  return text;
}

void read_file_at(const std::filesystem::path& path, std::uint64_t offset, void* out, std::size_t bytes) {
  const FileDescriptor fd = open_for_reading(path);
  auto* at = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd.get(), at, bytes, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw_format_error(path, "truncated or unreadable at byte " + std::to_string(offset));
    at += got;
    offset += std::uint64_t(got);
    bytes -= std::size_t(got);
  }
}

// ---- writing ----------------------------------------------------------------------------------

void write_bytes(std::ostream& os, const void* data, std::size_t n) {
  os.write(static_cast<const char*>(data), std::streamsize(n));
}

void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());

  FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) throw_io(errno, tmp, "cannot create temporary file");

  // Removes the temporary file unless the rename succeeded.
  struct TmpGuard {
    const std::filesystem::path& tmp;
    bool armed = true;
    ~TmpGuard() {
      if (armed) ::unlink(tmp.c_str());
    }
  } guard{tmp};

  {
    FdStreambuf buf(fd.get());
    std::ostream os(&buf);
    write(os);
    os.flush();
    if (buf.error() != 0) throw_io(buf.error(), tmp, "write failed");
    if (!os) throw_io(EIO, tmp, "write failed (stream error)");
  }
  if (::fsync(fd.get()) != 0) throw_io(errno, tmp, "fsync failed");
  if (const int err = fd.close_checked(); err != 0) throw_io(err, tmp, "close failed");
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw_io(errno, path, "cannot rename temporary file over it");
  guard.armed = false;

  // Makes the rename itself durable.
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) throw_io(errno, dir, "cannot open directory to fsync");
  if (::fsync(dir_fd.get()) != 0) throw_io(errno, dir, "directory fsync failed");
  if (const int err = dir_fd.close_checked(); err != 0) throw_io(err, dir, "close failed");
}


namespace {

// /proc/<pid>/stat from its third field on (the state); empty when /proc cannot tell.
std::string proc_stat_fields(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return {};
  const std::size_t close = line.rfind(')');  // the command name may hold spaces and ')'
  return close == std::string::npos || close + 2 >= line.size() ? std::string() : line.substr(close + 2);
}

std::optional<char> process_state(long pid) {
  const std::string fields = proc_stat_fields(pid);
  if (fields.empty()) return std::nullopt;
  return fields.front();
}

// When process `pid` started, as seconds since the epoch; nullopt when /proc cannot tell.
std::optional<double> process_start_seconds(long pid) {
  std::istringstream fields(proc_stat_fields(pid));
  std::string field, line;
  for (int i = 3; i < 22 && fields >> field; ++i) {
  }
  unsigned long long start_ticks = 0;
  if (!(fields >> start_ticks)) return std::nullopt;
  std::ifstream proc_stat("/proc/stat");
  std::string key;
  long long boot = -1;
  while (proc_stat >> key) {
    if (key == "btime") {
      proc_stat >> boot;
      break;
    }
    std::getline(proc_stat, line);
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (boot < 0 || ticks <= 0) return std::nullopt;
  return double(boot) + double(start_ticks) / double(ticks);
}

}  // namespace

bool process_running(long pid) {
  if (pid == long(::getpid())) return true;
  // Signal 0 only asks whether the process exists: EPERM means it does (another user's).
  if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) return false;
  // A zombie (killed, its parent gone and nobody reaping it, as in a container without an init)
  // still answers signal 0, but runs no more.
  const std::optional<char> state = process_state(pid);
  return !state || (*state != 'Z' && *state != 'X');
}

bool process_may_own(long pid, const std::filesystem::path& file) {
  if (!process_running(pid)) return false;
  std::error_code error;
  const auto modified = std::filesystem::last_write_time(file, error);
  const std::optional<double> started = process_start_seconds(pid);
  if (error || !started) return true;  // cannot tell: keep the file
  const double modified_seconds =
      std::chrono::duration<double>(std::chrono::file_clock::to_sys(modified).time_since_epoch()).count();
  return *started <= modified_seconds + 1.0;  // btime has 1 s resolution
}

void write_text_atomically(const std::filesystem::path& path, const std::string& text) {
  write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const std::string name = path.filename().string();
  constexpr std::string_view marker = ".tmp.";
  std::vector<fs::path> removed;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    const std::size_t at = file.rfind(marker);
    if (!file.starts_with(name) || at == std::string::npos || at < name.size()) continue;
    const std::string digits = file.substr(at + marker.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (process_may_own(std::stol(digits), entry.path())) continue;
    std::error_code remove_error;
    if (entry.is_regular_file(remove_error) && fs::remove(entry.path(), remove_error)) removed.push_back(entry.path());
  }
  return removed;
}

}  // namespace starzero
