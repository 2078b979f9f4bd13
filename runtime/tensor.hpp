#pragma once
// A typed, named 1-D tensor registered with StarPU as a vector data handle.
//
// Two kinds:
//  - Tensor::host: owns a home buffer in main memory (starpu_malloc: pinned when CUDA workers
//    exist) that survives tasks; read back with a HostView. Tensor::with_home takes any other
//    home (a pinned NUMA-local buffer, an object on a StarPU disk node) as a HomeBuffer.
//  - Tensor::transient: no home buffer; StarPU allocates it wherever the first writer runs and
//    the graph frees it with invalidate_submit() after its last reader ("free right after use"
//    is part of the task graph, not a side effect).
// A host tensor can be split into consecutive pieces (split()), which tasks use as handles of
// their own beside the whole tensor, and a piece further into blocks of columns
// (split_columns(): 2-D sub-handles, for tasks that write strided parts of every row).
// Every Tensor must be destroyed before the Session that created it.
#include <starpu.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/dtype.hpp"

namespace starzero {

enum class Access { read, write, readwrite };

// The owner of a tensor's home copy: where it lives (a StarPU memory node) and its address
// there as StarPU's vector interface wants it. Destroyed after the handle is unregistered (which
// writes the latest value back home).
class HomeBuffer {
 public:
  virtual ~HomeBuffer() = default;
  virtual unsigned node() const = 0;
  virtual std::uintptr_t address() const = 0;
};

class Tensor {
 public:
  static Tensor host(DType dtype, std::size_t count, std::string name);
  static Tensor transient(DType dtype, std::size_t count, std::string name);
  // A tensor whose home copy is `home` (at least count·dtype_size bytes).
  static Tensor with_home(DType dtype, std::size_t count, std::string name, std::unique_ptr<HomeBuffer> home);

  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor();

  DType dtype() const { return dtype_; }
  std::size_t count() const { return count_; }
  std::size_t bytes() const { return count_ * dtype_size(dtype_); }
  const std::string& name() const { return name_; }
  starpu_data_handle_t handle() const { return handle_; }
  bool is_transient() const { return home_ == nullptr; }
  // The memory node of the home copy (STARPU_MAIN_RAM, a disk node); -1 for a transient tensor.
  int home_node() const { return home_ ? int(home_->node()) : -1; }

  // Splits the tensor into consecutive pieces of `counts` elements (they add up to count()):
  // StarPU sub-handles of one asynchronous partition plan. A task may use the whole tensor or
  // any of its pieces, and StarPU submits the partition and unpartition steps that the graph
  // needs between them ("partition"/"unpartition" tasks in a trace); in main memory the pieces
  // are views of the whole, so nothing is copied there. Host tensors only: StarPU 1.3 gathers
  // the pieces on the home node, which a transient tensor lacks. Once per tensor.
  void split(std::span<const std::size_t> counts);
  // 1 for a tensor that is not split; piece(0) is then the whole tensor.
  std::size_t pieces() const { return pieces_.empty() ? 1 : pieces_.size(); }
  starpu_data_handle_t piece(std::size_t i) const;

  // Columns [first, first + count) of a tensor seen as a row-major matrix.
  struct Columns {
    std::size_t first = 0, count = 0;
  };
  // Splits piece i (the whole tensor when it is not split), seen as rows of `width` elements,
  // into blocks of columns (sorted, disjoint, inside the row): StarPU matrix sub-handles
  // (leading dimension `width` where they are views) of a second partition plan below the
  // piece's. A task may then write a strided block of every row of the piece while other tasks
  // write the other blocks; a task on the piece or on the whole tensor waits for every block's
  // writers (StarPU submits the switches, as for the pieces). In main memory the blocks are
  // views: nothing is copied; elsewhere (a GPU) a block is allocated packed, with its own
  // leading dimension. Once per piece.
  void split_columns(std::size_t i, std::size_t width, std::span<const Columns> blocks);
  // Block j of piece i (split_columns); the piece itself when that piece is not split.
  starpu_data_handle_t column_block(std::size_t i, std::size_t j) const;
  std::size_t column_blocks(std::size_t i) const;

  // Submits "the content is dead" after all tasks submitted so far that use it: StarPU frees
  // its copies. A later writer makes it live again.
  void invalidate_submit();

  // Main-memory access from the application thread; waits for the tasks that touch the tensor
  // and holds it until the view dies.
  class HostView {
   public:
    HostView(starpu_data_handle_t handle, Access mode, std::size_t bytes);
    HostView(const HostView&) = delete;
    HostView& operator=(const HostView&) = delete;
    ~HostView();
    template <class T>
    std::span<T> as() const {
      return {static_cast<T*>(data_), bytes_ / sizeof(T)};
    }

   private:
    starpu_data_handle_t handle_;
    void* data_;
    std::size_t bytes_;
  };
  HostView view(Access mode) const { return HostView(handle_, mode, bytes()); }

 private:
  Tensor(DType dtype, std::size_t count, std::string name, std::unique_ptr<HomeBuffer> home);
  void release() noexcept;

  DType dtype_ = DType::f32;
  std::size_t count_ = 0;
  std::string name_;
  std::unique_ptr<HomeBuffer> home_;  // nullptr for a transient tensor
  starpu_data_handle_t handle_ = nullptr;
  std::vector<starpu_data_handle_t> pieces_;  // empty: not split
  std::vector<std::uint32_t> piece_counts_;   // the filter's argument, kept for StarPU
  struct ColumnSplit;
  std::vector<std::unique_ptr<ColumnSplit>> column_splits_;  // per piece; null: not split by columns
};

}  // namespace starzero
