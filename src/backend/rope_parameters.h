// How RoPE's inverse frequencies are made, as transformers' rope init functions make them
// (modeling_rope_utils.py) for the rope types headroom implements, shared by every device's
// rotary kernel so that each computes the same scaled frequencies.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace headroom {

// rope_scaling (or rope_parameters) of a config.json.
struct RopeScaling {
  // standard: rope_scaling null or "default". linear: every frequency / factor. dynamic: NTK
  // scaling that transformers applies only past max_position_embeddings, which training never
  // reaches (the context is the limit), so the frequencies are the standard ones. llama3:
  // Llama 3.1's wavelength-dependent interpolation. yarn: YaRN's ramp between interpolated and
  // extrapolated frequencies, with an attention factor. longrope: Phi-3's per-frequency factors,
  // the long ones when a forward reaches past the pretraining context.
  // See Note [YaRN and LongRoPE].
  enum class Type : uint8_t { standard, linear, dynamic, llama3, yarn, longrope };
  static constexpr int kMaxLongropeFactors = 128;  // head_dim 256

  Type type = Type::standard;
  double factor = 1.0;                              // linear, dynamic, llama3, yarn, longrope
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, yarn, longrope: pretraining's
  double attention_factor = 1.0;                    // yarn, longrope: multiplies cos and sin
  double beta_fast = 32.0, beta_slow = 1.0;         // yarn: the ramp's rotations
  bool truncate = true;                             // yarn: the ramp's ends to whole dimensions
  // longrope: one factor per frequency (head_dim / 2), fp32 as torch.tensor makes them. Plain
  // arrays: the struct is a CUDA kernel argument, and std::array's operator[] is host-only there.
  int32_t factor_count = 0;
  float short_factor[kMaxLongropeFactors] = {};
  float long_factor[kMaxLongropeFactors] = {};
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

// Note [YaRN and LongRoPE]
// transformers 5.25's _compute_yarn_parameters and _compute_longrope_parameters, each tensor step
// an fp32 operation and each Python scalar step a double one, as there:
// - yarn: pos = base^(2i/D) (the standard frequency's power), extrapolated 1 / pos, interpolated
//   1 / (factor * pos); low / high = D ln(L0 / (2 pi beta)) / (2 ln base) for beta_fast and
//   beta_slow, floored / ceiled when truncate, clamped to [0, D - 1]; ramp_i = clamp((i - low) /
//   (high - low), 0, 1) (high += 0.001 when equal), e = 1 - ramp_i, inv = interp (1 - e) +
//   extrap e. attention_factor: the given one, else mscale(f, mscale) / mscale(f, mscale_all_dim)
//   when both are set, else mscale(f) = 0.1 ln f + 1 (1 when f <= 1).
// - longrope: inv = 1 / (ext_i * pos) with ext the long factors when the forward's largest
//   position + 1 exceeds L0 (original_max_position_embeddings), else the short ones.
//   attention_factor: the given one, else sqrt(1 + ln f / ln L0) (1 when f <= 1).
// factor, when null, is max_position_embeddings / L0. Both multiply cos and sin by
// attention_factor in fp32 (LlamaRotaryEmbedding: emb.cos() * attention_scaling). The factors
// are resolved where config.json is read (io/hf_config.cpp); the devices compute pos.

// Whether a forward whose positions end before `position_end` (max position + 1) uses longrope's
// long factors.
HEADROOM_HD inline bool rope_uses_long_factors(const RopeScaling& s, int64_t position_end) {
  return s.type == RopeScaling::Type::longrope && position_end > s.original_max_position_embeddings;
}

// The factor that multiplies cos and sin, in fp32.
HEADROOM_HD inline float rope_attention_factor(const RopeScaling& s) {
  return static_cast<float>(s.attention_factor);
}

// The standard inverse frequency `inv_freq` (1 / theta^(2i/D) in fp32) scaled as `s` says, each
// step the fp32 operation transformers' torch code performs (a Python scalar enters as fp32;
// `c / tensor` is torch's reciprocal times c).
HEADROOM_HD inline float scaled_inv_freq(const RopeScaling& s, float inv_freq) {
  using namespace rope_detail;
  const auto factor = static_cast<float>(s.factor);
  switch (s.type) {
    case RopeScaling::Type::standard:
    case RopeScaling::Type::dynamic:
    case RopeScaling::Type::yarn:  // rope_inv_freq: they need the power, not its inverse
    case RopeScaling::Type::longrope:
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

// inv_freq[i] of a head of `dim` rotated dimensions from pos_freq = theta^(2i/dim) in fp32 (each
// device computes that power), for every rope type; `long_factors`: rope_uses_long_factors.
HEADROOM_HD inline float rope_inv_freq(const RopeParameters& rope, float pos_freq, int64_t i,
                                       int64_t dim, bool long_factors) {
  using namespace rope_detail;
  const RopeScaling& s = rope.scaling;
  if (s.type == RopeScaling::Type::longrope) {
    const float ext = long_factors ? s.long_factor[i] : s.short_factor[i];
    return div(1.0f, mul(ext, pos_freq));  // 1.0 / (ext_factors * base**inv_freq_shape)
  }
  if (s.type != RopeScaling::Type::yarn) return scaled_inv_freq(s, div(1.0f, pos_freq));
  // See Note [YaRN and LongRoPE]. The correction range in double, as Python's math.
  const double pi = 3.14159265358979323846;
  const auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) *
           log(static_cast<double>(s.original_max_position_embeddings) / (rotations * 2 * pi)) /
           (2 * log(rope.theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = floor(low);
    high = ceil(high);
  }
  low = low > 0.0 ? low : 0.0;
  high = high < static_cast<double>(dim - 1) ? high : static_cast<double>(dim - 1);
  if (low == high) high += 0.001;  // linear_ramp_factor's guard against a zero range
  // (arange(dim // 2) - min) / (max - min), clamped: fp32 tensor with Python scalars.
  float ramp =
      div(sub(static_cast<float>(i), static_cast<float>(low)), static_cast<float>(high - low));
  ramp = ramp < 0.0f ? 0.0f : (ramp > 1.0f ? 1.0f : ramp);
  const float extrapolation_factor = sub(1.0f, ramp);
  const float extrapolation = div(1.0f, pos_freq);
  const float interpolation = div(1.0f, mul(static_cast<float>(s.factor), pos_freq));
  return add(mul(interpolation, sub(1.0f, extrapolation_factor)),
             mul(extrapolation, extrapolation_factor));
}

}  // namespace headroom
