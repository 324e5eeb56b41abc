// Tensor: a view (shape, strides, offset, dtype) onto a shared Storage on some device. Views
// share storage; data operations go to the device's registered kernels (see device_kernels.h),
// so the same code runs on the CPU, a GPU, or the meta device, where nothing is computed.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/float_formats.h"
#include "core/generator.h"
#include "core/shape.h"
#include "core/storage.h"

namespace headroom {

class Node;
struct AutogradMeta;

class Tensor {
 public:
  // An undefined tensor (no storage); most methods throw on it.
  Tensor() = default;

  // Uninitialised memory from the device's allocator.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = kCPU);
  // start, start + step, ... while < end (> end for a negative step), as torch.arange.
  static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32,
                       Device device = kCPU);
  // Uniform in [low, high) and normal(mean, std) from `generator` (the default one if null).
  static Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = kCPU,
                     Generator* generator = nullptr);
  static Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = kCPU,
                      Generator* generator = nullptr);
  // Copies host values into a new tensor of `dtype` on `device`.
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::f32, Device device = kCPU);
  static Tensor from_ints(const std::vector<int64_t>& values, const Shape& shape,
                          DType dtype = DType::i64, Device device = kCPU);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int ndim() const { return shape_.ndim(); }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const;
  int64_t storage_offset() const { return offset_; }
  size_t element_size() const { return dtype_size(dtype_); }
  // Bytes of the elements this view covers if it were contiguous.
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Address of the first element. On the meta device an address with no memory behind it.
  void* data_ptr() const;
  // Typed host pointer; the tensor must be on the CPU and T must be the dtype's storage type.
  template <typename T>
  T* data() const;

  // Views (no copy). ValueError / IndexError name the argument and its limit.
  Tensor view(const Shape& shape) const;     // -1 infers one dimension; needs compatible strides
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dimension; new leading dims allowed
  // The view whose narrows along `dim` are `pieces`, in order, when they are adjacent views of
  // one storage with one dtype and the same strides and other sizes (as split's outputs are);
  // undefined otherwise. Split's backward hands gradients written into one buffer on this way.
  static Tensor joined_view(const std::vector<Tensor>& pieces, int64_t dim);
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten() const { return reshape({-1}); }

  // Copies (or this tensor itself when nothing needs to change, as PyTorch does).
  Tensor contiguous() const;
  Tensor clone() const;
  // `overflow` decides what values beyond a narrower floating format's range become: ieee (inf,
  // or NaN for f8_e4m3fn, as PyTorch) or saturate (±max, as Transformer Engine).
  Tensor to(DType dtype, Overflow overflow = Overflow::ieee) const;
  // With `non_blocking`, a copy from pinned memory (pin_memory()) to a GPU is queued on the
  // device's current stream and this returns before it has run, as PyTorch's; from other memory
  // the flag changes nothing.
  Tensor to(Device device, bool non_blocking = false) const;
  // A copy in page-locked host memory (this tensor itself when it is pinned already), from which
  // to(gpu, non_blocking) copies asynchronously. Only for CPU tensors (ValueError otherwise);
  // NotImplementedError in a build without the CUDA backend, as PyTorch raises there.
  Tensor pin_memory() const;
  bool is_pinned() const;
  // Tells the allocator that work queued on `stream` (not the one the memory was allocated on)
  // uses this tensor's memory, so that it is reused only after that work has run, as
  // torch.Tensor.record_stream (Note [Streams and reuse] in memory/caching_allocator.h).
  void record_stream(StreamId stream) const;

  // In-place data operations; they return *this. Tensors are handles, so these are const.
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const { return fill_(0.0); }
  // Broadcasts src to this shape; any dtypes and devices.
  const Tensor& copy_(const Tensor& src, Overflow overflow = Overflow::ieee) const;
  // copy_ queued on the current stream of the device side, returning before it has run, when
  // one side is the CPU and the other a device with asynchronous transfers
  // (DeviceKernels::copy_*_async), both contiguous, of one dtype and shape: the CPU side must be
  // page-locked (pin_memory, or the pinned host pool), and the caller keeps both from reuse
  // until the stream has run it (record_stream). Otherwise copy_ itself (synchronous).
  const Tensor& copy_async_(const Tensor& src) const;
  // this += src (broadcast to this shape), computed in fp32; this must be contiguous and floating.
  const Tensor& add_(const Tensor& src) const;
  const Tensor& uniform_(double low = 0.0, double high = 1.0, Generator* generator = nullptr) const;
  const Tensor& normal_(double mean = 0.0, double std = 1.0, Generator* generator = nullptr) const;

  // Host copies of the values, in row-major order.
  std::vector<float> to_float_vector() const;
  std::vector<int64_t> to_int64_vector() const;
  // The single value of a one-element tensor.
  double item() const;

  // PyTorch-like text: tensor([[1.0000, 2.0000]], dtype=bf16)
  std::string str() const;

  // Autograd state (see core/autograd_meta.h), shared by every copy of this handle; each view
  // made by the methods above is a new tensor with its own.
  bool requires_grad() const;
  // Only leaves (tensors no op produced) may change the flag, as in PyTorch.
  const Tensor& set_requires_grad(bool requires_grad = true) const;
  // The accumulated gradient; undefined until backward reaches this leaf.
  Tensor grad() const;
  // Replaces (or, with an undefined tensor, drops) the gradient; shape and device must match.
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<Node>& grad_fn() const;
  bool is_leaf() const { return grad_fn() == nullptr; }
  // The same view without autograd state: shares the data, records nothing.
  Tensor detach() const;
  AutogradMeta* autograd_meta() const { return autograd_meta_.get(); }
  AutogradMeta& ensure_autograd_meta() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset,
         DType dtype);
  Tensor as_strided(Shape shape, Strides strides, int64_t offset) const;
  void check_defined(const char* what) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::f32;
  // Created with the tensor, so every copy of the handle shares it (null only when undefined).
  mutable std::shared_ptr<AutogradMeta> autograd_meta_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

}  // namespace headroom

#include "core/tensor_inl.h"
