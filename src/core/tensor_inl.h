// Template members of Tensor.
#pragma once

#include <type_traits>

#include "core/dtype_dispatch.h"
#include "core/error.h"

namespace headroom {

template <typename T>
T* Tensor::data() const {
  check_defined("data");
  if (!device().is_cpu()) {
    throw Error(str_cat("data: the tensor is on ", device(), "; move it to the CPU first"));
  }
  constexpr DType requested = dtype_of<std::remove_cv_t<T>>::value;
  if (requested != dtype_) {
    throw Error(
        str_cat("data: the tensor holds ", dtype_name(dtype_), ", not ", dtype_name(requested)));
  }
  return static_cast<T*>(data_ptr());
}

}  // namespace headroom
