// bitsandbytes' 4-bit weights: quantize, dequantize, state_dict (see quant_4bit.h).
#include "quant/quant_4bit.h"

#include <algorithm>
#include <array>
#include <cstring>

#include <nlohmann/json.hpp>

#include "backend/kernel_table.h"
#include "backend/quantization_kernels.h"
#include "core/dtype_convert.h"
#include "core/error.h"
#include "core/json_file.h"

namespace headroom {

static_assert(kNestedBlocksize == kQuant4bitNestedBlocksize);

namespace {

Tensor host_tensor(const void* data, size_t bytes, const Shape& shape, DType dtype, Device device) {
  Tensor host = Tensor::empty(shape, dtype, kCPU);
  if (bytes > 0) std::memcpy(host.data_ptr(), data, bytes);
  return device == kCPU ? host : host.to(device);
}

Tensor floats(const std::vector<float>& values, Device device) {
  return host_tensor(values.data(), values.size() * sizeof(float),
                     Shape{static_cast<int64_t>(values.size())}, DType::f32, device);
}

// The storage dtype's torch name as bitsandbytes writes dtypes ("float32", "bfloat16", ...).
std::string torch_dtype_name(DType dtype) { return dtype_traits(dtype).torch_name; }

DType dtype_from_torch_name(const std::string& name, const std::string& source,
                            const std::string& key) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    if (torch_dtype_name(d) == name) return d;
  }
  throw ValueError(str_cat(source, ": ", key, " is '", name,
                           "'; a 4-bit weight comes from float32, bfloat16 or float16"));
}

}  // namespace

Quant4bitType parse_quant_4bit_type(const std::string& name, const std::string& field) {
  if (name == "nf4") return Quant4bitType::nf4;
  if (name == "fp4") return Quant4bitType::fp4;
  throw ValueError(str_cat(field, ": '", name, "' is not a 4-bit type (nf4 or fp4)"));
}

const char* quant_4bit_type_name(Quant4bitType type) {
  return type == Quant4bitType::nf4 ? "nf4" : "fp4";
}

void check_quant_4bit_config(const Quant4bitConfig& config, const std::string& source) {
  const int64_t b = config.blocksize;
  if (b < 32 || b > 4096 || (b & (b - 1)) != 0) {
    throw ValueError(
        str_cat(source, ": blocksize ", b, " is not one bitsandbytes takes (32, 64, ..., 4096)"));
  }
  const DType s = config.quant_storage;
  if (s != DType::u8 && s != DType::bf16 && s != DType::f16 && s != DType::f32) {
    throw ValueError(str_cat(source, ": bnb_4bit_quant_storage ", dtype_name(s),
                             " is not supported (uint8, bfloat16, float16 or float32)"));
  }
  const DType c = config.compute_dtype;
  if (c != DType::f32 && c != DType::bf16 && c != DType::f16) {
    throw ValueError(str_cat(source, ": bnb_4bit_compute_dtype ", dtype_name(c),
                             " is not supported (float32, bfloat16 or float16)"));
  }
}

int64_t Quant4bitWeight::nbytes() const {
  int64_t total = static_cast<int64_t>(packed.nbytes() + absmax.nbytes());
  if (nested) total += static_cast<int64_t>(nested_absmax.nbytes() + nested_code.nbytes());
  return total;
}

Quant4bitWeight quantize_4bit(const Tensor& weight, const Quant4bitConfig& config) {
  check_quant_4bit_config(config, "quantize_4bit");
  const DType d = weight.dtype();
  if (d != DType::f32 && d != DType::bf16 && d != DType::f16) {
    throw ValueError(
        str_cat("quantize_4bit: weight dtype ", dtype_name(d), " is not f32, bf16 or f16"));
  }
  Quant4bitWeight q;
  q.quant_type = config.quant_type;
  q.blocksize = config.blocksize;
  q.shape = weight.shape();
  q.dtype = d;
  q.nested = config.double_quant;
  const int64_t n = weight.numel();
  const int64_t bytes = (n + 1) / 2;
  const int64_t storage_size = static_cast<int64_t>(dtype_size(config.quant_storage));
  if (bytes % storage_size != 0) {
    throw ValueError(str_cat("quantize_4bit: ", n, " values pack into ", bytes,
                             " bytes, not a whole number of ", dtype_name(config.quant_storage),
                             " (bnb_4bit_quant_storage)"));
  }
  const Shape packed_shape{bytes / storage_size, 1};
  const int64_t blocks = q.blocks();
  const Device device = weight.device();
  // On the weight's device, through its kernels (the meta device allocates the same tensors and
  // runs nothing); the weight is read as it is, no widened copy.
  q.packed = Tensor::empty(packed_shape, config.quant_storage, device);
  Tensor absmax = Tensor::empty({blocks}, DType::f32, device);
  need_kernel("quantize_4bit", device, &QuantizationKernels::quantize_4bit)(
      weight.contiguous(), config.quant_type, config.blocksize, q.packed, absmax);
  if (!q.nested) {
    q.absmax = std::move(absmax);
    return q;
  }
  const int64_t nested_blocks = (blocks + kNestedBlocksize - 1) / kNestedBlocksize;
  const Tensor offset = Tensor::empty({1}, DType::f32, device);
  q.absmax = Tensor::empty({blocks}, DType::u8, device);
  q.nested_absmax = Tensor::empty({nested_blocks}, DType::f32, device);
  q.nested_code = Tensor::empty({256}, DType::f32, device);
  need_kernel("quantize_4bit", device, &QuantizationKernels::quantize_absmax_nested)(
      absmax, offset, q.absmax, q.nested_absmax, q.nested_code);
  // The offset is a field of the quant state (bitsandbytes keeps it as a tensor and writes it
  // into the saved JSON): read once here, at load.
  q.offset = device.type == DeviceType::meta ? 0.0f : offset.to_float_vector()[0];
  return q;
}

std::vector<float> quant_4bit_absmax(const Quant4bitWeight& weight) {
  if (!weight.nested) return weight.absmax.to_float_vector();
  const std::vector<int64_t> codes = weight.absmax.to_int64_vector();
  const std::vector<float> scales = weight.nested_absmax.to_float_vector();
  const std::vector<float> code = weight.nested_code.to_float_vector();
  std::vector<float> absmax(codes.size());
  for (size_t b = 0; b < codes.size(); ++b) {
    absmax[b] = code[static_cast<size_t>(codes[b])] * scales[b / kNestedBlocksize] + weight.offset;
  }
  return absmax;
}

Tensor dequantize_4bit(const Quant4bitWeight& weight, DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
    throw ValueError(
        str_cat("dequantize_4bit: dtype ", dtype_name(dtype), " is not f32, bf16 or f16"));
  }
  Quant4bitOperand w;  // any shape: the elements in order, as one row
  w.packed = weight.packed;
  w.absmax = weight.absmax;
  w.nested = weight.nested;
  w.nested_absmax = weight.nested_absmax;
  w.nested_code = weight.nested_code;
  w.offset = weight.offset;
  w.type = weight.quant_type;
  w.blocksize = weight.blocksize;
  w.rows = 1;
  w.cols = weight.numel();
  Tensor out = Tensor::empty(weight.shape, dtype, weight.device());
  need_kernel("dequantize_4bit", weight.device(), &QuantizationKernels::dequantize_4bit)(w, out);
  return out;
}

bool is_quant_4bit_state_key(const std::string& name) {
  for (const char* suffix :
       {"weight.absmax", "weight.quant_map", "weight.nested_absmax", "weight.nested_quant_map",
        "weight.quant_state.bitsandbytes__nf4", "weight.quant_state.bitsandbytes__fp4"}) {
    const size_t len = std::strlen(suffix);
    if (name.size() >= len && name.compare(name.size() - len, len, suffix) == 0) return true;
  }
  return false;
}

std::vector<std::pair<std::string, Tensor>> quant_4bit_state_dict(const std::string& prefix,
                                                                  const Quant4bitWeight& weight) {
  const std::string p = prefix + "weight";
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back(p, weight.packed);
  out.emplace_back(p + ".absmax", weight.absmax);
  const std::array<float, 16> code = quant_4bit_code(weight.quant_type);
  out.emplace_back(p + ".quant_map",
                   floats(std::vector<float>(code.begin(), code.end()), weight.device()));
  // QuantState.as_dict(packed=True): the non-tensor fields as json.dumps writes them.
  std::string json = str_cat("{\"quant_type\": \"", quant_4bit_type_name(weight.quant_type),
                             "\", \"blocksize\": ", weight.blocksize, ", \"dtype\": \"",
                             torch_dtype_name(weight.dtype), "\", \"shape\": [");
  for (int i = 0; i < weight.shape.ndim(); ++i) {
    json += str_cat(i ? ", " : "", weight.shape[i]);
  }
  json += "]";
  if (weight.nested) {
    out.emplace_back(p + ".nested_absmax", weight.nested_absmax);
    out.emplace_back(p + ".nested_quant_map", weight.nested_code);
    json += str_cat(", \"nested_blocksize\": ", kNestedBlocksize,
                    ", \"nested_dtype\": \"float32\", \"nested_offset\": ",
                    nlohmann::json(static_cast<double>(weight.offset)).dump());
  }
  json += "}";
  out.emplace_back(p + ".quant_state.bitsandbytes__" + quant_4bit_type_name(weight.quant_type),
                   host_tensor(json.data(), json.size(), Shape{static_cast<int64_t>(json.size())},
                               DType::u8, weight.device()));
  return out;
}

Quant4bitWeight quant_4bit_from_state_dict(const std::string& prefix,
                                           const std::function<Tensor(const std::string&)>& load,
                                           const std::string& source, Device device) {
  const std::string p = prefix + "weight";
  auto need = [&](const std::string& key) {
    Tensor t = load(key);
    if (!t.defined()) {
      throw ValueError(
          str_cat(source, ": tensor '", key, "' is missing (a 4-bit weight needs it)"));
    }
    return t;
  };
  Tensor state = load(p + ".quant_state.bitsandbytes__nf4");
  if (!state.defined()) state = need(p + ".quant_state.bitsandbytes__fp4");
  const std::vector<int64_t> chars = state.to_int64_vector();
  const std::string text(chars.begin(), chars.end());
  const std::string state_key = p + ".quant_state";
  const nlohmann::json j = parse_json(text, str_cat(source, ": ", state_key));
  if (!j.is_object()) throw ValueError(str_cat(source, ": ", state_key, " is not a JSON object"));
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!j.contains(name)) {
      throw ValueError(str_cat(source, ": ", state_key, " has no field '", name, "'"));
    }
    return j.at(name);
  };
  Quant4bitWeight q;
  try {
    q.quant_type = parse_quant_4bit_type(field("quant_type").get<std::string>(),
                                         str_cat(source, ": ", state_key, ".quant_type"));
    q.blocksize = field("blocksize").get<int64_t>();
    q.dtype =
        dtype_from_torch_name(field("dtype").get<std::string>(), source, state_key + ".dtype");
    q.shape = Shape(field("shape").get<std::vector<int64_t>>());
    q.nested = j.contains("nested_offset");
    if (q.nested) {
      q.offset = field("nested_offset").get<float>();
      if (field("nested_blocksize").get<int64_t>() != kNestedBlocksize) {
        throw ValueError(str_cat(source, ": ", state_key, ".nested_blocksize is ",
                                 j.at("nested_blocksize").dump(), ", not ", kNestedBlocksize));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(str_cat(source, ": ", state_key, ": ", e.what()));
  }
  Quant4bitConfig config;
  config.blocksize = q.blocksize;
  check_quant_4bit_config(config, str_cat(source, ": ", state_key));
  q.packed = need(p).to(device);
  if (static_cast<int64_t>(q.packed.nbytes()) != (q.numel() + 1) / 2) {
    throw ValueError(str_cat(source, ": ", p, " holds ", q.packed.nbytes(), " bytes; shape ",
                             q.shape, " packs into ", (q.numel() + 1) / 2));
  }
  const std::vector<float> quant_map = need(p + ".quant_map").to_float_vector();
  const std::array<float, 16> code = quant_4bit_code(q.quant_type);
  if (!std::equal(quant_map.begin(), quant_map.end(), code.begin(), code.end())) {
    throw ValueError(str_cat(source, ": ", p, ".quant_map is not bitsandbytes' ",
                             quant_4bit_type_name(q.quant_type), " code"));
  }
  q.absmax = need(p + ".absmax").to(device);
  const DType absmax_dtype = q.nested ? DType::u8 : DType::f32;
  if (q.absmax.numel() != q.blocks() || q.absmax.dtype() != absmax_dtype) {
    throw ValueError(str_cat(source, ": ", p, ".absmax is ", dtype_name(q.absmax.dtype()), " ",
                             q.absmax.shape(), "; expected ", dtype_name(absmax_dtype), " [",
                             q.blocks(), "]"));
  }
  if (q.nested) {
    q.nested_absmax = need(p + ".nested_absmax").to(device);
    q.nested_code = need(p + ".nested_quant_map").to(device);
    const int64_t nested_blocks = (q.blocks() + kNestedBlocksize - 1) / kNestedBlocksize;
    if (q.nested_absmax.numel() != nested_blocks || q.nested_code.numel() != 256) {
      throw ValueError(str_cat(source, ": ", p, ".nested_absmax has ", q.nested_absmax.numel(),
                               " values (expected ", nested_blocks, ") and nested_quant_map ",
                               q.nested_code.numel(), " (expected 256)"));
    }
  }
  return q;
}

}  // namespace headroom
