// Tensor factories, views and data operations. Data operations dispatch to the device's
// registered kernels; transfers between devices go through the CPU.
#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/allocator.h"
#include "core/device_kernels.h"
#include "core/autograd_meta.h"
#include "core/device_activity.h"
#include "core/error.h"
#include "core/kernel_census.h"

namespace headroom {

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset,
               DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype),
      autograd_meta_(std::make_shared<AutogradMeta>()) {}

void Tensor::check_defined(const char* what) const {
  if (!defined()) throw Error(str_cat(what, ": the tensor is undefined"));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t d : shape) {
    if (d < 0) throw ValueError(str_cat("empty: shape ", shape, " has a negative dimension"));
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      throw ValueError(str_cat("empty: shape ", shape, " of ", dtype_name(dtype),
                               " needs more than 2^63 bytes"));
    }
  }
  auto storage = std::make_shared<Storage>(static_cast<size_t>(bytes), device);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::arange(double start, double end, double step, DType dtype, Device device) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step)) {
    throw ValueError(str_cat("arange: start ", start, ", end ", end, " and step ", step,
                             " must be finite and step non-zero"));
  }
  if ((step > 0 && end < start) || (step < 0 && end > start)) {
    throw ValueError(
        str_cat("arange: step ", step, " does not lead from start ", start, " to end ", end));
  }
  const int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty({n}, dtype, device);
  if (n > 0) {
    count_tensor_kernel("tensor", "arange", device, static_cast<int64_t>(t.nbytes()));
    device_kernels(device).arange(t, start, step);
  }
  return t;
}

Tensor Tensor::rand(const Shape& shape, DType dtype, Device device, Generator* generator) {
  Tensor t = empty(shape, dtype, device);
  t.uniform_(0.0, 1.0, generator);
  return t;
}

Tensor Tensor::randn(const Shape& shape, DType dtype, Device device, Generator* generator) {
  Tensor t = empty(shape, dtype, device);
  t.normal_(0.0, 1.0, generator);
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape, DType dtype,
                           Device device) {
  if (static_cast<int64_t>(values.size()) != shape.numel()) {
    throw ValueError(str_cat("from_floats: ", values.size(), " values do not fill shape ", shape,
                             " (", shape.numel(), " elements)"));
  }
  Tensor host = empty(shape, DType::f32, kCPU);
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(float));
  return host.to(dtype).to(device);
}

Tensor Tensor::from_ints(const std::vector<int64_t>& values, const Shape& shape, DType dtype,
                         Device device) {
  if (static_cast<int64_t>(values.size()) != shape.numel()) {
    throw ValueError(str_cat("from_ints: ", values.size(), " values do not fill shape ", shape,
                             " (", shape.numel(), " elements)"));
  }
  Tensor host = empty(shape, DType::i64, kCPU);
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(int64_t));
  return host.to(dtype).to(device);
}

int64_t Tensor::size(int64_t dim) const { return shape_[wrap_dim(dim, ndim())]; }

int64_t Tensor::stride(int64_t dim) const { return strides_[wrap_dim(dim, ndim())]; }

Device Tensor::device() const {
  check_defined("device");
  return storage_->device();
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] == 0) return true;
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(element_size());
}

Tensor Tensor::as_strided(Shape shape, Strides strides, int64_t offset) const {
  return Tensor(storage_, std::move(shape), std::move(strides), offset, dtype_);
}

namespace {

// PyTorch's computeStride: the strides that let `new_shape` view memory laid out as
// (old_shape, old_strides), or false when the view would need a copy.
bool view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& new_shape,
                  Strides* new_strides) {
  *new_strides = new_shape;
  // No elements, or one element of a 0-d tensor: any layout of the new shape views it.
  if (old_shape.numel() == 0 || old_shape.ndim() == 0) {
    *new_strides = contiguous_strides(new_shape);
    return true;
  }
  int view_d = new_shape.ndim() - 1;
  int64_t chunk_base_stride = old_strides.ndim() ? old_strides[old_strides.ndim() - 1] : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = old_shape.ndim() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    // A chunk of contiguous dims ends where the next outer dim is not laid out right after it.
    if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        (*new_strides)[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  check_defined("view");
  const Shape target = infer_size(shape, numel());
  Strides strides;
  if (!view_strides(shape_, strides_, target, &strides)) {
    throw ValueError(str_cat("view: shape ", target, " is not compatible with the strides ",
                             strides_, " of a tensor of shape ", shape_,
                             "; use reshape (which copies)"));
  }
  return as_strided(target, strides, offset_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  const Shape target = infer_size(shape, numel());
  Strides strides;
  if (view_strides(shape_, strides_, target, &strides)) return as_strided(target, strides, offset_);
  return clone().view(target);
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  check_defined("narrow");
  if (ndim() == 0) throw IndexError("narrow: cannot narrow a 0-dimensional tensor");
  const int d = wrap_dim(dim, ndim());
  const int64_t extent = shape_[d];
  if (start < 0) start += extent;
  if (start < 0 || length < 0 || start + length > extent) {
    throw IndexError(str_cat("narrow: start ", start, " and length ", length, " exceed dimension ",
                             d, " of size ", extent));
  }
  Shape shape = shape_;
  shape[d] = length;
  return as_strided(shape, strides_, offset_ + start * strides_[d]);
}

Tensor Tensor::joined_view(const std::vector<Tensor>& pieces, int64_t dim) {
  if (pieces.empty() || !pieces[0].defined() || pieces[0].ndim() == 0) return Tensor();
  const Tensor& first = pieces[0];
  const int d = wrap_dim(dim, first.ndim());
  Shape shape = first.shape_;
  int64_t next_offset = first.offset_;
  shape[d] = 0;
  for (const Tensor& piece : pieces) {
    if (!piece.defined() || piece.storage_ != first.storage_ || piece.dtype_ != first.dtype_ ||
        piece.strides_ != first.strides_ || piece.offset_ != next_offset) {
      return Tensor();
    }
    for (int i = 0; i < first.ndim(); ++i) {
      if (i != d && piece.shape_[i] != first.shape_[i]) return Tensor();
    }
    next_offset += piece.shape_[d] * first.strides_[d];
    shape[d] += piece.shape_[d];
  }
  return first.as_strided(shape, first.strides_, first.offset_);
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  check_defined("select");
  if (ndim() == 0) throw IndexError("select: cannot select from a 0-dimensional tensor");
  const int d = wrap_dim(dim, ndim());
  const int64_t extent = shape_[d];
  if (index < -extent || index >= extent) {
    throw IndexError(str_cat("select: index ", index, " is out of range for dimension ", d,
                             " of size ", extent));
  }
  if (index < 0) index += extent;
  Shape shape = shape_;
  Strides strides = strides_;
  const int64_t offset = offset_ + index * strides_[d];
  shape.erase(d);
  strides.erase(d);
  return as_strided(shape, strides, offset);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  check_defined("transpose");
  const int a = wrap_dim(dim0, ndim()), b = wrap_dim(dim1, ndim());
  Shape shape = shape_;
  Strides strides = strides_;
  if (ndim() > 0) {
    std::swap(shape[a], shape[b]);
    std::swap(strides[a], strides[b]);
  }
  return as_strided(shape, strides, offset_);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  check_defined("permute");
  if (static_cast<int>(dims.size()) != ndim()) {
    throw ValueError(
        str_cat("permute: ", dims.size(), " dimensions given for a tensor of ", ndim()));
  }
  Shape shape, strides;
  std::vector<bool> seen(ndim(), false);
  for (int64_t dim : dims) {
    const int d = wrap_dim(dim, ndim());
    if (seen[d]) throw ValueError(str_cat("permute: dimension ", d, " appears twice"));
    seen[d] = true;
    shape.push_back(shape_[d]);
    strides.push_back(strides_[d]);
  }
  return as_strided(shape, strides, offset_);
}

Tensor Tensor::expand(const Shape& shape) const {
  check_defined("expand");
  if (shape.ndim() < ndim()) {
    throw ValueError(
        str_cat("expand: shape ", shape, " has fewer dimensions than the tensor's ", shape_));
  }
  Shape out_shape, out_strides;
  const int lead = shape.ndim() - ndim();
  for (int i = 0; i < shape.ndim(); ++i) {
    const int src = i - lead;
    int64_t size = shape[i];
    if (src < 0) {
      if (size < 0)
        throw ValueError(str_cat("expand: -1 is not allowed in new leading dimension ", i));
      out_shape.push_back(size);
      out_strides.push_back(0);
      continue;
    }
    if (size == -1) size = shape_[src];
    if (size == shape_[src]) {
      out_shape.push_back(size);
      out_strides.push_back(strides_[src]);
    } else if (shape_[src] == 1) {
      out_shape.push_back(size);
      out_strides.push_back(0);
    } else {
      throw ValueError(str_cat("expand: dimension ", i, " of size ", shape_[src],
                               " cannot be expanded to ", size, " (tensor shape ", shape_,
                               ", target ", shape, ")"));
    }
  }
  return as_strided(out_shape, out_strides, offset_);
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  check_defined("unsqueeze");
  const int d = wrap_dim(dim, ndim() + 1);
  Shape shape = shape_;
  Strides strides = strides_;
  const int64_t stride = d < ndim() ? shape_[d] * strides_[d] : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  return as_strided(shape, strides, offset_);
}

Tensor Tensor::squeeze(int64_t dim) const {
  check_defined("squeeze");
  if (ndim() == 0) return *this;
  const int d = wrap_dim(dim, ndim());
  if (shape_[d] != 1) return *this;
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(d);
  strides.erase(d);
  return as_strided(shape, strides, offset_);
}

Tensor Tensor::contiguous() const {
  check_defined("contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype, Overflow overflow) const {
  check_defined("to");
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, device());
  out.copy_(*this, overflow);
  return out;
}

Tensor Tensor::to(Device device, bool non_blocking) const {
  check_defined("to");
  if (device == this->device()) return *this;
  Tensor out = empty(shape_, dtype_, device);
  if (non_blocking && !device.is_cpu() && is_pinned() && is_contiguous() && numel() > 0) {
    // Queued on the stream; the host goes on (a dry run counts it as the GPU run makes it).
    count_tensor_kernel("transfer", "host_to_device_async", device, static_cast<int64_t>(nbytes()));
    if (device.is_cuda()) {
      pinned_allocator()->copy_to_device_async(out.data_ptr(), device, data_ptr(), nbytes());
    }
    return out;
  }
  out.copy_(*this);
  return out;
}

Tensor Tensor::pin_memory() const {
  check_defined("pin_memory");
  if (!device().is_cpu()) {
    throw ValueError(
        str_cat("pin_memory: the tensor is on ", device(), "; only CPU tensors can be pinned"));
  }
  PinnedAllocator* pinned = pinned_allocator();
  if (!pinned) {
    throw NotImplementedError(
        "pin_memory: this build of headroom has no CUDA backend, and page-locked memory exists "
        "only for copies to a GPU");
  }
  if (is_pinned()) return *this;
  auto storage = std::make_shared<Storage>(nbytes(), kCPU, *pinned);
  Tensor out(std::move(storage), shape_, contiguous_strides(shape_), 0, dtype_);
  out.copy_(*this);
  return out;
}

bool Tensor::is_pinned() const {
  return defined() && device().is_cpu() && storage_->allocator() == pinned_allocator() &&
         storage_->allocator() != nullptr;
}

void Tensor::record_stream(StreamId stream) const {
  check_defined("record_stream");
  if (storage_->data()) storage_->allocator()->record_stream(storage_->data(), stream);
}

const Tensor& Tensor::fill_(double value) const {
  check_defined("fill_");
  storage_->bump_version();
  if (numel() > 0) {
    count_tensor_kernel("tensor", "fill", device(), static_cast<int64_t>(nbytes()));
    const KernelLaunchTiming timing("tensor", "fill", device());
    device_kernels(device()).fill(*this, value);
  }
  return *this;
}

const Tensor& Tensor::add_(const Tensor& src) const {
  check_defined("add_");
  src.check_defined("add_ source");
  if (!is_floating(dtype_) || !is_floating(src.dtype())) {
    throw ValueError(str_cat("add_: needs floating tensors, not ", dtype_name(dtype_),
                             " += ", dtype_name(src.dtype())));
  }
  if (!is_contiguous()) throw ValueError("add_: the destination must be contiguous");
  if (src.device() != device()) {
    throw ValueError(str_cat("add_: source on ", src.device(), ", destination on ", device()));
  }
  const Tensor source = src.shape() == shape_ ? src : src.expand(shape_);
  storage_->bump_version();
  if (numel() > 0) {
    count_tensor_kernel("tensor", "accumulate", device(),
                        2 * static_cast<int64_t>(nbytes()) +
                            numel() * static_cast<int64_t>(dtype_size(source.dtype())),
                        false, has_strided_layout(source));
    const KernelLaunchTiming timing("tensor", "accumulate", device());
    device_kernels(device()).accumulate(*this, source);
  }
  return *this;
}

const Tensor& Tensor::copy_async_(const Tensor& src) const {
  check_defined("copy_async_");
  src.check_defined("copy_async_ source");
  const Device dst_device = device(), src_device = src.device();
  const bool to_host = dst_device.is_cpu() && !src_device.is_cpu();
  const bool to_device = src_device.is_cpu() && !dst_device.is_cpu();
  const Device other = to_host ? src_device : dst_device;
  const DeviceKernels* kernels = (to_host || to_device) ? find_device_kernels(other.type) : nullptr;
  const bool queued =
      kernels && (to_host ? kernels->copy_to_cpu_async : kernels->copy_from_cpu_async);
  if (!queued || src.shape() != shape_ || src.dtype() != dtype_ || !is_contiguous() ||
      !src.is_contiguous() || numel() == 0) {
    return copy_(src);
  }
  storage_->bump_version();
  count_tensor_kernel("transfer", to_host ? "device_to_host_async" : "host_to_device_async", other,
                      static_cast<int64_t>(nbytes()));
  if (to_host) {
    kernels->copy_to_cpu_async(*this, src);
  } else {
    kernels->copy_from_cpu_async(*this, src);
  }
  return *this;
}

const Tensor& Tensor::copy_(const Tensor& src, Overflow overflow) const {
  check_defined("copy_");
  storage_->bump_version();
  src.check_defined("copy_ source");
  const Tensor source = src.shape() == shape_ ? src : src.expand(shape_);
  if (numel() == 0) return *this;
  const Device dst_device = device(), src_device = source.device();
  if (dst_device == src_device) {
    count_tensor_kernel(
        source.dtype() == dtype_ ? "copy" : "cast", "copy", dst_device,
        static_cast<int64_t>(nbytes()) + numel() * static_cast<int64_t>(dtype_size(source.dtype())),
        false, has_strided_layout(*this) || has_strided_layout(source));
    const KernelLaunchTiming timing("tensor", source.dtype() == dtype_ ? "copy" : "cast",
                                    dst_device);
    device_kernels(dst_device).copy(*this, source, overflow);
    return *this;
  }
  // A synchronous transfer (copy_from_cpu / copy_to_cpu wait for the stream): a host sync.
  count_tensor_kernel("transfer", dst_device.is_cpu() ? "device_to_host" : "host_to_device",
                      dst_device.is_cpu() ? src_device : dst_device, static_cast<int64_t>(nbytes()),
                      /*host_sync=*/true);
  if (dst_device.is_meta()) return *this;  // nothing to write, as PyTorch
  if (src_device.is_meta()) {
    throw Error(str_cat("copy_: cannot copy out of a meta tensor into ", dst_device,
                        ": meta tensors have no data"));
  }
  // Across devices: bring the source to the CPU (converted, contiguous), then to the target.
  Tensor host;
  if (src_device.is_cpu()) {
    host = source.to(dtype_, overflow).contiguous();
  } else {
    const DeviceKernels& from = device_kernels(src_device);
    if (!from.copy_to_cpu) {
      throw NotImplementedError(str_cat("copy_: device ", src_device, " cannot copy to the CPU"));
    }
    Tensor packed = source.contiguous();
    if (dst_device.is_cpu() && is_contiguous() && source.dtype() == dtype_) {
      from.copy_to_cpu(*this, packed);  // straight into place, no staging copy
      return *this;
    }
    host = empty(shape_, source.dtype(), kCPU);
    from.copy_to_cpu(host, packed);
    host = host.to(dtype_, overflow);
  }
  if (dst_device.is_cpu()) {
    device_kernels(kCPU).copy(*this, host, overflow);
    return *this;
  }
  const DeviceKernels& to = device_kernels(dst_device);
  if (!to.copy_from_cpu) {
    throw NotImplementedError(str_cat("copy_: device ", dst_device, " cannot copy from the CPU"));
  }
  if (is_contiguous()) {
    to.copy_from_cpu(*this, host);
  } else {
    Tensor staged = empty(shape_, dtype_, dst_device);
    to.copy_from_cpu(staged, host);
    to.copy(*this, staged, overflow);
  }
  return *this;
}

namespace {

// Reserves numel() numbers of the stream and draws them in row-major order, whatever the
// tensor's strides: straight into a contiguous tensor, else through a packed temporary.
template <typename Draw>
void draw_into(const Tensor& t, Generator* generator, Draw draw) {
  const PhiloxState rng = (generator ? *generator : default_generator()).reserve(t.numel());
  if (t.numel() == 0) return;
  if (t.is_contiguous()) {
    draw(t, rng);
    return;
  }
  Tensor packed = Tensor::empty(t.shape(), t.dtype(), t.device());
  draw(packed, rng);
  t.copy_(packed);
}

}  // namespace

const Tensor& Tensor::uniform_(double low, double high, Generator* generator) const {
  check_defined("uniform_");
  storage_->bump_version();
  if (!is_floating(dtype_)) {
    throw ValueError(str_cat("uniform_: needs a floating dtype, not ", dtype_name(dtype_)));
  }
  if (!(low <= high)) {
    throw ValueError(str_cat("uniform_: low ", low, " must not exceed high ", high));
  }
  const DeviceKernels& kernels = device_kernels(device());
  count_tensor_kernel("tensor", "uniform", device(), static_cast<int64_t>(nbytes()));
  draw_into(*this, generator,
            [&](const Tensor& dst, PhiloxState rng) { kernels.uniform(dst, rng, low, high); });
  return *this;
}

const Tensor& Tensor::normal_(double mean, double std, Generator* generator) const {
  check_defined("normal_");
  storage_->bump_version();
  if (!is_floating(dtype_)) {
    throw ValueError(str_cat("normal_: needs a floating dtype, not ", dtype_name(dtype_)));
  }
  if (!(std >= 0)) throw ValueError(str_cat("normal_: std ", std, " must be >= 0"));
  const DeviceKernels& kernels = device_kernels(device());
  count_tensor_kernel("tensor", "normal", device(), static_cast<int64_t>(nbytes()));
  draw_into(*this, generator,
            [&](const Tensor& dst, PhiloxState rng) { kernels.normal(dst, rng, mean, std); });
  return *this;
}

std::vector<float> Tensor::to_float_vector() const {
  check_defined("to_float_vector");
  Tensor host = to(kCPU).to(DType::f32).contiguous();
  const float* p = host.data<float>();
  return std::vector<float>(p, p + host.numel());
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  check_defined("to_int64_vector");
  Tensor host = to(kCPU).to(DType::i64).contiguous();
  const int64_t* p = host.data<int64_t>();
  return std::vector<int64_t>(p, p + host.numel());
}

double Tensor::item() const {
  check_defined("item");
  if (numel() != 1) {
    throw ValueError(str_cat("item: the tensor has ", numel(), " elements, not 1"));
  }
  if (is_floating(dtype_)) return to_float_vector()[0];
  return static_cast<double>(to_int64_vector()[0]);
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) { return out << tensor.str(); }

}  // namespace headroom
