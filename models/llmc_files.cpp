#include "models/llmc_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include "runtime/dtype.hpp"

namespace starzero {

static_assert(std::endian::native == std::endian::little,
              "llm.c files are little-endian; a big-endian host would need byte swapping");

namespace {

// ---- small POSIX helpers ----------------------------------------------------------------------

// Owns a file descriptor; close errors on the success path are checked by close_checked().
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Returns 0 or the errno of close().
  int close_checked() {
    const int fd = std::exchange(fd_, -1);
    return (fd >= 0 && ::close(fd) != 0) ? errno : 0;
  }

 private:
  int fd_ = -1;
};

[[noreturn]] void throw_io(int err, const std::filesystem::path& path, std::string_view what) {
  throw std::system_error(err, std::generic_category(),
                          path.string() + ": " + std::string(what));
}

[[noreturn]] void throw_format(const std::filesystem::path& path, const std::string& what) {
  throw FileFormatError(path.string() + ": " + what);
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

// A whole file opened for reading, with its size known up front so every format check can be
// made before any large allocation.
class FileReader {
 public:
  explicit FileReader(const std::filesystem::path& path) : path_(path) {
    fd_ = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd_.valid()) throw_format(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) throw_format(path, std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw_format(path, "not a regular file");
    size_ = std::size_t(st.st_size);
  }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  void read_exact(void* out, std::size_t n) {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t r = ::read(fd_.get(), p, n);
      if (r < 0) {
        if (errno == EINTR) continue;
        throw_format(path_, std::string("read error: ") + std::strerror(errno));
      }
      if (r == 0) throw_format(path_, "unexpected end of file (file changed while reading?)");
      p += r;
      n -= std::size_t(r);
    }
  }
  template <class T>
  T read_value() {
    T value;
    read_exact(&value, sizeof value);
    return value;
  }

 private:
  std::filesystem::path path_;
  Fd fd_;
  std::size_t size_ = 0;
};

void write_bytes(std::ostream& os, const void* data, std::size_t n) {
  os.write(static_cast<const char*>(data), std::streamsize(n));
}

std::string size_mismatch(std::size_t have, std::size_t need, const std::string& what) {
  const bool truncated = have < need;
  return std::string(truncated ? "truncated data" : "trailing data") + ": file has " +
         std::to_string(have) + " bytes, " + what + " needs exactly " + std::to_string(need);
}

void check_shape(const std::filesystem::path& path, const GptShape& shape) {
  try {
    shape.validate();
  } catch (const std::invalid_argument& e) {
    throw_format(path, std::string("invalid shape: ") + e.what());
  }
}

void check_expected(const std::filesystem::path& path, const GptShape& have, const GptShape& expected) {
  if (have != expected)
    throw_format(path, "shape mismatch: file has " + have.to_string() + ", expected " + expected.to_string());
}

}  // namespace

// ---- llm.c tensor order ----------------------------------------------------------------------

std::vector<TensorSpec> llmc_tensor_specs(const GptShape& shape) {
  const GptLayout layout(shape);
  std::vector<TensorSpec> specs;
  for (const GptTensor& tensor : layout.tensors())
    specs.push_back({std::string(tensor.name), tensor.count, tensor.per_layer, tensor.llmc_offset});
  return specs;
}

// ---- atomic write -----------------------------------------------------------------------------

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());

  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
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
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) throw_io(errno, dir, "cannot open directory to fsync");
  if (::fsync(dir_fd.get()) != 0) throw_io(errno, dir, "directory fsync failed");
  if (const int err = dir_fd.close_checked(); err != 0) throw_io(err, dir, "close failed");
}

// ---- llm.c checkpoint -------------------------------------------------------------------------

namespace {
constexpr std::size_t header_bytes = kLlmcHeaderInts * sizeof(std::int32_t);

// The 256-int32 header both llm.c formats start with.
std::array<std::int32_t, kLlmcHeaderInts> read_llmc_header(FileReader& in, const std::filesystem::path& path) {
  if (in.size() < header_bytes)
    throw_format(path, "truncated header: file has " + std::to_string(in.size()) + " bytes, the header needs " +
                           std::to_string(header_bytes));
  std::array<std::int32_t, kLlmcHeaderInts> header{};
  in.read_exact(header.data(), header_bytes);
  return header;
}

LlmcCheckpoint read_checkpoint(const std::filesystem::path& path, const GptShape* expected) {
  FileReader in(path);
  const auto header = read_llmc_header(in, path);
  if (header[0] != kLlmcCheckpointMagic)
    throw_format(path, "wrong magic " + std::to_string(header[0]) + " (an llm.c checkpoint has " +
                           std::to_string(kLlmcCheckpointMagic) + ")" +
                           (header[0] == kLlmcTokenMagic ? ": this is a token shard" : ""));
  const int version = header[1];
  if (version != kLlmcCheckpointFp32 && version != kLlmcCheckpointBf16)
    throw_format(path, "unknown version " + std::to_string(version) + " (known: 3 = fp32, 5 = bf16)");

  LlmcCheckpoint ckpt;
  ckpt.version = version;
  StateShapeFields fields{};
  std::copy_n(header.begin() + 2, fields.size(), fields.begin());
  ckpt.shape = gpt_shape_from_fields(fields);
  check_shape(path, ckpt.shape);
  // Before the size check, so a file of another model is reported as such.
  if (expected) check_expected(path, ckpt.shape, *expected);

  const std::size_t count = ckpt.shape.param_count();
  const std::size_t elem = version == kLlmcCheckpointFp32 ? sizeof(float) : sizeof(bf16_bits);
  const std::size_t need = header_bytes + count * elem;
  if (in.size() != need) throw_format(path, size_mismatch(in.size(), need, "shape " + ckpt.shape.to_string()));

  ckpt.params.resize(count);
  if (version == kLlmcCheckpointFp32) {
    in.read_exact(ckpt.params.data(), count * sizeof(float));
  } else {
    std::vector<bf16_bits> chunk(std::min<std::size_t>(count, std::size_t(1) << 20));
    for (std::size_t done = 0; done < count;) {
      const std::size_t n = std::min(chunk.size(), count - done);
      in.read_exact(chunk.data(), n * sizeof(bf16_bits));
      for (std::size_t i = 0; i < n; ++i) ckpt.params[done + i] = bf16_to_float(chunk[i]);
      done += n;
    }
  }
  return ckpt;
}

}  // namespace

LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path) { return read_checkpoint(path, nullptr); }

LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path, const GptShape& expected) {
  return read_checkpoint(path, &expected);
}

void write_llmc_checkpoint(const std::filesystem::path& path, const GptShape& shape,
                           std::span<const float> params, int version) {
  if (params.size() != shape.param_count())
    throw std::invalid_argument("checkpoint " + path.string() + ": " + std::to_string(params.size()) +
                                " parameters given, shape " + shape.to_string() + " has " +
                                std::to_string(shape.param_count()));
  std::vector<std::size_t> pieces;
  for (std::size_t done = 0; done < params.size(); done += pieces.back())
    pieces.push_back(std::min<std::size_t>(params.size() - done, std::size_t(1) << 20));
  write_llmc_checkpoint_streamed(
      path, shape, version,
      [&](std::size_t offset, std::span<float> out) {
        std::copy_n(params.begin() + std::ptrdiff_t(offset), out.size(), out.begin());
      },
      pieces);
}

void write_llmc_checkpoint_streamed(const std::filesystem::path& path, const GptShape& shape, int version,
                                    const std::function<void(std::size_t, std::span<float>)>& fill,
                                    std::span<const std::size_t> pieces) {
  shape.validate();
  if (version != kLlmcCheckpointFp32 && version != kLlmcCheckpointBf16)
    throw std::invalid_argument("llm.c checkpoint version must be 3 (fp32) or 5 (bf16), not " +
                                std::to_string(version));
  std::size_t total = 0, largest = 0;
  for (std::size_t n : pieces) {
    total += n;
    largest = std::max(largest, n);
  }
  if (total != shape.param_count())
    throw std::invalid_argument("checkpoint " + path.string() + ": pieces of " + std::to_string(total) +
                                " parameters, shape " + shape.to_string() + " has " + std::to_string(shape.param_count()));
  write_file_atomically(path, [&](std::ostream& os) {
    std::array<std::int32_t, kLlmcHeaderInts> header{};
    header[0] = kLlmcCheckpointMagic;
    header[1] = version;
    const StateShapeFields fields = gpt_shape_fields(shape);
    std::copy(fields.begin(), fields.end(), header.begin() + 2);
    write_bytes(os, header.data(), sizeof header);
    std::vector<float> values(largest);
    std::vector<bf16_bits> halves(version == kLlmcCheckpointBf16 ? largest : 0);
    std::size_t offset = 0;
    for (std::size_t n : pieces) {
      const std::span<float> piece(values.data(), n);
      fill(offset, piece);
      if (version == kLlmcCheckpointFp32) {
        write_bytes(os, piece.data(), piece.size_bytes());
      } else {
        std::transform(piece.begin(), piece.end(), halves.begin(), float_to_bf16);
        write_bytes(os, halves.data(), n * sizeof(bf16_bits));
      }
      offset += n;
    }
  });
}

// ---- llm.c token shard ------------------------------------------------------------------------

std::vector<std::uint16_t> read_token_shard(const std::filesystem::path& path) {
  FileReader in(path);
  const auto header = read_llmc_header(in, path);
  if (header[0] != kLlmcTokenMagic)
    throw_format(path, "wrong magic " + std::to_string(header[0]) + " (an llm.c token shard has " +
                           std::to_string(kLlmcTokenMagic) + ")" +
                           (header[0] == kLlmcCheckpointMagic ? ": this is a checkpoint" : ""));
  if (header[1] != kLlmcTokenVersion)
    throw_format(path, "unknown version " + std::to_string(header[1]) + " (known: 1)");
  if (header[2] < 0) throw_format(path, "negative token count " + std::to_string(header[2]));
  const std::size_t count = std::size_t(header[2]);
  const std::size_t need = header_bytes + count * sizeof(std::uint16_t);
  if (in.size() != need)
    throw_format(path, "token count " + std::to_string(count) + " inconsistent with the file size: " +
                           size_mismatch(in.size(), need, "the header"));
  std::vector<std::uint16_t> tokens(count);
  in.read_exact(tokens.data(), count * sizeof(std::uint16_t));
  return tokens;
}

void write_token_shard(const std::filesystem::path& path, std::span<const std::uint16_t> tokens) {
  if (tokens.size() > std::size_t(INT32_MAX))
    throw std::invalid_argument("token shard " + path.string() + ": " + std::to_string(tokens.size()) +
                                " tokens do not fit the int32 count of the header");
  write_file_atomically(path, [&](std::ostream& os) {
    std::array<std::int32_t, kLlmcHeaderInts> header{};
    header[0] = kLlmcTokenMagic;
    header[1] = kLlmcTokenVersion;
    header[2] = std::int32_t(tokens.size());
    write_bytes(os, header.data(), sizeof header);
    write_bytes(os, tokens.data(), tokens.size_bytes());
  });
}

// ---- training state ---------------------------------------------------------------------------

namespace {
constexpr std::array<char, 4> kTrainingStateMagic = {'S', 'Z', 'T', 'S'};
constexpr std::size_t kTrainingStateFixedBytes = 64;
// mt19937_64's text form is 312 numbers of at most 20 digits; anything far larger is corrupt.
constexpr std::uint64_t kMaxRngTextBytes = 64 * 1024;
}  // namespace

void write_training_state(const std::filesystem::path& path, const StateLayout& layout,
                          const TrainingState& state) {
  const std::size_t n = state.master.size();
  if (state.m.size() != n || state.v.size() != n)
    throw std::invalid_argument("training state " + path.string() + ": master/m/v sizes differ (" +
                                std::to_string(n) + ", " + std::to_string(state.m.size()) + ", " +
                                std::to_string(state.v.size()) + ")");
  if (n > layout.param_count())
    throw std::invalid_argument("training state " + path.string() + ": " + std::to_string(n) +
                                " elements exceed the parameter count " + std::to_string(layout.param_count()) +
                                " of " + layout.describe(layout.shape_fields));
  std::ostringstream rng_text;
  rng_text << state.rng;
  const std::string rng = rng_text.str();

  write_file_atomically(path, [&](std::ostream& os) {
    write_bytes(os, kTrainingStateMagic.data(), kTrainingStateMagic.size());
    const std::uint32_t version = kTrainingStateVersion;
    write_bytes(os, &version, sizeof version);
    write_bytes(os, layout.shape_fields.data(), sizeof layout.shape_fields);
    const std::array<std::uint64_t, 4> fields = {state.step, state.data_position, std::uint64_t(n),
                                                 std::uint64_t(rng.size())};
    write_bytes(os, fields.data(), sizeof fields);
    write_bytes(os, rng.data(), rng.size());
    write_bytes(os, state.master.data(), n * sizeof(float));
    write_bytes(os, state.m.data(), n * sizeof(float));
    write_bytes(os, state.v.data(), n * sizeof(float));
  });
}

TrainingState read_training_state(const std::filesystem::path& path, const StateLayout& expected) {
  FileReader in(path);
  if (in.size() < kTrainingStateFixedBytes)
    throw_format(path, "truncated header: file has " + std::to_string(in.size()) + " bytes, the header needs " +
                           std::to_string(kTrainingStateFixedBytes));
  std::array<char, 4> magic{};
  in.read_exact(magic.data(), magic.size());
  if (magic != kTrainingStateMagic) throw_format(path, "wrong magic: not a starzero training state (SZTS)");
  const auto version = in.read_value<std::uint32_t>();
  if (version != kTrainingStateVersion)
    throw_format(path, "unknown version " + std::to_string(version) + " (known: " +
                           std::to_string(kTrainingStateVersion) + ")");
  StateShapeFields shape_fields{};
  in.read_exact(shape_fields.data(), sizeof shape_fields);
  if (shape_fields != expected.shape_fields)
    throw_format(path, "shape mismatch: file has " + expected.describe(shape_fields) + ", expected " +
                           expected.describe(expected.shape_fields));

  TrainingState state;
  state.step = in.read_value<std::uint64_t>();
  state.data_position = in.read_value<std::uint64_t>();
  const auto n = in.read_value<std::uint64_t>();
  const auto rng_bytes = in.read_value<std::uint64_t>();
  if (n > expected.param_count())
    throw_format(path, "state length " + std::to_string(n) + " exceeds the parameter count " +
                           std::to_string(expected.param_count()));
  if (rng_bytes > kMaxRngTextBytes) throw_format(path, "implausible RNG state size " + std::to_string(rng_bytes));
  const std::size_t need = kTrainingStateFixedBytes + std::size_t(rng_bytes) + 3 * std::size_t(n) * sizeof(float);
  if (in.size() != need)
    throw_format(path, size_mismatch(in.size(), need, std::to_string(n) + " elements of master/m/v"));

  std::string rng(std::size_t(rng_bytes), '\0');
  in.read_exact(rng.data(), rng.size());
  std::istringstream rng_text(rng);
  rng_text >> state.rng;
  if (!rng_text) throw_format(path, "corrupt RNG state text");

  for (auto* vec : {&state.master, &state.m, &state.v}) {
    vec->resize(std::size_t(n));
    in.read_exact(vec->data(), vec->size() * sizeof(float));
  }
  return state;
}

}  // namespace starzero
