// How RoPE's inverse frequencies are made, as transformers' rope init functions make them
// (modeling_rope_utils.py) for the rope types headroom implements, shared by every device's
// rotary kernel so that each computes the same scaled frequencies.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace headroom {

// rope_scaling (or rope_parameters) of a config.json.
struct RopeScaling {
  // standard: rope_scaling null or "default". linear: every frequency / factor. dynamic: NTK
  // scaling that transformers applies only past max_position_embeddings, which training never
  // reaches (the context is the limit), so the frequencies are the standard ones. llama3:
  // Llama 3.1's wavelength-dependent interpolation.
  enum class Type : uint8_t { standard, linear, dynamic, llama3 };
  Type type = Type::standard;
  double factor = 1.0;                              // linear, dynamic, llama3
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3: the pretraining context
  bool operator==(const RopeScaling&) const = default;
};

struct RopeParameters {
  double theta = 10000.0;  // rope_theta
  RopeScaling scaling;
  bool operator==(const RopeParameters&) const = default;
};

namespace rope_detail {

// One fp32 operation each, as torch's element-wise ops round (never fused into an FMA).
HEADROOM_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
HEADROOM_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
HEADROOM_HD inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
HEADROOM_HD inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace rope_detail

// The standard inverse frequency `inv_freq` (1 / theta^(2i/D) in fp32) scaled as `s` says, each
// step the fp32 operation transformers' torch code performs (a Python scalar enters as fp32;
// `c / tensor` is torch's reciprocal times c).
HEADROOM_HD inline float scaled_inv_freq(const RopeScaling& s, float inv_freq) {
  using namespace rope_detail;
  const auto factor = static_cast<float>(s.factor);
  switch (s.type) {
    case RopeScaling::Type::standard:
    case RopeScaling::Type::dynamic:
      return inv_freq;
    case RopeScaling::Type::linear:
      return div(inv_freq, factor);  // inv_freq /= factor
    case RopeScaling::Type::llama3: {
      const auto old_context = static_cast<double>(s.original_max_position_embeddings);
      const auto low_wavelen = static_cast<float>(old_context / s.low_freq_factor);
      const auto high_wavelen = static_cast<float>(old_context / s.high_freq_factor);
      const float wavelen =
          mul(div(1.0f, inv_freq), static_cast<float>(2.0 * 3.14159265358979323846));
      const float llama = wavelen > low_wavelen ? div(inv_freq, factor) : inv_freq;
      if (wavelen < high_wavelen || wavelen > low_wavelen) return llama;
      // smooth = (old / wavelen - low) / (high - low);
      // (1 - smooth) * llama / factor + smooth * llama.
      const float smooth = div(sub(mul(div(1.0f, wavelen), static_cast<float>(old_context)),
                                   static_cast<float>(s.low_freq_factor)),
                               static_cast<float>(s.high_freq_factor - s.low_freq_factor));
      return add(div(mul(sub(1.0f, smooth), llama), factor), mul(smooth, llama));
    }
  }
  return inv_freq;
}

}  // namespace headroom
