#include "runtime/tensor.hpp"

#include <stdexcept>
#include <utility>

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

}  // namespace

Tensor::Tensor(DType dtype, std::size_t count, std::string name, void* home)
    : dtype_(dtype), count_(count), name_(std::move(name)), home_(home) {
  const int home_node = home ? STARPU_MAIN_RAM : -1;
  starpu_vector_data_register(&handle_, home_node, reinterpret_cast<uintptr_t>(home), uint32_t(count),
                              dtype_size(dtype));
  starpu_data_set_name(handle_, name_.c_str());
}

Tensor Tensor::host(DType dtype, std::size_t count, std::string name) {
  if (count == 0) throw std::invalid_argument("tensor " + name + ": zero elements");
  if (count > UINT32_MAX) throw std::invalid_argument("tensor " + name + ": more than 2^32-1 elements");
  void* home = nullptr;
  if (starpu_malloc(&home, count * dtype_size(dtype)) != 0 || !home)
    throw std::runtime_error("tensor " + name + ": cannot allocate " + std::to_string(count * dtype_size(dtype)) +
                             " bytes");
  return Tensor(dtype, count, std::move(name), home);
}

Tensor Tensor::transient(DType dtype, std::size_t count, std::string name) {
  if (count == 0) throw std::invalid_argument("tensor " + name + ": zero elements");
  if (count > UINT32_MAX) throw std::invalid_argument("tensor " + name + ": more than 2^32-1 elements");
  return Tensor(dtype, count, std::move(name), nullptr);
}

Tensor::Tensor(Tensor&& other) noexcept
    : dtype_(other.dtype_),
      count_(other.count_),
      name_(std::move(other.name_)),
      home_(std::exchange(other.home_, nullptr)),
      handle_(std::exchange(other.handle_, nullptr)) {}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    release();
    dtype_ = other.dtype_;
    count_ = other.count_;
    name_ = std::move(other.name_);
    home_ = std::exchange(other.home_, nullptr);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Tensor::~Tensor() { release(); }

void Tensor::release() noexcept {
  if (!handle_) return;
  if (home_) {
    // Waits for the tasks using it and brings the latest copy home before the buffer goes.
    starpu_data_unregister(handle_);
    starpu_free(home_);
  } else {
    starpu_data_unregister_submit(handle_);
  }
  handle_ = nullptr;
  home_ = nullptr;
}

void Tensor::invalidate_submit() { starpu_data_invalidate_submit(handle_); }

Tensor::HostView::HostView(starpu_data_handle_t handle, Access mode, std::size_t bytes)
    : handle_(handle), data_(nullptr), bytes_(bytes) {
  if (starpu_data_acquire(handle_, starpu_mode(mode)) != 0) throw std::runtime_error("starpu_data_acquire failed");
  data_ = reinterpret_cast<void*>(starpu_vector_get_local_ptr(handle_));
}

Tensor::HostView::~HostView() { starpu_data_release(handle_); }

}  // namespace starzero
