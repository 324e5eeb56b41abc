// Opens libcublasLt with dlopen on first use (backend/cuda/cublaslt_library.h).
#include "backend/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/error.h"

namespace headroom::cuda {
namespace {

// The soname of the toolkit headroom is built with (CUBLAS_VER_MAJOR from cublas_api.h).
std::string library_name() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

template <typename F>
void resolve(void* library, const char* symbol, F& entry) {
  void* address = dlsym(library, symbol);
  if (!address) {
    throw Error(
        str_cat("cuBLASLt: ", library_name(), " has no function ", symbol, ": ", dlerror()));
  }
  entry = reinterpret_cast<F>(address);
}

CublasLt open_library() {
  const std::string name = library_name();
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) throw Error(str_cat("cuBLASLt: cannot open ", name, ": ", dlerror()));
  CublasLt lt;
  resolve(library, "cublasLtCreate", lt.create);
  resolve(library, "cublasLtGetStatusString", lt.get_status_string);
  resolve(library, "cublasLtMatmul", lt.matmul);
  resolve(library, "cublasLtMatmulAlgoGetHeuristic", lt.matmul_algo_get_heuristic);
  resolve(library, "cublasLtMatmulDescCreate", lt.matmul_desc_create);
  resolve(library, "cublasLtMatmulDescDestroy", lt.matmul_desc_destroy);
  resolve(library, "cublasLtMatmulDescSetAttribute", lt.matmul_desc_set_attribute);
  resolve(library, "cublasLtMatmulPreferenceCreate", lt.matmul_preference_create);
  resolve(library, "cublasLtMatmulPreferenceDestroy", lt.matmul_preference_destroy);
  resolve(library, "cublasLtMatmulPreferenceSetAttribute", lt.matmul_preference_set_attribute);
  resolve(library, "cublasLtMatrixLayoutCreate", lt.matrix_layout_create);
  resolve(library, "cublasLtMatrixLayoutDestroy", lt.matrix_layout_destroy);
  resolve(library, "cublasLtMatrixLayoutSetAttribute", lt.matrix_layout_set_attribute);
  return lt;  // the library stays open for the process
}

}  // namespace

const CublasLt& cublaslt() {
  // A failed open throws out of the initialiser, and the next call tries again.
  static const CublasLt lt = open_library();
  return lt;
}

}  // namespace headroom::cuda
