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

// A piece split into blocks of columns (Tensor::split_columns): the matrix sub-handles, and what
// the filter reads when StarPU plans them.
struct ColumnBlocksFilter {
  std::size_t width;
  std::vector<Tensor::Columns> blocks;
};

// StarPU filter: block `id` of a vector seen as rows of `width` elements, as a matrix interface
// (nx = the block's columns, ny = the rows). Where the vector has a buffer, the block is a view
// into it with leading dimension `width`; elsewhere StarPU allocates it packed.
void column_block_filter(void* father_interface, void* child_interface, starpu_data_filter* filter, unsigned id,
                         unsigned) {
  const auto* vector = static_cast<const starpu_vector_interface*>(father_interface);
  auto* matrix = static_cast<starpu_matrix_interface*>(child_interface);
  const auto* split = static_cast<const ColumnBlocksFilter*>(filter->filter_arg_ptr);
  const Tensor::Columns& block = split->blocks[id];
  matrix->id = STARPU_MATRIX_INTERFACE_ID;
  matrix->nx = uint32_t(block.count);
  matrix->ny = uint32_t(vector->nx / split->width);
  matrix->elemsize = vector->elemsize;
  matrix->allocsize = std::size_t(matrix->nx) * matrix->ny * matrix->elemsize;
  if (vector->dev_handle) {
    const std::size_t offset = block.first * vector->elemsize;
    if (vector->ptr) matrix->ptr = vector->ptr + offset;
    matrix->ld = uint32_t(split->width);
    matrix->dev_handle = vector->dev_handle;
    matrix->offset = vector->offset + offset;
  }
}

starpu_data_interface_ops* matrix_child_ops(starpu_data_filter*, unsigned) { return &starpu_interface_matrix_ops; }

}  // namespace

struct Tensor::ColumnSplit {
  ColumnBlocksFilter filter;
  std::vector<starpu_data_handle_t> blocks;
};

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
      piece_counts_(std::move(other.piece_counts_)),
      column_splits_(std::move(other.column_splits_)) {}

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
    column_splits_ = std::move(other.column_splits_);
  }
  return *this;
}

Tensor::~Tensor() { release(); }

void Tensor::release() noexcept {
  if (!handle_) return;
  // The blocks of columns first: a piece's plan goes before the plan that made the piece.
  for (std::size_t i = 0; i < column_splits_.size(); ++i) {
    if (!column_splits_[i]) continue;
    std::vector<starpu_data_handle_t>& blocks = column_splits_[i]->blocks;
    starpu_data_partition_clean(piece(i), unsigned(blocks.size()), blocks.data());
    TaskPriorities::instance().forget_pieces(piece(i));
  }
  column_splits_.clear();
  if (!pieces_.empty()) {
    // Gathers the pieces if they are active, then unregisters them (all submitted).
    starpu_data_partition_clean(handle_, unsigned(pieces_.size()), pieces_.data());
    TaskPriorities::instance().forget_pieces(handle_);
    pieces_.clear();
  }
  // Waits for the tasks using it and, with a home, brings the latest copy there before the buffer
  // goes. Synchronous for a transient tensor too: StarPU 1.3.10 postpones the unregistration a
  // starpu_data_unregister_submit asks for while a queued prefetch holds the handle, and a
  // shutdown that follows finds the request still queued and aborts (data_request.h:106; dmda
  // with a GPU after a delayed update's flush, docs/sim.md).
  starpu_data_unregister(handle_);
  home_.reset();
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

void Tensor::split_columns(std::size_t i, std::size_t width, std::span<const Columns> blocks) {
  const starpu_data_handle_t whole_piece = piece(i);
  if (column_splits_.size() > i && column_splits_[i])
    throw std::logic_error("tensor " + name_ + ": piece " + std::to_string(i) + " already split by columns");
  if (!home_ || home_->node() != STARPU_MAIN_RAM)
    throw std::logic_error("tensor " + name_ + ": only a tensor homed in main memory can be split");
  const std::size_t count = starpu_vector_get_nx(whole_piece);
  if (width == 0 || count % width != 0 || width > UINT32_MAX)
    throw std::invalid_argument("tensor " + name_ + ": " + std::to_string(count) + " elements are not rows of " +
                                std::to_string(width));
  if (blocks.empty()) throw std::invalid_argument("tensor " + name_ + ": no blocks of columns");
  std::size_t next = 0;
  for (const Columns& block : blocks) {
    if (block.count == 0 || block.first < next || block.first + block.count > width)
      throw std::invalid_argument("tensor " + name_ + ": blocks of columns must be non-empty, sorted, disjoint and " +
                                  "inside rows of " + std::to_string(width));
    next = block.first + block.count;
  }
  auto split = std::make_unique<ColumnSplit>();
  split->filter = {width, std::vector<Columns>(blocks.begin(), blocks.end())};
  split->blocks.resize(blocks.size());
  starpu_data_filter filter{};
  filter.filter_func = column_block_filter;
  filter.nchildren = unsigned(blocks.size());
  filter.get_child_ops = matrix_child_ops;
  filter.filter_arg_ptr = &split->filter;
  starpu_data_partition_plan(whole_piece, &filter, split->blocks.data());
  const std::string piece_name = pieces_.empty() ? name_ : name_ + "." + std::to_string(i);
  for (std::size_t j = 0; j < split->blocks.size(); ++j) {
    starpu_data_set_name(split->blocks[j], intern_task_name(piece_name + ".c" + std::to_string(j)));
    TaskPriorities::instance().add_piece(split->blocks[j], whole_piece);
  }
  if (column_splits_.size() <= i) column_splits_.resize(pieces());
  column_splits_[i] = std::move(split);
}

std::size_t Tensor::column_blocks(std::size_t i) const {
  return i < column_splits_.size() && column_splits_[i] ? column_splits_[i]->blocks.size() : 1;
}

starpu_data_handle_t Tensor::column_block(std::size_t i, std::size_t j) const {
  if (j >= column_blocks(i))
    throw std::out_of_range("tensor " + name_ + ": piece " + std::to_string(i) + " has no block " + std::to_string(j));
  return i < column_splits_.size() && column_splits_[i] ? column_splits_[i]->blocks[j] : piece(i);
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
