// oneDNN behind cpu::gemm (its sgemm) and cpu::gemm_bf16 (its matmul primitive, with cached
// primitives: see Note [bf16 GEMM on oneDNN's matmul primitive]), and the CPU's gemm table entry
// (backend/gemm_kernels.h) on them: f32 operands on sgemm, bf16 / f16 operands handed to the
// matmul primitive as they are stored (no fp32 copies), products and sums in fp32.
#include "backend/cpu/gemm.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/pointwise_simd.h"
#include "backend/cpu/reduction.h"
#include "backend/gemm_kernels.h"
#include "core/dtype_convert.h"
#include "core/error.h"

namespace headroom::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                          a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    throw Error(str_cat("gemm: oneDNN sgemm failed with status ", static_cast<int>(status), " (m ",
                        m, ", n ", n, ", k ", k, ", lda ", lda, ", ldb ", ldb, ", ldc ", ldc, ")"));
  }
}

void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                  float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                  int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                  int64_t stride_c) {
  for (int64_t i = 0; i < batch; ++i) {
    gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
         c + i * stride_c, ldc);
  }
}

// Note [bf16 GEMM on oneDNN's matmul primitive]
// (f16 operands take the same road: oneDNN picks its f16 kernel where the CPU has one, and the
// widened fallback below otherwise.)
// gemm_bf16 describes its operands to oneDNN 2.6's matmul primitive as strided memory: op(A) is
// the M x K "src" with strides (lda, 1), or (1, lda) when transposed; op(B) the K x N "weights";
// C the M x N "dst" with strides (ldc, 1); a batch adds a leading dimension whose stride is the
// batch stride (a stride of 0 becomes a batch dimension of 1, which oneDNN broadcasts).
//
// Which kernel oneDNN picks (pd.impl_info_str(), measured on Sapphire Rapids):
//   - dense operands (leading dimensions equal to the row lengths, batch strides equal to the
//     matrix sizes), any transposes: "brg:avx512_core_amx_bf16", or "brg:avx512_core_bf16" for
//     small shapes: the fast path.
//   - any other leading dimension or batch stride: "gemm:jit", oneDNN's AVX512_BF16 gemm (2.6's
//     brgemm matmul takes only dense layouts), from 0.2x to 2x brgemm's speed depending on the
//     shape (50304 x 384 x 128 with A transposed: 40-55 GFLOP/s on one core against 234 dense
//     and 110 for fp32 sgemm); with alpha != 1 and a bias, "ref:any", the reference kernel.
//   - a runtime output scale (DNNL_RUNTIME_F32_VAL) also drops to "gemm:jit", so alpha and beta
//     are baked into the primitive and their values are part of the cache key.
// So operands with any other layout are copied into dense buffers first (gemm_bf16_packed): the
// kernel is always the dense one, and a strided view gives the same bits as a contiguous copy of
// it. The copies cost little for A and B, but a strided C is copied out (and in, with beta): on
// this machine's ~7 GB/s that is ~10 ms for the LM head's 50304 x 384 fp32 weight gradient, as
// long as its GEMM, which leaves 60-80 GFLOP/s on 2 threads (gemm:jit: 30-55). Where even the dense
// primitive would run on a reference kernel or has no implementation (oneDNN 2.6 has no bf16 matmul
// below AVX-512; ONEDNN_MAX_CPU_ISA=AVX2 shows it, and the tests run once so), the operands are
// widened to fp32 for gemm instead (gemm_bf16_widened), as for k == 0, for which the primitive
// would do nothing at all, not even beta * C.
//
// Alignment matters as much as the kernel: with A, B and C 16 bytes off a 64-byte boundary the
// AMX kernels run at a third to a half of their speed (2048 x 1152 x 384, measured). Tensors from
// the CachingAllocator start on 512-byte boundaries; views with an offset may not.
//
// oneDNN 2.x applies the output scale to the bias too (dst = alpha * (A B + bias) + beta * dst);
// our bias is not scaled, so with alpha != 1 it is a binary-add post-op after the sum instead.
//
// Creating a primitive costs 0.1 ms for the descriptor and up to several ms of JIT compilation,
// so primitives live in a small cache (PrimitiveCache) keyed by everything that shapes them,
// including the OpenMP thread count, which oneDNN fixes at creation. The scratchpad is ours
// (scratchpad_mode::user): one buffer per calling thread that grows to the largest request
// (a few hundred KiB to 1.5 MiB on the GPT-2 shapes) instead of oneDNN's library-managed one.

namespace {

struct MatmulKey {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // 0 when batch is 1
  uint32_t alpha_bits = 0, beta_bits = 0;
  int threads = 0;
  bool trans_a = false, trans_b = false, has_bias = false, gelu = false;
  DType operands = DType::bf16;  // bf16 or f16
  DType c_dtype = DType::f32;

  float alpha() const { return std::bit_cast<float>(alpha_bits); }
  float beta() const { return std::bit_cast<float>(beta_bits); }
  bool operator==(const MatmulKey&) const = default;
};

// A cached primitive with the descriptors its execution arguments need. `widen` marks keys that
// go to gemm_bf16_widened instead (see the Note).
struct MatmulPlan {
  bool widen = false;
  std::string kernel;  // pd.impl_info_str() of the primitive; empty when widened
  dnnl::matmul primitive;
  dnnl::memory::desc a_md, b_md, c_md, bias_md, scratchpad_md;
  int bias_arg = DNNL_ARG_BIAS;
};

// gelu (the tanh form of the activation kernels and of cuBLASLt's epilogue) of `rows` fp32 rows
// of n elements, ld apart, in place.
HEADROOM_SIMD_CLONES void gelu_rows(float* c, int64_t rows, int64_t n, int64_t ld) {
  constexpr float kScale = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kCubic = 0.044715f;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = c + r * ld;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float v = row[j];
      row[j] = 0.5f * v * (1.0f + tanh_approx(kScale * (v + kCubic * v * v * v)));
    }
  }
}

// What gemm_bf16_last_kernel() reports for this thread.
thread_local std::string last_kernel;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The one CPU stream. oneDNN does not promise that a stream may be used from two threads at once,
// and a CPU stream is a handle around nothing (execution is synchronous on the caller's OpenMP
// team), so each thread that calls gemm_bf16 gets its own, created once.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<void, Free>;

// At least `bytes` of page-aligned memory.
AlignedBytes aligned_bytes(size_t bytes) {
  const size_t rounded = std::max<size_t>((bytes + 4095) / 4096 * 4096, 4096);
  AlignedBytes memory(std::aligned_alloc(4096, rounded));
  if (!memory) throw OutOfMemoryError(str_cat("gemm_bf16: cannot allocate ", rounded, " B"));
  return memory;
}

// The calling thread's scratchpad, at least `bytes` long; grows, never shrinks.
void* thread_scratchpad(size_t bytes) {
  thread_local AlignedBytes buffer;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    buffer.reset();
    capacity = 0;
    buffer = aligned_bytes(bytes);
    capacity = bytes;
  }
  return buffer.get();
}

// One matmul operand: a rows x cols matrix with leading dimension ld (transposed: stored
// cols x rows), batched when batch > 1.
dnnl::memory::data_type dnnl_type(DType dtype) {
  using Type = dnnl::memory::data_type;
  return dtype == DType::f32 ? Type::f32 : dtype == DType::bf16 ? Type::bf16 : Type::f16;
}

dnnl::memory::desc operand_desc(int64_t batch, int64_t batch_stride, int64_t rows, int64_t cols,
                                int64_t ld, bool transposed, dnnl::memory::data_type type) {
  const int64_t row_stride = transposed ? 1 : ld, col_stride = transposed ? ld : 1;
  if (batch == 1) return dnnl::memory::desc({rows, cols}, type, {row_stride, col_stride});
  if (batch_stride == 0) {
    // Broadcast. The stride of a dimension of 1 is never used, but oneDNN takes a layout with a
    // 0 there for a non-dense one and runs its reference kernel: give it the dense stride.
    return dnnl::memory::desc({1, rows, cols}, type,
                              {(transposed ? cols : rows) * ld, row_stride, col_stride});
  }
  return dnnl::memory::desc({batch, rows, cols}, type, {batch_stride, row_stride, col_stride});
}

std::shared_ptr<const MatmulPlan> make_plan(const MatmulKey& key) {
  using Type = dnnl::memory::data_type;
  auto plan = std::make_shared<MatmulPlan>();
  const Type operands = dnnl_type(key.operands);
  plan->a_md = operand_desc(key.batch, key.stride_a, key.m, key.k, key.lda, key.trans_a, operands);
  plan->b_md = operand_desc(key.batch, key.stride_b, key.k, key.n, key.ldb, key.trans_b, operands);
  plan->c_md =
      operand_desc(key.batch, key.stride_c, key.m, key.n, key.ldc, false, dnnl_type(key.c_dtype));
  plan->bias_md = dnnl::memory::desc({1, key.n}, Type::f32, {key.n, 1});

  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha() != 1.0f) attr.set_output_scales(0, {key.alpha()});
  dnnl::post_ops post_ops;
  if (key.beta() != 0.0f) post_ops.append_sum(key.beta());
  const bool bias_post_op = key.has_bias && key.alpha() != 1.0f;
  if (bias_post_op) {
    post_ops.append_binary(dnnl::algorithm::binary_add, plan->bias_md);
    plan->bias_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_ops.len() - 1) | DNNL_ARG_SRC_1;
  }
  // The bias_gelu epilogue: gelu (tanh form, as cuBLASLt's) of everything before it, in fp32.
  if (key.gelu) post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
  attr.set_post_ops(post_ops);
  try {
    const dnnl::matmul::desc desc =
        key.has_bias && !bias_post_op
            ? dnnl::matmul::desc(plan->a_md, plan->b_md, plan->bias_md, plan->c_md)
            : dnnl::matmul::desc(plan->a_md, plan->b_md, plan->c_md);
    const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    if (std::strncmp(pd.impl_info_str(), "ref", 3) == 0) {
      plan->widen = true;
      return plan;
    }
    plan->kernel = pd.impl_info_str();
    plan->scratchpad_md = pd.scratchpad_desc();
    plan->primitive = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    plan->widen = true;  // no implementation for this combination
  }
  return plan;
}

// Least-recently-used cache of MatmulPlans; see Note [bf16 GEMM on oneDNN's matmul primitive].
// Plans are shared_ptrs so that one evicted while another thread still runs it stays alive.
class PrimitiveCache {
 public:
  std::shared_ptr<const MatmulPlan> get(const MatmulKey& key) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (Entry* entry = find(key)) {
        entry->last_use = ++clock_;
        return entry->plan;
      }
    }
    // Built outside the lock: JIT compilation takes milliseconds, and two threads that race
    // for one key only build it twice.
    std::shared_ptr<const MatmulPlan> plan = make_plan(key);
    std::lock_guard<std::mutex> lock(mutex_);
    if (Entry* entry = find(key)) return entry->plan;
    if (entries_.size() == kCapacity) {
      entries_.erase(
          std::min_element(entries_.begin(), entries_.end(),
                           [](const Entry& x, const Entry& y) { return x.last_use < y.last_use; }));
    }
    entries_.push_back({key, plan, ++clock_});
    return plan;
  }

 private:
  struct Entry {
    MatmulKey key;
    std::shared_ptr<const MatmulPlan> plan;
    uint64_t last_use;
  };
  // A training step uses a few dozen shapes; a linear search over this many keys costs less
  // than a microsecond.
  static constexpr size_t kCapacity = 64;

  Entry* find(const MatmulKey& key) {
    for (Entry& entry : entries_) {
      if (entry.key == key) return &entry;
    }
    return nullptr;
  }

  std::mutex mutex_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

PrimitiveCache& primitive_cache() {
  static PrimitiveCache cache;
  return cache;
}

void run_plan(const MatmulPlan& plan, const void* a, const void* b, void* c, const float* bias) {
  const dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(plan.a_md, engine, const_cast<void*>(a))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(plan.b_md, engine, const_cast<void*>(b))},
      {DNNL_ARG_DST, dnnl::memory(plan.c_md, engine, c)}};
  if (bias) {
    args.emplace(plan.bias_arg, dnnl::memory(plan.bias_md, engine, const_cast<float*>(bias)));
  }
  if (const size_t bytes = plan.scratchpad_md.get_size()) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(plan.scratchpad_md, engine, thread_scratchpad(bytes)));
  }
  dnnl::stream& stream = thread_stream();
  plan.primitive.execute(stream, args);
  stream.wait();
}

// A stored rows x cols bf16 / f16 / FP8 matrix with leading dimension ld, as a dense fp32 one.
std::vector<float> widen_matrix(const void* p, DType dtype, int64_t rows, int64_t cols,
                                int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    convert_to_f32(static_cast<const char*>(p) + r * ld * dtype_size(dtype), dtype,
                   out.data() + r * cols, static_cast<size_t>(cols));
  }
  return out;
}

// One gemm of key (batch ignored) in fp32 on widened copies: exact inputs, fp32 products and
// sums as on the primitive, and a 16-bit C rounded once from the fp32 result.
void gemm_half_widened(const MatmulKey& key, const void* a, const void* b, void* c,
                       const float* bias) {
  const int64_t a_cols = key.trans_a ? key.m : key.k, b_cols = key.trans_b ? key.k : key.n;
  const std::vector<float> af =
      widen_matrix(a, key.operands, key.trans_a ? key.k : key.m, a_cols, key.lda);
  const std::vector<float> bf =
      widen_matrix(b, key.operands, key.trans_b ? key.n : key.k, b_cols, key.ldb);
  const bool c_is_f32 = key.c_dtype == DType::f32;
  std::vector<float> c_wide;
  if (!c_is_f32) {
    c_wide.assign(static_cast<size_t>(key.m * key.n), 0.0f);
    if (key.beta() != 0.0f) c_wide = widen_matrix(c, key.c_dtype, key.m, key.n, key.ldc);
  }
  float* cf = c_is_f32 ? static_cast<float*>(c) : c_wide.data();
  const int64_t ldcf = c_is_f32 ? key.ldc : key.n;
  if (key.k > 0) {
    gemm(key.trans_a, key.trans_b, key.m, key.n, key.k, key.alpha(), af.data(), a_cols, bf.data(),
         b_cols, key.beta(), cf, ldcf);
  }
  for (int64_t r = 0; r < key.m; ++r) {
    float* row = cf + r * ldcf;
    if (key.k == 0) {  // oneDNN's sgemm refuses k == 0; C = beta * C, not reading C when beta is 0
      for (int64_t j = 0; j < key.n; ++j) row[j] = key.beta() == 0.0f ? 0.0f : key.beta() * row[j];
    }
    if (bias) {
      for (int64_t j = 0; j < key.n; ++j) row[j] += bias[j];
    }
    if (key.gelu) gelu_rows(row, 1, key.n, key.n);
    if (!c_is_f32) {
      convert_from_f32(row, static_cast<char*>(c) + r * key.ldc * dtype_size(key.c_dtype),
                       key.c_dtype, static_cast<size_t>(key.n));
    }
  }
}

// key with the dense layout of its shape, the one oneDNN's brgemm kernels take.
MatmulKey dense_layout(const MatmulKey& key) {
  MatmulKey dense = key;
  dense.lda = key.trans_a ? key.m : key.k;
  dense.ldb = key.trans_b ? key.k : key.n;
  dense.ldc = key.n;
  if (key.batch != 1) {
    dense.stride_a = key.stride_a == 0 ? 0 : key.m * key.k;
    dense.stride_b = key.stride_b == 0 ? 0 : key.k * key.n;
    dense.stride_c = key.m * key.n;
  }
  return dense;
}

// Copies `batch` matrices of rows x cols elements of `size` bytes from one layout (leading
// dimension, batch stride, in elements) to another; rows split over the OpenMP threads from
// 1 MiB on.
void copy_matrices(const void* src, int64_t src_ld, int64_t src_stride, void* dst, int64_t dst_ld,
                   int64_t dst_stride, int64_t batch, int64_t rows, int64_t cols, size_t size) {
  const int64_t total_rows = batch * rows;
#pragma omp parallel for if (total_rows * cols * static_cast <int64_t>(size) > (1 << 20))
  for (int64_t row = 0; row < total_rows; ++row) {
    const int64_t i = row / rows, r = row % rows;
    std::memcpy(static_cast<char*>(dst) + (i * dst_stride + r * dst_ld) * size,
                static_cast<const char*>(src) + (i * src_stride + r * src_ld) * size,
                static_cast<size_t>(cols) * size);
  }
}

// The `batch` 16-bit matrices at p (`rows` rows of dense_ld elements, leading dimension ld, batch
// stride `stride`, 0 for one matrix shared by the batch) in the dense layout: p itself when they
// are in it, else a copy held by `buffer`.
const void* dense_copy(const void* p, int64_t ld, int64_t stride, int64_t dense_ld,
                       int64_t dense_stride, int64_t batch, int64_t rows, AlignedBytes& buffer) {
  if (ld == dense_ld && stride == dense_stride) return p;
  const int64_t copies = stride == 0 ? 1 : batch;
  buffer = aligned_bytes(static_cast<size_t>(copies * rows * dense_ld) * sizeof(BFloat16));
  copy_matrices(p, ld, stride, buffer.get(), dense_ld, dense_stride, copies, rows, dense_ld,
                sizeof(BFloat16));
  return buffer.get();
}

void run_gemm_half(const MatmulKey& key, const void* a, const void* b, void* c, const float* bias);

// run_gemm_half with the operands whose layout is not `dense` copied into dense buffers, for the
// dense kernel (see the Note for what the copies cost).
void gemm_half_packed(const MatmulKey& key, const MatmulKey& dense, const void* a, const void* b,
                      void* c, const float* bias) {
  AlignedBytes a_dense, b_dense, c_dense;
  a = dense_copy(a, key.lda, key.stride_a, dense.lda, dense.stride_a, key.batch,
                 key.trans_a ? key.k : key.m, a_dense);
  b = dense_copy(b, key.ldb, key.stride_b, dense.ldb, dense.stride_b, key.batch,
                 key.trans_b ? key.n : key.k, b_dense);
  const size_t c_size = dtype_size(key.c_dtype);
  void* c_run = c;
  if (key.ldc != dense.ldc || key.stride_c != dense.stride_c) {
    c_dense = aligned_bytes(static_cast<size_t>(key.batch * key.m * key.n) * c_size);
    if (key.beta() != 0.0f) {
      copy_matrices(c, key.ldc, key.stride_c, c_dense.get(), dense.ldc, dense.stride_c, key.batch,
                    key.m, key.n, c_size);
    }
    c_run = c_dense.get();
  }
  run_gemm_half(dense, a, b, c_run, bias);
  if (c_dense) {
    copy_matrices(c_dense.get(), dense.ldc, dense.stride_c, c, key.ldc, key.stride_c, key.batch,
                  key.m, key.n, c_size);
  }
}

// The GEMM of 16-bit operands (bf16 or f16: key.operands) on the matmul primitive, or widened.
void run_gemm_half(const MatmulKey& key, const void* a, const void* b, void* c, const float* bias) {
  HEADROOM_CHECK_VALUE(key.c_dtype == DType::f32 || key.c_dtype == key.operands,
                       "gemm_bf16: C must be f32 or ", dtype_name(key.operands), ", not ",
                       dtype_name(key.c_dtype));
  HEADROOM_CHECK_VALUE(key.batch >= 0 && key.m >= 0 && key.n >= 0 && key.k >= 0,
                       "gemm_bf16: negative size (batch ", key.batch, ", m ", key.m, ", n ", key.n,
                       ", k ", key.k, ")");
  if (key.batch == 0 || key.m == 0 || key.n == 0) return;
  std::shared_ptr<const MatmulPlan> plan;
  if (key.k != 0) {
    if (const MatmulKey dense = dense_layout(key); !(dense == key)) {
      gemm_half_packed(key, dense, a, b, c, bias);
      return;
    }
    plan = primitive_cache().get(key);
  }
  if (!plan || plan->widen) {
    last_kernel = "widened";
    const size_t c_size = dtype_size(key.c_dtype);
    const size_t operand_size = dtype_size(key.operands);
    for (int64_t i = 0; i < key.batch; ++i) {
      gemm_half_widened(key, static_cast<const char*>(a) + i * key.stride_a * operand_size,
                        static_cast<const char*>(b) + i * key.stride_b * operand_size,
                        static_cast<char*>(c) + i * key.stride_c * c_size, bias);
    }
    return;
  }
  last_kernel = plan->kernel;  // reuses the string's capacity: no allocation after the first
  try {
    run_plan(*plan, a, b, c, bias);
  } catch (const dnnl::error& e) {
    throw Error(str_cat("gemm_bf16: oneDNN matmul failed: ", e.what(), " (batch ", key.batch,
                        ", m ", key.m, ", n ", key.n, ", k ", key.k, ")"));
  }
}

}  // namespace

std::string gemm_bf16_last_kernel() { return last_kernel; }

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, void* c,
               DType c_dtype, int64_t ldc, const float* bias) {
  MatmulKey key;
  key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.alpha_bits = std::bit_cast<uint32_t>(alpha), key.beta_bits = std::bit_cast<uint32_t>(beta);
  key.threads = omp_get_max_threads();
  key.trans_a = trans_a, key.trans_b = trans_b, key.has_bias = bias != nullptr;
  key.c_dtype = c_dtype;
  run_gemm_half(key, a, b, c, bias);
}

void gemm_bf16_batched(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                       float alpha, const BFloat16* a, int64_t lda, int64_t stride_a,
                       const BFloat16* b, int64_t ldb, int64_t stride_b, float beta, void* c,
                       DType c_dtype, int64_t ldc, int64_t stride_c) {
  MatmulKey key;
  key.batch = batch, key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  if (batch != 1) key.stride_a = stride_a, key.stride_b = stride_b, key.stride_c = stride_c;
  key.alpha_bits = std::bit_cast<uint32_t>(alpha), key.beta_bits = std::bit_cast<uint32_t>(beta);
  key.threads = omp_get_max_threads();
  key.trans_a = trans_a, key.trans_b = trans_b;
  key.c_dtype = c_dtype;
  run_gemm_half(key, a, b, c, nullptr);
}

namespace {

// ---- the gemm entry of the CPU's kernel table (backend/gemm_kernels.h)

// bias (f32 or c's dtype, [n]) as fp32: itself, or widened into the calling thread's buffer.
const float* bias_as_f32(const Tensor& bias) {
  if (!bias.defined()) return nullptr;
  if (bias.dtype() == DType::f32) return bias.data<float>();
  thread_local std::vector<float> widened;
  widened.resize(static_cast<size_t>(bias.numel()));
  convert_to_f32(bias.data_ptr(), bias.dtype(), widened.data(), widened.size());
  return widened.data();
}

// The f32 product, batch by batch on oneDNN's sgemm. With a bias and beta 0, c starts as the
// bias and the sgemm adds to it (beta 1), as the f32 linear always computed; otherwise the bias
// is added after.
void gemm_f32(bool trans_a, bool trans_b, const GemmProblem& p, const float* a, const float* b,
              float alpha, float beta, float* c, const float* bias, bool gelu) {
  const int64_t m = p.m, n = p.n;
  const GemmMatrix &ma = p.a, &mb = p.b, &mc = p.c;
  for (int64_t i = 0; i < p.batch; ++i) {
    float* ci = c + i * mc.batch_stride;
    float run_beta = beta;
    if (bias && beta == 0.0f) {
      for (int64_t r = 0; r < m; ++r) std::memcpy(ci + r * mc.ld, bias, sizeof(float) * n);
      run_beta = 1.0f;
    }
    gemm(trans_a, trans_b, m, n, p.k, alpha, a + i * ma.batch_stride, ma.ld,
         b + i * mb.batch_stride, mb.ld, run_beta, ci, mc.ld);
    if (bias && beta != 0.0f) {
      for (int64_t r = 0; r < m; ++r) {
        float* row = ci + r * mc.ld;
        for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
      }
    }
    if (gelu) gelu_rows(ci, m, n, mc.ld);
  }
}

void gemm_entry(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, float alpha,
                float beta, const Tensor& c, GemmEpilogue epilogue, const Tensor& bias) {
  const GemmProblem p = gemm_problem(trans_a, trans_b, a, b, c, epilogue, bias, alpha);
  const int64_t m = p.m, n = p.n, k = p.k, batch = p.batch;
  if (m == 0 || n == 0 || batch == 0) return;
  // As on CUDA: c is then beta * c (+ bias), which the op writes with a fill or a copy.
  if (k == 0) throw ValueError("gemm: k is 0; fill c instead");
  if (is_bias_grad(epilogue)) {
    // The reduced operand is one packed [k, len] matrix (gemm_problem checked it).
    const bool of_a = epilogue == GemmEpilogue::bias_grad_a;
    sum_middle_tensor(of_a ? a : b, 1, k, of_a ? m : n, 1.0, bias);
    gemm_entry(trans_a, trans_b, a, b, alpha, beta, c, GemmEpilogue::none, Tensor());
    return;
  }
  const bool has_bias = epilogue != GemmEpilogue::none;
  const float* bias_f32 = has_bias ? bias_as_f32(bias) : nullptr;
  const bool gelu = epilogue == GemmEpilogue::bias_gelu;
  if (a.dtype() == DType::f32) {
    gemm_f32(trans_a, trans_b, p, a.data<float>(), b.data<float>(), alpha, beta, c.data<float>(),
             bias_f32, gelu);
    return;
  }
  MatmulKey key;
  key.batch = batch, key.m = m, key.n = n, key.k = k;
  key.lda = p.a.ld, key.ldb = p.b.ld, key.ldc = p.c.ld;
  if (batch != 1) {
    key.stride_a = p.a.batch_stride, key.stride_b = p.b.batch_stride;
    key.stride_c = p.c.batch_stride;
  }
  key.alpha_bits = std::bit_cast<uint32_t>(alpha), key.beta_bits = std::bit_cast<uint32_t>(beta);
  key.threads = omp_get_max_threads();
  key.trans_a = trans_a, key.trans_b = trans_b, key.has_bias = has_bias, key.gelu = gelu;
  key.operands = a.dtype();
  key.c_dtype = c.dtype();
  run_gemm_half(key, a.data_ptr(), b.data_ptr(), c.data_ptr(), bias_f32);
}

// The FP8 GEMM (TN): both operands widened exactly (an FP8 value is a bf16 and an f32 value), the
// product summed in fp32 by sgemm with alpha = a_scale_inv * b_scale_inv, the bias added in fp32,
// c rounded once.
void gemm_fp8_entry(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                    const Tensor& b_scale_inv, const Tensor& c, const Tensor& bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  check_gemm_fp8_bias(c, bias);
  if (m == 0 || n == 0) return;
  if (k == 0) throw ValueError("gemm_fp8: k is 0; fill c instead");
  const std::vector<float> af = widen_matrix(a.data_ptr(), a.dtype(), m, k, k);
  const std::vector<float> bf = widen_matrix(b.data_ptr(), b.dtype(), n, k, k);
  const float alpha = *a_scale_inv.data<float>() * *b_scale_inv.data<float>();
  const bool f32 = c.dtype() == DType::f32;
  std::vector<float> wide;
  if (!f32) wide.resize(static_cast<size_t>(m * n));
  float* out = f32 ? c.data<float>() : wide.data();
  gemm(false, true, m, n, k, alpha, af.data(), k, bf.data(), k, 0.0f, out, n);
  if (const float* bias_f32 = bias_as_f32(bias)) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) out[r * n + j] += bias_f32[j];
    }
  }
  if (!f32) convert_from_f32(out, c.data_ptr(), c.dtype(), static_cast<size_t>(m * n));
}

}  // namespace

void fill_gemm_kernels(GemmKernels& kernels) {
  kernels.gemm = gemm_entry;
  kernels.gemm_fp8 = gemm_fp8_entry;
}

}  // namespace headroom::cpu
