// Our conversions against ml_dtypes / NumPy, through tests/fixtures/dtype_golden.txt (written by
// tools/gen_dtype_golden.py). The f32 inputs are rebuilt here exactly as the script builds them;
// the scalar functions and the bulk path on every ISA this CPU has are checked alike.
//
// Note [PyTorch c10 vs ml_dtypes]
// We follow ml_dtypes (and NumPy for f16). PyTorch's c10 conversions (c10/util/Half.h,
// BFloat16.h, Float8_e4m3fn.h, Float8_e5m2.h) differ from it in NaN bits only, as far as we found
// (read from the c10 sources, and for e4m3fn also emulated against ml_dtypes on random inputs):
// - f32 -> bf16: c10 returns +0x7FC0 for every NaN, dropping the sign; ml_dtypes keeps it (0xFFC0).
// - f32 -> f16: c10's fp16_ieee_from_fp32_value returns 0x7E00 | sign for every NaN; NumPy keeps
//   the top 10 payload bits (0x7F800001 -> 0x7C01, still signaling).
// - e5m2: c10 encodes NaN as 0x7F | sign, ml_dtypes as 0x7E | sign; c10 decodes e5m2 through f16
//   and keeps the payload (0x7D -> 0x7FA00000), ml_dtypes returns 0x7FC00000.
// - e4m3fn: c10 decodes 0x7F to 0x7FF00000 (its branch-free formula ORs all exponent bits in),
//   ml_dtypes to 0x7FC00000. c10's encoder tests |x| >= 480 for NaN where ml_dtypes rounds first
//   (overflow above 464 = max + ulp/2), but (464, 480) rounds up to the code 0x7F, NaN as well, so
//   the two agree on every non-NaN input. c10's subnormal path adds floats and would change under
//   FTZ/DAZ; ours is integer-only.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype_convert.h"
#include "core/float_formats.h"

namespace headroom {
namespace {

constexpr size_t kBlock = 65536;
constexpr uint32_t kSign = 0x80000000u;

uint32_t crc32(const void* data, size_t size) {  // zlib's CRC-32 (reflected 0xEDB88320)
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

uint32_t bits_of(float x) { return detail::f32_bits(x); }

struct Format {
  const char* name;
  DType dtype;
  uint32_t max_code;  // largest finite positive encoding
  int mantissa_bits;
  size_t code_size;
  uint32_t (*decode)(uint32_t code);  // to f32 bits
  uint32_t (*encode)(float x, Overflow overflow);
};

const std::array<Format, 4> kFormats = {{
    {"f16", DType::f16, 0x7BFF, 10, 2,
     [](uint32_t c) { return bits_of(f16_bits_to_f32(static_cast<uint16_t>(c))); },
     [](float x, Overflow o) -> uint32_t { return f32_to_f16_bits(x, o); }},
    {"bf16", DType::bf16, 0x7F7F, 7, 2,
     [](uint32_t c) { return bits_of(bf16_bits_to_f32(static_cast<uint16_t>(c))); },
     [](float x, Overflow o) -> uint32_t { return f32_to_bf16_bits(x, o); }},
    {"f8_e4m3fn", DType::f8_e4m3fn, 0x7E, 3, 1,
     [](uint32_t c) { return bits_of(f8_e4m3fn_bits_to_f32(static_cast<uint8_t>(c))); },
     [](float x, Overflow o) -> uint32_t { return f32_to_f8_e4m3fn_bits(x, o); }},
    {"f8_e5m2", DType::f8_e5m2, 0x7B, 2, 1,
     [](uint32_t c) { return bits_of(f8_e5m2_bits_to_f32(static_cast<uint8_t>(c))); },
     [](float x, Overflow o) -> uint32_t { return f32_to_f8_e5m2_bits(x, o); }},
}};

const Format& format_named(const std::string& name) {
  for (const Format& f : kFormats) {
    if (name == f.name) return f;
  }
  throw std::runtime_error("unknown format " + name);
}

const char* mode_name(Overflow o) { return o == Overflow::ieee ? "ieee" : "saturate"; }

// The input sets, in the order and with the generators of tools/gen_dtype_golden.py.

void append_ties(const Format& f, std::vector<uint32_t>& out) {
  std::vector<int64_t> b(f.max_code + 1);
  for (uint32_t k = 0; k <= f.max_code; ++k) b[k] = f.decode(k);
  for (uint32_t k = 0; k <= f.max_code; ++k) {
    const int64_t next = k < f.max_code ? b[k + 1] : 2 * b[k] - b[k - 1];
    int64_t mid = (b[k] + next) / 2;
    if (b[k] == 0) mid = next >= 0x00800000 ? next - 0x00800000 : next / 2;
    for (uint32_t sign : {0u, kSign}) {
      for (int64_t d = -1; d <= 1; ++d) out.push_back(static_cast<uint32_t>(mid + d) | sign);
    }
  }
}

std::vector<uint32_t> format_anchors(const Format& f) {
  const uint32_t top = f.decode(f.max_code), below_top = f.decode(f.max_code - 1);
  const uint32_t min_subnormal = f.decode(1);
  const uint32_t half_min_subnormal =
      min_subnormal >= 0x00800000u ? min_subnormal - 0x00800000u : min_subnormal / 2;
  return {top,
          top + (top - below_top) / 2,
          f.decode(1u << f.mantissa_bits),
          f.decode((1u << f.mantissa_bits) - 1),
          min_subnormal,
          half_min_subnormal};
}

const std::vector<uint32_t> kCommonAnchors = {0x3F800000, 0x7F7FFFFF, 0x00800000,
                                              0x00000001, 0x7F800000, 0x00000000};

const std::vector<uint32_t> kNanPatterns = {
    0x7F800001, 0x7F800002, 0x7F801FFF, 0x7F802000, 0x7F803FFF, 0x7F9FFFFF, 0x7FA00000,
    0x7FBFFFFF, 0x7FC00000, 0x7FC00001, 0x7FD55555, 0x7FE00000, 0x7FFFE000, 0x7FFFFFFF};

struct InputSet {
  std::string name;
  size_t start;
  size_t count;
};

struct Inputs {
  std::vector<uint32_t> bits;
  std::vector<float> values;  // the same, as floats
  std::vector<InputSet> sets;
};

Inputs build_inputs() {
  Inputs in;
  std::vector<uint32_t>& v = in.bits;
  auto begin_set = [&](const std::string& name) { in.sets.push_back({name, v.size(), 0}); };
  auto end_set = [&] { in.sets.back().count = v.size() - in.sets.back().start; };

  begin_set("f16_values");
  for (uint32_t c = 0; c < 65536; ++c) v.push_back(kFormats[0].decode(c));
  end_set();
  begin_set("bf16_values");
  for (uint32_t c = 0; c < 65536; ++c) v.push_back(c << 16);
  end_set();
  for (const Format* f : {&kFormats[2], &kFormats[3]}) {
    begin_set(std::string(f->name) + "_values");
    for (uint32_t c = 0; c < 256; ++c) v.push_back(f->decode(c));
    end_set();
  }
  for (const Format& f : kFormats) {
    begin_set(std::string("ties_") + f.name);
    append_ties(f, v);
    end_set();
  }
  begin_set("boundaries");
  std::vector<uint32_t> anchors;
  for (const Format& f : kFormats) {
    for (uint32_t a : format_anchors(f)) anchors.push_back(a);
  }
  anchors.insert(anchors.end(), kCommonAnchors.begin(), kCommonAnchors.end());
  for (uint32_t a : anchors) {
    for (int d = -8; d <= 8; ++d) {
      const uint32_t x = a + static_cast<uint32_t>(d);
      v.push_back(x);
      v.push_back(x ^ kSign);
    }
  }
  end_set();
  begin_set("specials");
  std::vector<uint32_t> specials = {0u, 0x7F800000u};
  specials.insert(specials.end(), kNanPatterns.begin(), kNanPatterns.end());
  for (uint32_t s : specials) {
    v.push_back(s);
    v.push_back(s | kSign);
  }
  end_set();
  begin_set("random_bits");
  SplitMix64 random_bits(0x68656164726F6F6Dull);
  for (int i = 0; i < 327680; ++i) v.push_back(static_cast<uint32_t>(random_bits.next()));
  end_set();
  begin_set("random_scaled");  // Irwin-Hall(4) normals at scales 2^k, exactly as in Python
  SplitMix64 random_scaled(0x0DDBA11ull);
  for (int exponent : {-30, -24, -20, -16, -12, -8, -4, 0, 4, 8, 12, 16, 20}) {
    const float scale = std::ldexp(1.0f, exponent - 24);
    for (int i = 0; i < 16384; ++i) {
      int64_t sum = 0;
      for (int k = 0; k < 4; ++k) sum += static_cast<int64_t>(random_scaled.next() >> 40);
      v.push_back(bits_of(static_cast<float>(sum - (int64_t{1} << 25)) * scale));
    }
  }
  end_set();

  in.values.resize(v.size());
  std::memcpy(in.values.data(), v.data(), v.size() * sizeof(uint32_t));
  return in;
}

const Inputs& inputs() {
  static const Inputs in = build_inputs();
  return in;
}

struct Golden {
  size_t input_count = 0;
  std::map<std::string, size_t> set_starts;
  std::map<std::string, std::vector<uint32_t>> crcs;  // stream -> CRC per block
  struct Decode {
    uint32_t code, bits, again;
  };
  std::map<std::string, std::vector<Decode>> decode;  // fp8 format -> its 256 codes
  struct Case {
    std::string format, mode;
    uint32_t input, expected;
  };
  std::vector<Case> cases;
};

const Golden& golden() {
  static const Golden g = [] {
    Golden g;
    const std::string path = std::string(HEADROOM_FIXTURES_DIR) + "/dtype_golden.txt";
    std::ifstream file(path);
    if (!file) throw std::runtime_error("cannot open " + path);
    std::string line;
    while (std::getline(file, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      std::string kind;
      fields >> kind;
      if (kind == "inputs") {
        fields >> g.input_count;
      } else if (kind == "set") {
        std::string name;
        size_t start, count;
        fields >> name >> start >> count;
        g.set_starts[name] = start;
      } else if (kind == "crc") {
        std::string stream;
        size_t block;
        uint32_t crc;
        fields >> stream >> block >> std::hex >> crc;
        std::vector<uint32_t>& list = g.crcs[stream];
        if (list.size() != block) throw std::runtime_error("crc blocks out of order: " + line);
        list.push_back(crc);
      } else if (kind == "decode") {
        std::string format;
        Golden::Decode d{};
        fields >> format >> std::hex >> d.code >> d.bits >> d.again;
        g.decode[format].push_back(d);
      } else if (kind == "case") {
        Golden::Case c;
        fields >> c.format >> c.mode >> std::hex >> c.input >> c.expected;
        g.cases.push_back(c);
      } else {
        throw std::runtime_error("unknown fixture line: " + line);
      }
      if (fields.fail()) throw std::runtime_error("malformed fixture line: " + line);
    }
    return g;
  }();
  return g;
}

std::string sets_in_block(size_t block) {
  std::string names;
  const size_t lo = block * kBlock, hi = lo + kBlock;
  for (const InputSet& s : inputs().sets) {
    if (s.start < hi && s.start + s.count > lo) names += (names.empty() ? "" : ", ") + s.name;
  }
  return names;
}

// Compares the CRC of each block of `data` (elements of `element_size` bytes) with the fixture.
void expect_block_crcs(const std::string& stream, const std::string& path, const void* data,
                       size_t count, size_t element_size) {
  const auto it = golden().crcs.find(stream);
  ASSERT_NE(it, golden().crcs.end()) << "fixture has no stream " << stream;
  const std::vector<uint32_t>& expected = it->second;
  ASSERT_EQ(expected.size(), (count + kBlock - 1) / kBlock) << stream;
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t block = 0; block < expected.size(); ++block) {
    const size_t first = block * kBlock, n = std::min(kBlock, count - first);
    const uint32_t crc = crc32(bytes + first * element_size, n * element_size);
    EXPECT_EQ(crc, expected[block])
        << path << ": " << stream << " differs from ml_dtypes in block " << block << " (inputs "
        << first << ".." << first + n - 1 << ": " << sets_in_block(block) << ")";
  }
}

// How the conversions are reached: the scalar functions one element at a time, or the bulk API
// on one ISA.
enum class Path { scalar_functions, bulk_scalar, bulk_avx512 };

std::string path_name(Path p) {
  switch (p) {
    case Path::scalar_functions:
      return "ScalarFunctions";
    case Path::bulk_scalar:
      return "BulkScalar";
    case Path::bulk_avx512:
      return "BulkAvx512";
  }
  return "?";
}

void PrintTo(Path p, std::ostream* os) { *os << path_name(p); }

class DTypeGolden : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    if (GetParam() == Path::bulk_avx512 && !cpu_isa_supported(CpuIsa::avx512)) {
      GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL";
    }
  }
  CpuIsa isa() const { return GetParam() == Path::bulk_avx512 ? CpuIsa::avx512 : CpuIsa::scalar; }

  std::vector<uint8_t> encode(const Format& f, const std::vector<float>& x,
                              Overflow overflow) const {
    std::vector<uint8_t> out(x.size() * f.code_size);
    if (GetParam() == Path::scalar_functions) {
      for (size_t i = 0; i < x.size(); ++i) {
        const uint32_t code = f.encode(x[i], overflow);
        std::memcpy(out.data() + i * f.code_size, &code, f.code_size);  // little-endian
      }
    } else {
      convert_from_f32(x.data(), out.data(), f.dtype, x.size(), overflow, isa());
    }
    return out;
  }

  std::vector<uint32_t> decode(const Format& f, const std::vector<uint32_t>& codes) const {
    std::vector<uint32_t> out(codes.size());
    if (GetParam() == Path::scalar_functions) {
      for (size_t i = 0; i < codes.size(); ++i) out[i] = f.decode(codes[i]);
    } else {
      std::vector<uint8_t> packed(codes.size() * f.code_size);
      for (size_t i = 0; i < codes.size(); ++i) {
        std::memcpy(packed.data() + i * f.code_size, &codes[i], f.code_size);
      }
      std::vector<float> wide(codes.size());
      convert_to_f32(packed.data(), f.dtype, wide.data(), codes.size(), isa());
      std::memcpy(out.data(), wide.data(), wide.size() * sizeof(float));
    }
    return out;
  }
};

TEST(DTypeGoldenInputs, MatchTheGenerator) {
  ASSERT_EQ(inputs().bits.size(), golden().input_count);
  for (const InputSet& s : inputs().sets) {
    const auto it = golden().set_starts.find(s.name);
    ASSERT_NE(it, golden().set_starts.end()) << s.name;
    EXPECT_EQ(it->second, s.start) << s.name;
  }
  expect_block_crcs("inputs", "generator", inputs().bits.data(), inputs().bits.size(), 4);
}

TEST_P(DTypeGolden, EncodesLikeMlDtypes) {
  for (const Format& f : kFormats) {
    for (Overflow overflow : {Overflow::ieee, Overflow::saturate}) {
      const std::vector<uint8_t> out = encode(f, inputs().values, overflow);
      expect_block_crcs(std::string("encode_") + f.name + "_" + mode_name(overflow),
                        path_name(GetParam()), out.data(), inputs().values.size(), f.code_size);
    }
  }
}

// Every f16 and bf16 pattern decodes as NumPy / ml_dtypes decodes it, and decoding then encoding
// gives what they give: the same pattern, except bf16 NaNs, which become +-0x7FC0.
TEST_P(DTypeGolden, DecodesEvery16BitPattern) {
  std::vector<uint32_t> codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[c] = c;
  for (const Format* f : {&kFormats[0], &kFormats[1]}) {
    const std::vector<uint32_t> bits = decode(*f, codes);
    expect_block_crcs(std::string("decode_") + f->name, path_name(GetParam()), bits.data(), 65536,
                      4);
    std::vector<float> values(65536);
    std::memcpy(values.data(), bits.data(), bits.size() * sizeof(uint32_t));
    const std::vector<uint8_t> again = encode(*f, values, Overflow::ieee);
    expect_block_crcs(std::string("roundtrip_") + f->name, path_name(GetParam()), again.data(),
                      65536, 2);
  }
}

TEST_P(DTypeGolden, DecodesEveryFp8Pattern) {
  for (const Format* f : {&kFormats[2], &kFormats[3]}) {
    const std::vector<Golden::Decode>& table = golden().decode.at(f->name);
    ASSERT_EQ(table.size(), 256u);
    // Several copies at an odd offset, so the bulk path sees full vectors and a tail.
    std::vector<uint32_t> codes;
    for (int copy = 0; copy < 3; ++copy) {
      for (const Golden::Decode& d : table) codes.push_back(d.code);
    }
    codes.erase(codes.begin(), codes.begin() + 3);
    const std::vector<uint32_t> bits = decode(*f, codes);
    std::vector<float> values(bits.size());
    std::memcpy(values.data(), bits.data(), bits.size() * sizeof(uint32_t));
    const std::vector<uint8_t> again = encode(*f, values, Overflow::ieee);
    for (size_t i = 0; i < codes.size(); ++i) {
      const Golden::Decode& d = table[codes[i]];
      EXPECT_EQ(bits[i], d.bits) << f->name << " code 0x" << std::hex << d.code << " on "
                                 << path_name(GetParam());
      EXPECT_EQ(again[i], d.again) << f->name << " code 0x" << std::hex << d.code
                                   << " decoded and encoded again on " << path_name(GetParam());
    }
  }
}

TEST_P(DTypeGolden, CuratedCases) {
  ASSERT_FALSE(golden().cases.empty());
  for (const Golden::Case& c : golden().cases) {
    const Format& f = format_named(c.format);
    const Overflow overflow = c.mode == "ieee" ? Overflow::ieee : Overflow::saturate;
    float x;
    std::memcpy(&x, &c.input, sizeof x);
    // Surround the value with neighbours so the bulk path converts it inside a full vector.
    std::vector<float> v(37, 1.0f);
    v[17] = x;
    const std::vector<uint8_t> out = encode(f, v, overflow);
    uint32_t code = 0;
    std::memcpy(&code, out.data() + 17 * f.code_size, f.code_size);
    EXPECT_EQ(code, c.expected) << "f32 0x" << std::hex << c.input << " (" << x << ") -> "
                                << c.format << " " << c.mode << " on " << path_name(GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, DTypeGolden,
                         ::testing::Values(Path::scalar_functions, Path::bulk_scalar,
                                           Path::bulk_avx512),
                         [](const ::testing::TestParamInfo<Path>& info) {
                           return path_name(info.param);
                         });

}  // namespace
}  // namespace headroom
