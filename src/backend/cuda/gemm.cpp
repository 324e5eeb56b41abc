// The gemm entry of the CUDA op table through cuBLASLt: row-major tensors handed to a
// column-major library by swapping the operands, strided batches with broadcast (stride 0)
// operands, bias / bias+GELU / bias-gradient epilogues, one algorithm per problem chosen by
// cuBLASLt's heuristic and cached, one handle per device per thread, and the workspace of Note
// [cuBLASLt workspace].

#include <compare>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/cuda/cublaslt_library.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/backend_parts.h"
#include "memory/memory_category.h"

#define HEADROOM_CUBLAS_CHECK(expr)                                                   \
  do {                                                                                \
    const cublasStatus_t headroom_cublas_status = (expr);                             \
    if (headroom_cublas_status != CUBLAS_STATUS_SUCCESS) {                            \
      throw ::headroom::Error(                                                        \
          ::headroom::str_cat(#expr, " failed at ", __FILE__, ":", __LINE__, ": ",    \
                              cublaslt().get_status_string(headroom_cublas_status))); \
    }                                                                                 \
  } while (0)

namespace headroom::cuda {
namespace {

// ---- handles: one per device per thread, from a pool that outlives the threads (as PyTorch's
// DeviceThreadHandlePool), so a thread that ends returns its handle for the next one.

class HandlePool {
 public:
  cublasLtHandle_t acquire(int device) {
    {
      std::lock_guard lock(mutex_);
      std::vector<cublasLtHandle_t>& free = free_[device];
      if (!free.empty()) {
        cublasLtHandle_t handle = free.back();
        free.pop_back();
        return handle;
      }
    }
    DeviceGuard guard(device);  // a cuBLASLt context belongs to the device current at creation
    cublasLtHandle_t handle = nullptr;
    HEADROOM_CUBLAS_CHECK(cublaslt().create(&handle));
    return handle;
  }

  void release(int device, cublasLtHandle_t handle) {
    std::lock_guard lock(mutex_);
    free_[device].push_back(handle);
  }

 private:
  std::mutex mutex_;
  std::map<int, std::vector<cublasLtHandle_t>> free_;
};

// Never destroyed: handles are not torn down while the CUDA runtime shuts down at exit.
HandlePool& handle_pool() {
  static HandlePool* pool = new HandlePool;
  return *pool;
}

struct ThreadHandles {
  std::map<int, cublasLtHandle_t> by_device;
  ~ThreadHandles() {
    for (const auto& [device, handle] : by_device) handle_pool().release(device, handle);
  }
};

cublasLtHandle_t handle_for(int device) {
  thread_local ThreadHandles handles;
  auto it = handles.by_device.find(device);
  if (it == handles.by_device.end()) {
    it = handles.by_device.emplace(device, handle_pool().acquire(device)).first;
  }
  return it->second;
}

// ---- the workspace: see Note [cuBLASLt workspace].

void* workspace_for(int device, cudaStream_t stream) {
  static std::mutex mutex;
  // Never destroyed: the caching allocator may be gone when static destructors run.
  static auto* workspaces = new std::map<std::pair<int, cudaStream_t>, Tensor>;
  std::lock_guard lock(mutex);
  Tensor& workspace = (*workspaces)[{device, stream}];
  if (!workspace.defined()) {
    MemoryCategoryScope scope(MemoryCategory::temporaries);
    workspace = Tensor::empty(Shape{static_cast<int64_t>(kGemmWorkspaceBytes)}, DType::u8,
                              Device{DeviceType::cuda, device});
  }
  return workspace.data_ptr();
}

// ---- descriptors, owned

template <typename T, cublasStatus_t (*CublasLt::*Destroy)(T)>
struct Descriptor {
  T raw = nullptr;
  Descriptor() = default;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (raw) (cublaslt().*Destroy)(raw);
  }
};
using MatmulDesc = Descriptor<cublasLtMatmulDesc_t, &CublasLt::matmul_desc_destroy>;
using LayoutDesc = Descriptor<cublasLtMatrixLayout_t, &CublasLt::matrix_layout_destroy>;
using PreferenceDesc = Descriptor<cublasLtMatmulPreference_t, &CublasLt::matmul_preference_destroy>;

template <typename V>
void set(const MatmulDesc& desc, cublasLtMatmulDescAttributes_t attribute, const V& value) {
  HEADROOM_CUBLAS_CHECK(
      cublaslt().matmul_desc_set_attribute(desc.raw, attribute, &value, sizeof(value)));
}
template <typename V>
void set(const LayoutDesc& desc, cublasLtMatrixLayoutAttribute_t attribute, const V& value) {
  HEADROOM_CUBLAS_CHECK(
      cublaslt().matrix_layout_set_attribute(desc.raw, attribute, &value, sizeof(value)));
}
template <typename V>
void set(const PreferenceDesc& desc, cublasLtMatmulPreferenceAttributes_t attribute,
         const V& value) {
  HEADROOM_CUBLAS_CHECK(
      cublaslt().matmul_preference_set_attribute(desc.raw, attribute, &value, sizeof(value)));
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    case DType::f8_e4m3fn:
      return CUDA_R_8F_E4M3;
    case DType::f8_e5m2:
      return CUDA_R_8F_E5M2;
    default:
      check_kernel_dtype("gemm", "operand", dtype);
  }
  return CUDA_R_32F;  // not reached: check_kernel_dtype threw
}

// The alignment cuBLASLt may assume for a pointer: the largest power of two dividing it, capped
// at the preferences' default of 256 bytes (an allocator block's start). Algorithms that need
// more than a pointer has are then excluded, for a narrowed view for instance.
uint32_t alignment_of(const void* ptr) {
  uint32_t alignment = 1;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  while (alignment < 256 && address % (alignment * 2) == 0) alignment *= 2;
  return alignment;
}

// Everything cuBLASLt's heuristic sees: two problems with equal keys get the same algorithm.
struct ProblemKey {
  int device;
  bool trans_a, trans_b;
  int64_t m, n, k, batch;
  int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
  DType a_dtype, b_dtype, c_dtype, bias_dtype;  // FP8's a and b may differ
  GemmEpilogue epilogue;
  uint32_t align_a, align_b, align_c, align_bias;
  auto operator<=>(const ProblemKey&) const = default;
};

class AlgorithmCache {
 public:
  // The cached heuristic result of `key`, or the one `choose` returns (then cached).
  template <typename Choose>
  cublasLtMatmulHeuristicResult_t get(const ProblemKey& key, Choose choose) {
    {
      std::lock_guard lock(mutex_);
      auto it = cache_.find(key);
      if (it != cache_.end()) return it->second;
    }
    const cublasLtMatmulHeuristicResult_t result = choose();
    std::lock_guard lock(mutex_);
    return cache_.emplace(key, result).first->second;
  }

 private:
  std::mutex mutex_;
  std::map<ProblemKey, cublasLtMatmulHeuristicResult_t> cache_;
};

AlgorithmCache& algorithm_cache() {
  static AlgorithmCache* cache = new AlgorithmCache;
  return *cache;
}

// A column-major layout of `rows` x `cols` with leading dimension `ld`, batched when batch > 1.
void make_layout(LayoutDesc& layout, DType dtype, int64_t rows, int64_t cols, int64_t ld,
                 int64_t batch, int64_t batch_stride) {
  HEADROOM_CUBLAS_CHECK(cublaslt().matrix_layout_create(
      &layout.raw, cuda_type(dtype), static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    set(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, batch_stride);
  }
}

void check_fits_int32(const char* what, int64_t value) {
  if (value > std::numeric_limits<int32_t>::max()) {
    throw NotImplementedError(str_cat("gemm: ", what, " = ", value,
                                      " exceeds cuBLASLt's 32-bit sizes; split the product"));
  }
}

// cuBLASLt's first heuristic choice for the problem, cached by key (the alignments the
// preferences promise are the key's; cuBLASLt's A is our b). NotImplementedError with
// describe()'s words when it has none, or with allow_missing a result whose state is
// CUBLAS_STATUS_NOT_SUPPORTED (cached too, so the heuristic is asked once).
template <typename Describe>
cublasLtMatmulHeuristicResult_t chosen_algorithm(cublasLtHandle_t handle, const MatmulDesc& desc,
                                                 const LayoutDesc& layout_a,
                                                 const LayoutDesc& layout_b,
                                                 const LayoutDesc& layout_c, const ProblemKey& key,
                                                 Describe describe, bool allow_missing = false) {
  return algorithm_cache().get(key, [&] {
    PreferenceDesc preference;
    HEADROOM_CUBLAS_CHECK(cublaslt().matmul_preference_create(&preference.raw));
    set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{kGemmWorkspaceBytes});
    set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);
    set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
    set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
    set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
    // Split-K partial sums stay in fp32 (the compute type), as the CPU sums: the in-place and
    // output-type schemes keep them in c's dtype, so a bf16 c would be rounded before the last
    // partials and the bias are added. On an H200 a bf16 linear [8, 8] @ [8, 12] + bias gave
    // results on a grid of 2^-8 where one rounding of the fp32 sum is 16x finer (the likely
    // cause; not yet measured again with this mask).
    set(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
        static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    // cuBLASLt says it has no kernel either way: a success with none found, or (more often)
    // CUBLAS_STATUS_NOT_SUPPORTED from the heuristic itself.
    const cublasStatus_t status = cublaslt().matmul_algo_get_heuristic(
        handle, desc.raw, layout_a.raw, layout_b.raw, layout_c.raw, layout_c.raw, preference.raw, 1,
        &result, &found);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
      found = 0;
    } else {
      HEADROOM_CUBLAS_CHECK(status);
    }
    if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
      if (!allow_missing) throw NotImplementedError(describe());
      result.state = CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return result;
  });
}

// Runs the product: c is both cuBLASLt's C (read with beta) and D (written), in place. Row-major
// to column-major, cuBLASLt's A is b (layout_a describes b) and its B is a (layout_b).
// Returns cuBLASLt's status (try_matmul) or throws on any but success (run_matmul).
cublasStatus_t try_matmul(cublasLtHandle_t handle, const MatmulDesc& desc, float alpha, float beta,
                          const Tensor& a, const Tensor& b, const Tensor& c,
                          const LayoutDesc& layout_a, const LayoutDesc& layout_b,
                          const LayoutDesc& layout_c, const cublasLtMatmulHeuristicResult_t& chosen,
                          int device, cudaStream_t stream) {
  void* workspace = workspace_for(device, stream);
  return cublaslt().matmul(handle, desc.raw, &alpha, b.data_ptr(), layout_a.raw, a.data_ptr(),
                           layout_b.raw, &beta, c.data_ptr(), layout_c.raw, c.data_ptr(),
                           layout_c.raw, &chosen.algo, workspace, kGemmWorkspaceBytes, stream);
}

void run_matmul(cublasLtHandle_t handle, const MatmulDesc& desc, float alpha, float beta,
                const Tensor& a, const Tensor& b, const Tensor& c, const LayoutDesc& layout_a,
                const LayoutDesc& layout_b, const LayoutDesc& layout_c,
                const cublasLtMatmulHeuristicResult_t& chosen, int device, cudaStream_t stream) {
  HEADROOM_CUBLAS_CHECK(try_matmul(handle, desc, alpha, beta, a, b, c, layout_a, layout_b, layout_c,
                                   chosen, device, stream));
}

void gemm(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, float alpha, float beta,
          const Tensor& c, GemmEpilogue epilogue, const Tensor& bias) {
  // ---- what is asked: shapes, strides, dtypes, devices
  const GemmProblem problem = gemm_problem(trans_a, trans_b, a, b, c, epilogue, bias, alpha);
  const GemmMatrix &ma = problem.a, &mb = problem.b, &mc = problem.c;
  const int64_t m = problem.m, n = problem.n, k = problem.k, batch = problem.batch;
  const bool has_bias = epilogue != GemmEpilogue::none;
  if (c.device().type != DeviceType::cuda) {
    throw ValueError(str_cat("gemm: c is on ", c.device(), ", not a CUDA device"));
  }
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    // cuBLASLt does not take an empty inner dimension; c is then beta * c (+ bias), which the
    // caller writes with a fill or a copy.
    throw ValueError("gemm: k is 0; fill c instead");
  }
  check_fits_int32("m", m);
  check_fits_int32("n", n);
  check_fits_int32("k", k);
  check_fits_int32("batch", batch);

  const int device = c.device().index;
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream();
  cublasLtHandle_t handle = handle_for(device);

  // ---- row-major to column-major: c^T [n, m] = op(b)^T @ op(a)^T, so cuBLASLt's A is b and its
  // B is a. A row-major r x c matrix with leading stride ld is the column-major c x r matrix
  // with the same ld, the transpose of itself: no flag changes sides.
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  MatmulDesc desc;
  // fp32 accumulation and scaling; f32 operands get plain fp32 FMA (no TF32), as on the CPU.
  HEADROOM_CUBLAS_CHECK(cublaslt().matmul_desc_create(&desc.raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(op_a));
  set(desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(op_b));
  const bool bias_grad = is_bias_grad(epilogue);
  if (has_bias) {
    // cuBLASLt's bias runs along D's rows, which are c's columns: bias[col], as asked. Its
    // gradient of our a ([m], D's columns) is BGRADB, of our b ([n], D's rows) BGRADA.
    cublasLtEpilogue_t lt_epilogue = CUBLASLT_EPILOGUE_BIAS;
    switch (epilogue) {
      case GemmEpilogue::bias_gelu:
        lt_epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
        break;
      case GemmEpilogue::bias_grad_a:
        lt_epilogue = CUBLASLT_EPILOGUE_BGRADB;
        break;
      case GemmEpilogue::bias_grad_b:
        lt_epilogue = CUBLASLT_EPILOGUE_BGRADA;
        break;
      default:
        break;
    }
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(lt_epilogue));
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data_ptr()));
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(cuda_type(bias.dtype())));
  }
  LayoutDesc layout_a, layout_b, layout_c;
  make_layout(layout_a, b.dtype(), mb.cols, mb.rows, mb.ld, batch, mb.batch_stride);
  make_layout(layout_b, a.dtype(), ma.cols, ma.rows, ma.ld, batch, ma.batch_stride);
  make_layout(layout_c, c.dtype(), n, m, mc.ld, batch, mc.batch_stride);

  const ProblemKey key{device,
                       trans_a,
                       trans_b,
                       m,
                       n,
                       k,
                       batch,
                       ma.ld,
                       mb.ld,
                       mc.ld,
                       ma.batch_stride,
                       mb.batch_stride,
                       mc.batch_stride,
                       a.dtype(),
                       b.dtype(),
                       c.dtype(),
                       has_bias ? bias.dtype() : DType::f32,
                       epilogue,
                       alignment_of(a.data_ptr()),
                       alignment_of(b.data_ptr()),
                       alignment_of(c.data_ptr()),
                       has_bias ? alignment_of(bias.data_ptr()) : uint32_t{0}};
  const cublasLtMatmulHeuristicResult_t chosen = chosen_algorithm(
      handle, desc, layout_a, layout_b, layout_c, key,
      [&] {
        return str_cat("gemm: cuBLASLt has no algorithm for ", dtype_name(a.dtype()), " operands, ",
                       dtype_name(c.dtype()), " c",
                       has_bias ? str_cat(", ", dtype_name(bias.dtype()), " bias") : "", ", m ", m,
                       " n ", n, " k ", k, " batch ", batch);
      },
      bias_grad);
  if (chosen.state == CUBLAS_STATUS_SUCCESS) {
    const cublasStatus_t status = try_matmul(handle, desc, alpha, beta, a, b, c, layout_a, layout_b,
                                             layout_c, chosen, device, stream);
    // cuBLASLt may refuse at run time an algorithm its heuristic offered (as the FP8 amax case
    // below): a bias gradient then takes the unfused path.
    if (status == CUBLAS_STATUS_SUCCESS) return;
    if (!bias_grad || status != CUBLAS_STATUS_NOT_SUPPORTED) HEADROOM_CUBLAS_CHECK(status);
  }
  // No fused kernel for this bias gradient: the product, then the reduction table's column sums
  // of the reduced operand ([k, len], packed: gemm_problem checked it).
  gemm(trans_a, trans_b, a, b, alpha, beta, c, GemmEpilogue::none, Tensor());
  const bool of_a = epilogue == GemmEpilogue::bias_grad_a;
  sum_middle(of_a ? a : b, 1, k, of_a ? m : n, 1.0, bias);
}

// The FP8 GEMM (backend/gemm_kernels.h): c [m, n] = sa * sb * a [m, k] @ b [n, k]^T. Column-major,
// that is cuBLASLt's D [n, m] = op_T(b) @ op_N(a): A is b transposed and B is a, the TN layout
// its FP8 kernels require, with the scale_inv tensors as A / B scale pointers. cuBLASLt takes a
// bias of D's dtype for a bf16 / f16 D and none of f32 ("the requested functionality is not
// supported"), and a D amax pointer only for an FP8 D (CUBLAS_STATUS_INVALID_VALUE for bf16: seen
// on an H200). The heuristic's choice is cached like gemm's.
void gemm_fp8(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
              const Tensor& b_scale_inv, const Tensor& c, const Tensor& bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  check_gemm_fp8_bias(c, bias);
  if (m == 0 || n == 0) return;
  if (k == 0) throw ValueError("gemm_fp8: k is 0; fill c instead");
  if (k % 16 != 0 || n % 16 != 0) {
    throw NotImplementedError(
        str_cat("gemm_fp8: cuBLASLt's FP8 GEMM needs k and n multiples of "
                "16, got m ",
                m, " n ", n, " k ", k));
  }
  check_fits_int32("m", m);
  check_fits_int32("n", n);
  check_fits_int32("k", k);
  const int device = c.device().index;
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream();
  cublasLtHandle_t handle = handle_for(device);
  MatmulDesc desc;
  HEADROOM_CUBLAS_CHECK(cublaslt().matmul_desc_create(&desc.raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(CUBLAS_OP_T));
  set(desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(CUBLAS_OP_N));
  set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(b_scale_inv.data_ptr()));
  set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(a_scale_inv.data_ptr()));
  const bool has_bias = bias.defined();
  if (has_bias) {
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data_ptr()));
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(cuda_type(bias.dtype())));
  }
  LayoutDesc layout_a, layout_b, layout_c;
  make_layout(layout_a, b.dtype(), k, n, k, 1, 0);
  make_layout(layout_b, a.dtype(), k, m, k, 1, 0);
  make_layout(layout_c, c.dtype(), n, m, n, 1, 0);
  // The FP8 problems share gemm's cache: their operand dtypes keep the keys apart.
  const ProblemKey key{device,
                       false,
                       true,
                       m,
                       n,
                       k,
                       1,
                       k,
                       k,
                       n,
                       0,
                       0,
                       0,
                       a.dtype(),
                       b.dtype(),
                       c.dtype(),
                       has_bias ? bias.dtype() : DType::f32,
                       has_bias ? GemmEpilogue::bias : GemmEpilogue::none,
                       alignment_of(a.data_ptr()),
                       alignment_of(b.data_ptr()),
                       alignment_of(c.data_ptr()),
                       has_bias ? alignment_of(bias.data_ptr()) : 0u};
  const cublasLtMatmulHeuristicResult_t chosen =
      chosen_algorithm(handle, desc, layout_a, layout_b, layout_c, key, [&] {
        return str_cat("gemm_fp8: cuBLASLt has no FP8 algorithm for ", dtype_name(a.dtype()), " x ",
                       dtype_name(b.dtype()), " into ", dtype_name(c.dtype()), ", m ", m, " n ", n,
                       " k ", k, " (FP8 GEMMs need compute capability 8.9 or newer)");
      });
  run_matmul(handle, desc, 1.0f, 0.0f, a, b, c, layout_a, layout_b, layout_c, chosen, device,
             stream);
}

}  // namespace

void fill_gemm_kernels(GemmKernels& kernels) {
  kernels.gemm = gemm;
  kernels.gemm_fp8 = gemm_fp8;
}

}  // namespace headroom::cuda
