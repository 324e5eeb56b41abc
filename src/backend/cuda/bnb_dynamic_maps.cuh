// The dynamic maps of bitsandbytes' 8-bit optimizer states for the CUDA kernels (adamw_8bit.cu,
// lion_8bit.cu), made on the host from the CPU's create_dynamic_map so both devices decode alike.
#pragma once

#include "backend/cpu/blockwise_quant.h"

namespace headroom::cuda {

// The two maps, passed by value (2 KiB of kernel parameters) and copied to shared memory by each
// block, so no device copy of them has to be kept per GPU.
struct DynamicMaps {
  float signed_code[256];
  float unsigned_code[256];
};

inline const DynamicMaps& dynamic_maps() {
  static const DynamicMaps maps = [] {
    DynamicMaps m{};
    const cpu::QuantizationMap s = cpu::create_dynamic_map(true);
    const cpu::QuantizationMap u = cpu::create_dynamic_map(false);
    for (int i = 0; i < 256; ++i) {
      m.signed_code[i] = s[static_cast<size_t>(i)];
      m.unsigned_code[i] = u[static_cast<size_t>(i)];
    }
    return m;
  }();
  return maps;
}

}  // namespace headroom::cuda
