// cuBLASLt, opened on the first GEMM rather than linked: libcublasLt is some 500 MB, and loading
// it at program start cost every headroom command (`--help`, `plan`) 0.3 s and 200 MB of
// resident memory although only GPU runs use it. The table holds the functions gemm.cpp calls.
#pragma once

#include <cublasLt.h>

namespace headroom::cuda {

struct CublasLt {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtGetStatusString) get_status_string;
  decltype(&::cublasLtMatmul) matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) matmul_algo_get_heuristic;
  decltype(&::cublasLtMatmulDescCreate) matmul_desc_create;
  decltype(&::cublasLtMatmulDescDestroy) matmul_desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute;
  decltype(&::cublasLtMatmulPreferenceCreate) matmul_preference_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) matmul_preference_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) matmul_preference_set_attribute;
  decltype(&::cublasLtMatrixLayoutCreate) matrix_layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) matrix_layout_destroy;
  decltype(&::cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute;
};

// The library's functions, opened once (thread-safe). Error naming the library and the loader's
// message when it or a function is missing.
const CublasLt& cublaslt();

}  // namespace headroom::cuda
