// QLoRA's 4-bit weights as bitsandbytes stores them: NF4 / FP4 codes in blocks with an fp32
// absmax each, optionally double-quantized (the absmax as 8-bit codes around their mean), packed
// two codes a byte, and bitsandbytes' state_dict keys and quant_state JSON. The 4-bit linear
// (quant/linear_4bit.h) computes with these tensors directly.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/quant_4bit_type.h"
#include "core/tensor.h"

namespace headroom {

// "nf4" / "fp4"; ValueError naming `field` and the value otherwise.
Quant4bitType parse_quant_4bit_type(const std::string& name, const std::string& field);
const char* quant_4bit_type_name(Quant4bitType type);

// The 4-bit fields of HF's BitsAndBytesConfig, with its defaults (fp4, no double quantization,
// fp32 compute, uint8 storage); QLoRA's recipe is nf4 + double quant + bf16 compute.
struct Quant4bitConfig {
  Quant4bitType quant_type = Quant4bitType::fp4;  // bnb_4bit_quant_type
  bool double_quant = false;                      // bnb_4bit_use_double_quant
  DType compute_dtype = DType::f32;               // bnb_4bit_compute_dtype
  DType quant_storage = DType::u8;                // bnb_4bit_quant_storage: u8, bf16, f16, f32
  int64_t blocksize = 64;                         // 32 .. 4096, a power of two
  bool operator==(const Quant4bitConfig&) const = default;
};

// ValueError when blocksize or quant_storage is not one bitsandbytes takes; `source` starts it.
void check_quant_4bit_config(const Quant4bitConfig& config, const std::string& source);

// Double quantization's blocks of absmax values (bitsandbytes' quantize_blockwise default).
inline constexpr int64_t kNestedBlocksize = 256;  // = kQuant4bitNestedBlocksize

// One 4-bit weight: bitsandbytes' Params4bit data plus its QuantState.
struct Quant4bitWeight {
  Tensor packed;  // [ceil(numel / 2) bytes / storage size, 1] in the storage dtype
  Quant4bitType quant_type = Quant4bitType::fp4;
  int64_t blocksize = 64;
  Shape shape;               // the weight's shape ([out, in] or Conv1D's [in, out])
  DType dtype = DType::f32;  // the dtype it was quantized from (quant_state "dtype")
  Tensor absmax;             // f32 [blocks], or u8 [blocks] codes when nested
  bool nested = false;
  float offset = 0.0f;   // mean of the absmax values (nested only)
  Tensor nested_absmax;  // f32 [ceil(blocks / 256)] (nested only)
  Tensor nested_code;    // f32 [256], the signed dynamic map (nested only)

  int64_t numel() const { return shape.numel(); }
  int64_t blocks() const { return (numel() + blocksize - 1) / blocksize; }
  Device device() const { return packed.device(); }
  // Bytes of every tensor it holds, as bitsandbytes' model.get_memory_footprint counts them.
  int64_t nbytes() const;
};

// Quantizes `weight` (f32 / bf16 / f16) on its device through the quantization kernels (the
// meta device allocates the same tensors), bit for bit as bitsandbytes' CPU path does (Note
// [4-bit quantization as bitsandbytes' CPU path] in backend/cpu/quant_4bit.cpp, Note [Mean of
// the absmax as torch sums] in backend/cpu/torch_mean.h). Double quantization holds the f32
// absmax [blocks] until its 8-bit codes are made, and reads its mean back to the host.
Quant4bitWeight quantize_4bit(const Tensor& weight, const Quant4bitConfig& config);

// The per-block absmax in fp32 (the nested statistics dequantized, + offset), on the host.
std::vector<float> quant_4bit_absmax(const Quant4bitWeight& weight);

// The whole weight in `dtype` (f32 / bf16 / f16: code * absmax in fp32, then rounded), on its
// device: for tests, merging and saving in full precision; the 4-bit linear never makes one.
Tensor dequantize_4bit(const Quant4bitWeight& weight, DType dtype);

// bitsandbytes' state_dict entries of a Linear4bit's weight at `prefix` ("model.layers.0.mlp.
// up_proj."): weight, weight.absmax, weight.quant_map, and when nested weight.nested_absmax,
// weight.nested_quant_map; then weight.quant_state.bitsandbytes__<nf4|fp4> (u8 JSON).
std::vector<std::pair<std::string, Tensor>> quant_4bit_state_dict(const std::string& prefix,
                                                                  const Quant4bitWeight& weight);

// True for the names quant_4bit_state_dict adds besides "<prefix>weight".
bool is_quant_4bit_state_key(const std::string& name);

// Reads the entries above back: `load(name)` returns the stored tensor or an undefined one when
// the file has no such name. ValueError naming `source`, the key and the value for a missing
// or inconsistent entry (sizes, quant_map, JSON fields). Tensors end on `device`.
Quant4bitWeight quant_4bit_from_state_dict(const std::string& prefix,
                                           const std::function<Tensor(const std::string&)>& load,
                                           const std::string& source, Device device);

}  // namespace headroom
