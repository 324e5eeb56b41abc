// NF4 / FP4 quantization against bitsandbytes' own bytes (tests/fixtures/quant/
// quant4bit_golden.txt from tools/gen_quant4bit_golden.py): packed codes, absmax, double
// quantization's offset and nested statistics, dequantized values, and the state_dict round trip.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <sstream>

#include "backend/cpu/blockwise_quant.h"
#include "core/error.h"
#include "core/kernel_census.h"
#include "memory/device_memory.h"
#include "optim/golden_lines.h"
#include "quant/quant_4bit.h"

namespace headroom {
namespace {

using optim_test::for_each_fixture_line;

// The hex words of a line: bytes (one word of 2k hex digits) or one value's bits per word.
std::vector<uint8_t> read_bytes(std::istringstream& in) {
  std::string word;
  in >> word;
  std::vector<uint8_t> out(word.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint8_t>(std::stoul(word.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

std::vector<uint32_t> read_words(std::istringstream& in) {
  std::vector<uint32_t> out;
  std::string word;
  while (in >> word) out.push_back(static_cast<uint32_t>(std::stoul(word, nullptr, 16)));
  return out;
}

std::vector<float> as_floats(const std::vector<uint32_t>& bits) {
  std::vector<float> out(bits.size());
  std::memcpy(out.data(), bits.data(), bits.size() * 4);
  return out;
}

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// A tensor of `dtype` whose elements have the given bit patterns.
Tensor from_bits(const std::vector<uint32_t>& words, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < words.size(); ++i) {
    if (dtype == DType::f32) {
      t.data<float>()[i] = as_floats({words[i]})[0];
    } else {
      static_cast<uint16_t*>(t.data_ptr())[i] = static_cast<uint16_t>(words[i]);
    }
  }
  return t;
}

std::vector<uint32_t> bits_of_tensor(const Tensor& t) {
  std::vector<uint32_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype() == DType::f32) {
      out[i] = bits_of(t.data<float>()[i]);
    } else {
      out[i] = static_cast<const uint16_t*>(t.data_ptr())[i];
    }
  }
  return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return {p, p + c.nbytes()};
}

DType dtype_of(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "f16") return DType::f16;
  return DType::u8;
}

struct GoldenCase {
  std::string name;
  Quant4bitConfig config;
  DType dtype = DType::f32;
  Shape shape;
  std::vector<uint32_t> input;
  std::vector<uint8_t> packed, absmax_u8;
  std::vector<uint32_t> absmax, nested_absmax, dequant;
  uint32_t offset = 0;
};

struct Golden {
  std::vector<GoldenCase> cases;
  std::map<std::string, std::vector<uint32_t>> codes;
  std::vector<uint32_t> nested_code;
  std::vector<uint32_t> blockwise_input, blockwise_absmax;
  std::vector<uint8_t> blockwise_codes;
};

const Golden& golden() {
  static const Golden g = [] {
    Golden g;
    bool in_blockwise = false;
    for_each_fixture_line(
        "quant/quant4bit_golden.txt", [&](const std::string& key, std::istringstream& in) {
          if (key == "code") {
            std::string type;
            in >> type;
            g.codes[type] = read_words(in);
          } else if (key == "nested_code") {
            g.nested_code = read_words(in);
          } else if (key == "case") {
            GoldenCase c;
            std::string type, storage, dtype;
            int double_quant = 0, ndim = 0;
            in >> c.name >> type >> c.config.blocksize >> double_quant >> storage >> dtype >> ndim;
            std::vector<int64_t> dims(static_cast<size_t>(ndim));
            for (int64_t& d : dims) in >> d;
            c.config.quant_type = parse_quant_4bit_type(type, "fixture");
            c.config.double_quant = double_quant != 0;
            c.config.quant_storage = dtype_of(storage);
            c.dtype = dtype_of(dtype);
            c.shape = Shape(dims);
            g.cases.push_back(c);
            in_blockwise = false;
          } else if (key == "blockwise") {
            in_blockwise = true;
          } else if (in_blockwise) {
            if (key == "input") g.blockwise_input = read_words(in);
            if (key == "codes") g.blockwise_codes = read_bytes(in);
            if (key == "absmax") g.blockwise_absmax = read_words(in);
          } else if (!g.cases.empty()) {  // keys before the first case (order) describe the file
            GoldenCase& c = g.cases.back();
            if (key == "input") c.input = read_words(in);
            if (key == "packed") c.packed = read_bytes(in);
            if (key == "absmax") c.absmax = read_words(in);
            if (key == "absmax_u8") c.absmax_u8 = read_bytes(in);
            if (key == "offset") c.offset = read_words(in).at(0);
            if (key == "nested_absmax") c.nested_absmax = read_words(in);
            if (key == "dequant") c.dequant = read_words(in);
          }
        });
    return g;
  }();
  return g;
}

TEST(Quant4bit, CodesAreBitsandbytes) {
  for (Quant4bitType type : {Quant4bitType::nf4, Quant4bitType::fp4}) {
    const std::array<float, 16> code = quant_4bit_code(type);
    const std::vector<uint32_t>& expected = golden().codes.at(quant_4bit_type_name(type));
    ASSERT_EQ(expected.size(), 16u);
    for (unsigned q = 0; q < 16; ++q) EXPECT_EQ(bits_of(code[q]), expected[q]) << "code " << q;
  }
  const cpu::QuantizationMap map = cpu::create_dynamic_map(true, 7, 8, /*fused_linspace=*/true);
  ASSERT_EQ(golden().nested_code.size(), 256u);
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(bits_of(map[i]), golden().nested_code[i]) << i;
}

TEST(Quant4bit, BytesAbsmaxAndNestedStatisticsEqualBitsandbytes) {
  ASSERT_GE(golden().cases.size(), 10u);
  for (const GoldenCase& c : golden().cases) {
    SCOPED_TRACE(c.name);
    const Tensor x = from_bits(c.input, c.shape, c.dtype);
    const Quant4bitWeight q = quantize_4bit(x, c.config);
    EXPECT_EQ(q.packed.dtype(), c.config.quant_storage);
    const std::vector<uint8_t> packed = bytes_of(q.packed);
    ASSERT_EQ(packed.size(), c.packed.size());
    for (size_t i = 0; i < packed.size(); ++i) {
      ASSERT_EQ(int{packed[i]}, int{c.packed[i]})
          << "byte " << i << " (elements " << 2 * i << ", " << 2 * i + 1 << ")";
    }
    if (c.config.double_quant) {
      EXPECT_EQ(bits_of(q.offset), c.offset);
      EXPECT_EQ(bytes_of(q.absmax), c.absmax_u8);
      EXPECT_EQ(bits_of_tensor(q.nested_absmax), c.nested_absmax);
    } else {
      EXPECT_EQ(bits_of_tensor(q.absmax), c.absmax);
    }
    if (!c.dequant.empty()) {
      EXPECT_EQ(bits_of_tensor(dequantize_4bit(q, c.dtype)), c.dequant);
    }
  }
}

TEST(Quant4bit, CpuBlockwiseLookupEqualsBitsandbytes) {
  const Golden& g = golden();
  const std::vector<float> x = as_floats(g.blockwise_input);
  std::vector<uint8_t> codes(x.size());
  std::vector<float> absmax((x.size() + 255) / 256);
  cpu::quantize_blockwise_lut(cpu::create_dynamic_map(true, 7, 8, true), x.data(),
                              static_cast<int64_t>(x.size()), 256, codes.data(), absmax.data());
  EXPECT_EQ(codes, g.blockwise_codes);
  std::vector<uint32_t> absmax_bits;
  for (float a : absmax) absmax_bits.push_back(bits_of(a));
  EXPECT_EQ(absmax_bits, g.blockwise_absmax);
}

TEST(Quant4bit, StateDictRoundTripsWithBitsandbytesKeys) {
  const GoldenCase& c = golden().cases.at(2);  // nested
  ASSERT_TRUE(c.config.double_quant);
  const Quant4bitWeight q = quantize_4bit(from_bits(c.input, c.shape, c.dtype), c.config);
  const auto entries = quant_4bit_state_dict("model.layers.0.mlp.up_proj.", q);
  std::vector<std::string> names;
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : entries) {
    names.push_back(name);
    by_name[name] = t;
  }
  const std::string p = "model.layers.0.mlp.up_proj.weight";
  EXPECT_EQ(names, (std::vector<std::string>{p, p + ".absmax", p + ".quant_map",
                                             p + ".nested_absmax", p + ".nested_quant_map",
                                             p + ".quant_state.bitsandbytes__nf4"}));
  for (const std::string& n : names) {
    if (n != p) {
      EXPECT_TRUE(is_quant_4bit_state_key(n)) << n;
    }
  }
  EXPECT_FALSE(is_quant_4bit_state_key(p));
  const std::vector<uint8_t> json = bytes_of(by_name.at(p + ".quant_state.bitsandbytes__nf4"));
  const std::string head = "{\"quant_type\": \"nf4\", \"blocksize\": 32, ";
  EXPECT_EQ(std::string(json.begin(), json.begin() + static_cast<long>(head.size())), head);
  const Quant4bitWeight back = quant_4bit_from_state_dict(
      "model.layers.0.mlp.up_proj.",
      [&](const std::string& name) { return by_name.count(name) ? by_name.at(name) : Tensor(); },
      "test.safetensors", kCPU);
  EXPECT_EQ(back.shape, q.shape);
  EXPECT_EQ(bits_of(back.offset), bits_of(q.offset));
  EXPECT_EQ(bytes_of(back.packed), bytes_of(q.packed));
  EXPECT_EQ(quant_4bit_absmax(back), quant_4bit_absmax(q));

  by_name.erase(p + ".nested_absmax");
  try {
    quant_4bit_from_state_dict(
        "model.layers.0.mlp.up_proj.",
        [&](const std::string& name) { return by_name.count(name) ? by_name.at(name) : Tensor(); },
        "test.safetensors", kCPU);
    FAIL() << "a missing nested_absmax was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("test.safetensors: tensor '" + p + ".nested_absmax'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Quant4bit, MetaDeviceAllocatesTheSameTensors) {
  Quant4bitConfig config;
  config.quant_type = Quant4bitType::nf4;
  config.double_quant = true;
  const Quant4bitWeight cpu = quantize_4bit(Tensor::randn({300, 70}), config);
  const Quant4bitWeight meta = quantize_4bit(Tensor::empty({300, 70}, DType::f32, kMeta), config);
  EXPECT_EQ(meta.nbytes(), cpu.nbytes());
  EXPECT_EQ(meta.packed.shape(), cpu.packed.shape());
  EXPECT_EQ(meta.absmax.shape(), cpu.absmax.shape());
  EXPECT_EQ(meta.nested_absmax.shape(), cpu.nested_absmax.shape());
}

// The allocator's view of quantize_4bit on the CPU (whose host is its device) is the meta dry
// run's: the same blocks in the same order, and no temporary beside them but double
// quantization's f32 absmax, held until its 8-bit codes are made (a widened copy of a bf16
// weight once made the real load peak exceed the plan; the kernels read the weight as it is).
TEST(Quant4bit, CpuAllocatesWhatTheDryRunAllocates) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (bool nested : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (nested ? " nested" : ""));
      Quant4bitConfig config;
      config.quant_type = Quant4bitType::nf4;
      config.double_quant = nested;
      auto measure = [&](const Tensor& weight) {
        const Device device = weight.device();
        empty_cache(device);
        reset_peak_memory_stats(device);
        const int64_t before = static_cast<int64_t>(memory_allocated(device));
        const Quant4bitWeight q = quantize_4bit(weight, config);
        return std::pair(static_cast<int64_t>(max_memory_allocated(device)) - before,
                         static_cast<int64_t>(memory_allocated(device)) - before);
      };
      const auto [cpu_peak, cpu_held] = measure(Tensor::randn({300, 700}).to(dtype));
      const auto [meta_peak, meta_held] = measure(Tensor::empty({300, 700}, dtype, kMeta));
      // 3,282 blocks of 64: 13,128 bytes of f32 absmax, in blocks of 512 bytes; the offset's
      // 4 bytes take one more.
      const int64_t transient = nested ? 13312 + 512 : 0;
      EXPECT_EQ(cpu_peak, cpu_held + transient);
      EXPECT_EQ(cpu_held, meta_held);
      EXPECT_EQ(cpu_peak, meta_peak);
    }
  }
}

// Quantizing and dequantizing are kernel-table calls on the weight's device: the census sees
// them on every device, and a GPU's weight is never brought to the host for them.
TEST(Quant4bit, CodecRunsThroughTheKernelTable) {
  for (bool nested : {false, true}) {
    Quant4bitConfig config;
    config.quant_type = Quant4bitType::nf4;
    config.double_quant = nested;
    for (Device device : {kCPU, kMeta}) {
      KernelCensus census;
      {
        KernelCensusScope open(census);
        const Quant4bitWeight q =
            quantize_4bit(Tensor::zeros({64, 32}, DType::bf16, device), config);
        (void)dequantize_4bit(q, DType::bf16);
      }
      std::vector<std::string> entries;
      for (const KernelLaunch& l : census.launches()) {
        if (std::string_view(l.family) == "quantization") entries.emplace_back(l.entry);
      }
      std::vector<std::string> expected{"quantize_4bit"};
      if (nested) expected.emplace_back("quantize_absmax_nested");
      expected.emplace_back("dequantize_4bit");
      EXPECT_EQ(entries, expected) << device;
    }
  }
}

// dequantize_4bit in each dtype is the fp32 values rounded once.
TEST(Quant4bit, DequantizeInEachDtypeIsTheFp32ValuesRounded) {
  Quant4bitConfig config;
  config.quant_type = Quant4bitType::fp4;
  config.double_quant = true;
  const Quant4bitWeight q = quantize_4bit(Tensor::randn({33, 70}), config);
  const Tensor wide = dequantize_4bit(q, DType::f32);
  for (DType dtype : {DType::bf16, DType::f16}) {
    EXPECT_EQ(dequantize_4bit(q, dtype).to_float_vector(), wide.to(dtype).to_float_vector());
  }
  EXPECT_THROW(dequantize_4bit(q, DType::u8), ValueError);
}

TEST(Quant4bit, BadConfigsNameTheField) {
  Quant4bitConfig config;
  config.blocksize = 48;
  EXPECT_THROW(quantize_4bit(Tensor::zeros({64}), config), ValueError);
  config.blocksize = 64;
  config.quant_storage = DType::f32;
  // 10 values pack into 5 bytes: not a whole number of f32.
  EXPECT_THROW(quantize_4bit(Tensor::zeros({10}), config), ValueError);
  EXPECT_THROW(parse_quant_4bit_type("int4", "bnb_4bit_quant_type"), ValueError);
}

}  // namespace
}  // namespace headroom
