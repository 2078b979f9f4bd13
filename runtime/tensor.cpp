#include "runtime/tensor.hpp"

#include <stdexcept>
#include <utility>

#include "runtime/host_memory.hpp"
#include "runtime/priorities.hpp"
#include "runtime/task_name.hpp"

namespace starzero {

namespace {

starpu_data_access_mode starpu_mode(Access mode) {
  switch (mode) {
    case Access::read: return STARPU_R;
    case Access::write: return STARPU_W;
    case Access::readwrite: return STARPU_RW;
  }
  return STARPU_R;
}

void check_count(std::size_t count, const std::string& name) {
  if (count == 0) throw std::invalid_argument("tensor " + name + ": zero elements");
  if (count > UINT32_MAX) throw std::invalid_argument("tensor " + name + ": more than 2^32-1 elements");
}

// starpu_malloc'd main memory (pinned by StarPU when CUDA workers exist; folded in simulation:
// allocate_host).
class StarpuMallocBuffer final : public HomeBuffer {
 public:
  StarpuMallocBuffer(std::size_t bytes, const std::string& name) : data_(allocate_host(bytes, true)), bytes_(bytes) {
    if (!data_) throw std::runtime_error("tensor " + name + ": cannot allocate " + std::to_string(bytes) + " bytes");
  }
  ~StarpuMallocBuffer() override { free_host(data_, bytes_, true); }
  StarpuMallocBuffer(const StarpuMallocBuffer&) = delete;
  StarpuMallocBuffer& operator=(const StarpuMallocBuffer&) = delete;
  unsigned node() const override { return STARPU_MAIN_RAM; }
  std::uintptr_t address() const override { return reinterpret_cast<std::uintptr_t>(data_); }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace

Tensor::Tensor(DType dtype, std::size_t count, std::string name, std::unique_ptr<HomeBuffer> home)
    : dtype_(dtype), count_(count), name_(std::move(name)), home_(std::move(home)) {
  const int home_node = home_ ? int(home_->node()) : -1;
  starpu_vector_data_register(&handle_, home_node, home_ ? home_->address() : 0, uint32_t(count), dtype_size(dtype));
  starpu_data_set_name(handle_, name_.c_str());
}

Tensor Tensor::host(DType dtype, std::size_t count, std::string name) {
  check_count(count, name);
  auto home = std::make_unique<StarpuMallocBuffer>(count * dtype_size(dtype), name);
  return Tensor(dtype, count, std::move(name), std::move(home));
}

Tensor Tensor::with_home(DType dtype, std::size_t count, std::string name, std::unique_ptr<HomeBuffer> home) {
  check_count(count, name);
  if (!home) throw std::invalid_argument("tensor " + name + ": no home buffer");
  return Tensor(dtype, count, std::move(name), std::move(home));
}

Tensor Tensor::transient(DType dtype, std::size_t count, std::string name) {
  check_count(count, name);
  return Tensor(dtype, count, std::move(name), nullptr);
}

Tensor::Tensor(Tensor&& other) noexcept
    : dtype_(other.dtype_),
      count_(other.count_),
      name_(std::move(other.name_)),
      home_(std::move(other.home_)),
      handle_(std::exchange(other.handle_, nullptr)),
      pieces_(std::move(other.pieces_)),
      piece_counts_(std::move(other.piece_counts_)) {}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    release();
    dtype_ = other.dtype_;
    count_ = other.count_;
    name_ = std::move(other.name_);
    home_ = std::move(other.home_);
    handle_ = std::exchange(other.handle_, nullptr);
    pieces_ = std::move(other.pieces_);
    piece_counts_ = std::move(other.piece_counts_);
  }
  return *this;
}

Tensor::~Tensor() { release(); }

void Tensor::release() noexcept {
  if (!handle_) return;
  if (!pieces_.empty()) {
    // Gathers the pieces if they are active, then unregisters them (all submitted).
    starpu_data_partition_clean(handle_, unsigned(pieces_.size()), pieces_.data());
    TaskPriorities::instance().forget_pieces(handle_);
    pieces_.clear();
  }
  if (home_) {
    // Waits for the tasks using it and brings the latest copy home before the buffer goes.
    starpu_data_unregister(handle_);
    home_.reset();
  } else {
    starpu_data_unregister_submit(handle_);
  }
  handle_ = nullptr;
}

void Tensor::split(std::span<const std::size_t> counts) {
  if (!pieces_.empty()) throw std::logic_error("tensor " + name_ + ": already split");
  if (!home_ || home_->node() != STARPU_MAIN_RAM)
    throw std::logic_error("tensor " + name_ + ": only a tensor homed in main memory can be split");
  std::size_t total = 0;
  for (std::size_t c : counts) {
    if (c == 0) throw std::invalid_argument("tensor " + name_ + ": an empty piece");
    total += c;
  }
  if (total != count_ || counts.empty())
    throw std::invalid_argument("tensor " + name_ + ": pieces of " + std::to_string(total) + " elements, not " +
                                std::to_string(count_));
  if (counts.size() == 1) return;  // one piece is the whole tensor
  piece_counts_.assign(counts.begin(), counts.end());
  starpu_data_filter filter{};
  filter.filter_func = starpu_vector_filter_list;
  filter.nchildren = unsigned(counts.size());
  filter.filter_arg_ptr = piece_counts_.data();
  pieces_.resize(counts.size());
  starpu_data_partition_plan(handle_, &filter, pieces_.data());
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    starpu_data_set_name(pieces_[i], intern_task_name(name_ + "." + std::to_string(i)));
    TaskPriorities::instance().add_piece(pieces_[i], handle_);
  }
}

starpu_data_handle_t Tensor::piece(std::size_t i) const {
  if (i >= pieces()) throw std::out_of_range("tensor " + name_ + ": no piece " + std::to_string(i));
  return pieces_.empty() ? handle_ : pieces_[i];
}

void Tensor::invalidate_submit() { starpu_data_invalidate_submit(handle_); }

Tensor::HostView::HostView(starpu_data_handle_t handle, Access mode, std::size_t bytes)
    : handle_(handle), data_(nullptr), bytes_(bytes) {
  // On main memory explicitly: starpu_data_acquire would acquire on the home node, which for a
  // tensor homed on a disk node has no pointer to give.
  if (starpu_data_acquire_on_node(handle_, STARPU_MAIN_RAM, starpu_mode(mode)) != 0)
    throw std::runtime_error("starpu_data_acquire_on_node failed");
  data_ = reinterpret_cast<void*>(starpu_vector_get_local_ptr(handle_));
}

Tensor::HostView::~HostView() { starpu_data_release_on_node(handle_, STARPU_MAIN_RAM); }

}  // namespace starzero
