// First, before anything includes starpu.h: StarPU 1.3's starpu.h includes starpu_disk.h ahead of
// its extern "C" block and starpu_disk.h has none of its own, so C++ would otherwise see the disk
// functions with C++ linkage (undefined references to starpu_disk_register & co.).
extern "C" {
#include <starpu_disk.h>
}

#include "runtime/disk.hpp"

#include <fcntl.h>
#include <starpu.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <system_error>

namespace starzero {

static_assert(DiskNode::min_capacity_bytes == STARPU_DISK_SIZE_MIN, "StarPU's minimum disk size changed");

struct DiskNode::State {
  unsigned node = 0;
  std::string directory;
  std::size_t capacity = 0;
  std::mutex mutex;
  std::size_t bytes = 0;      // live homes
  std::uint64_t next_id = 0;  // file names
};

namespace {

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string errno_text(int err) { return std::generic_category().message(err); }

// File-name-safe version of a tensor name: [A-Za-z0-9._-], at most 64 characters.
std::string sanitize(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (out.size() == 64) break;
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  return out.empty() ? "tensor" : out;
}

// Creates the directory if needed and checks that files can be created in it (root passes
// access(2) checks on read-only modes, so this creates and removes a probe file).
void prepare_directory(const std::filesystem::path& dir) {
  const std::string shown = dir.string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("disk node: cannot create directory " + shown + ": " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) throw std::runtime_error("disk node: " + shown + " is not a directory");
  std::string probe = (dir / ".starzero-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    const int err = errno;
    throw std::runtime_error("disk node: directory " + shown + " is not writable: " + errno_text(err));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  struct statvfs fs {};
  if (::statvfs(shown.c_str(), &fs) == 0) {
    const std::uint64_t free_bytes = std::uint64_t(fs.f_bavail) * fs.f_frsize;
    if (free_bytes < STARPU_DISK_SIZE_MIN)
      throw std::runtime_error("disk node: " + shown + " has " + mib(free_bytes) + " free; StarPU needs at least " +
                               mib(STARPU_DISK_SIZE_MIN) + " there to measure the disk when it registers the node");
  }
}

// One file on the disk node, opened in StarPU (starpu_disk_open) and counted against the
// node's capacity (starpu_memory_allocate).
class DiskHome final : public HomeBuffer {
 public:
  DiskHome(std::shared_ptr<DiskNode::State> state, std::string path, void* object, std::size_t bytes)
      : state_(std::move(state)), path_(std::move(path)), object_(object), bytes_(bytes) {}
  DiskHome(const DiskHome&) = delete;
  DiskHome& operator=(const DiskHome&) = delete;
  ~DiskHome() override {
    // After a Session ended the node and its objects are gone with StarPU (a misuse, see
    // disk.hpp): only the file is ours to remove then.
    if (starpu_is_initialized()) {
      starpu_disk_close(state_->node, object_, bytes_);
      starpu_memory_deallocate(state_->node, bytes_);
    }
    ::unlink(path_.c_str());
    std::lock_guard lock(state_->mutex);
    state_->bytes -= bytes_;
  }
  unsigned node() const override { return state_->node; }
  std::uintptr_t address() const override { return reinterpret_cast<std::uintptr_t>(object_); }

 private:
  std::shared_ptr<DiskNode::State> state_;
  std::string path_;
  void* object_;
  std::size_t bytes_;
};

}  // namespace

DiskNode::DiskNode(const std::string& directory, std::size_t capacity_bytes) : state_(std::make_shared<State>()) {
  if (!starpu_is_initialized())
    throw std::logic_error("disk node " + directory + ": needs a running StarPU session (create the Session first)");
  if (directory.empty()) throw std::invalid_argument("disk node: empty directory name");
  if (capacity_bytes < min_capacity_bytes)
    throw std::invalid_argument("disk node " + directory + ": capacity " + std::to_string(capacity_bytes) +
                                " bytes is below StarPU's minimum disk size of " + mib(min_capacity_bytes) +
                                " (STARPU_DISK_SIZE_MIN)");
  if (capacity_bytes > std::size_t(SSIZE_MAX))
    throw std::invalid_argument("disk node " + directory + ": capacity too large");

  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(directory, ec);
  if (ec) throw std::runtime_error("disk node: bad directory " + directory + ": " + ec.message());
  dir = dir.lexically_normal();
  prepare_directory(dir);
  state_->directory = dir.string();
  while (state_->directory.size() > 1 && state_->directory.back() == '/') state_->directory.pop_back();
  state_->capacity = capacity_bytes;

  // StarPU asserts instead of failing when it runs out of memory nodes.
  if (starpu_memory_nodes_get_count() >= STARPU_MAXNODES)
    throw std::runtime_error("disk node " + state_->directory + ": all " + std::to_string(STARPU_MAXNODES) +
                             " StarPU memory nodes are in use (StarPU 1.3 keeps disk nodes until shutdown)");
  // The unistd driver copies the path; it measures the disk by writing a 16 MiB file there.
  const int ret = starpu_disk_register(&starpu_disk_unistd_ops, const_cast<char*>(state_->directory.c_str()),
                                       starpu_ssize_t(capacity_bytes));
  if (ret < 0)
    throw std::runtime_error("disk node " + state_->directory + ": starpu_disk_register failed: " + errno_text(-ret));
  state_->node = unsigned(ret);
}

DiskNode::~DiskNode() {
  // The node stays registered until starpu_shutdown. Mark it full so that StarPU does not choose
  // it for new spills of data without a home (homes still alive keep working).
  if (starpu_is_initialized()) starpu_memory_allocate(state_->node, state_->capacity, STARPU_MEMORY_OVERFLOW);
}

unsigned DiskNode::node() const { return state_->node; }
const std::string& DiskNode::directory() const { return state_->directory; }
std::size_t DiskNode::capacity_bytes() const { return state_->capacity; }

std::size_t DiskNode::bytes_on_disk() const {
  std::lock_guard lock(state_->mutex);
  return state_->bytes;
}

std::unique_ptr<HomeBuffer> DiskNode::home(std::size_t bytes, const std::string& name) {
  const std::string where = "disk home " + name + " in " + state_->directory;
  if (bytes == 0) throw std::invalid_argument(where + ": zero bytes");
  if (bytes > std::size_t(SSIZE_MAX)) throw std::invalid_argument(where + ": too large");
  if (starpu_memory_allocate(state_->node, bytes, 0) != 0)
    throw std::runtime_error(where + ": " + std::to_string(bytes) + " bytes do not fit in the node's capacity of " +
                             std::to_string(state_->capacity) + " bytes (" +
                             std::to_string(starpu_memory_get_available(state_->node)) + " available)");
  // Every failure below gives the reservation back.
  struct Reservation {
    unsigned node;
    std::size_t bytes;
    bool kept = false;
    ~Reservation() {
      if (!kept) starpu_memory_deallocate(node, bytes);
    }
  } reservation{state_->node, bytes};

  const std::string stem = "starzero-" + std::to_string(::getpid()) + "-";
  const std::string suffix = "-" + sanitize(name) + ".bin";
  std::string file, path;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    {
      std::lock_guard lock(state_->mutex);
      file = stem + std::to_string(state_->next_id++) + suffix;
    }
    path = state_->directory + "/" + file;
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const int open_errno = errno;
    if (fd < 0 && (open_errno != EEXIST || attempt == 1000))
      throw std::runtime_error(where + ": cannot create " + path + ": " + errno_text(open_errno));
  }
  // Reserve the blocks now, so that a full file system fails here and not inside a StarPU write
  // (which asserts). Zero-filled either way.
  int err = ::posix_fallocate(fd, 0, off_t(bytes));
  if (err == EOPNOTSUPP || err == EINVAL) err = ::ftruncate(fd, off_t(bytes)) == 0 ? 0 : errno;
  ::close(fd);
  if (err != 0) {
    ::unlink(path.c_str());
    throw std::runtime_error(where + ": cannot make " + path + " " + std::to_string(bytes) +
                             " bytes long: " + errno_text(err));
  }
  void* object = starpu_disk_open(state_->node, const_cast<char*>(file.c_str()), bytes);
  if (!object) {
    ::unlink(path.c_str());
    throw std::runtime_error(where + ": starpu_disk_open failed for " + path);
  }
  std::unique_ptr<HomeBuffer> home;
  try {
    home = std::make_unique<DiskHome>(state_, path, object, bytes);
  } catch (...) {
    starpu_disk_close(state_->node, object, bytes);
    ::unlink(path.c_str());
    throw;
  }
  reservation.kept = true;
  std::lock_guard lock(state_->mutex);
  state_->bytes += bytes;
  return home;
}

}  // namespace starzero
