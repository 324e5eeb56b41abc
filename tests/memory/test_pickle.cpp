// Tests of pickle_dumps (byte-exact against the pickle spec, round trip through a decoder that
// knows only MemoryViz.js's opcodes, Python's pickle.load) and of write_file_atomically.
#include "memory/pickle.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "memory/memory_viz_decoder.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using memory_test::MemoryVizDecoder;

// "80 04 4b 00 2e" -> the bytes. Expected encodings below are written from the pickle opcode
// table (Lib/pickletools.py) and were cross-checked with pickletools.dis and pickle.loads.
std::string hex(std::string_view text) {
  std::string out;
  std::istringstream in{std::string(text)};
  std::string byte;
  while (in >> byte) out += static_cast<char>(std::stoi(byte, nullptr, 16));
  return out;
}

std::string to_hex(std::string_view bytes) {
  std::string out;
  char buf[4];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "%02x ", c);
    out += buf;
  }
  if (!out.empty()) out.pop_back();
  return out;
}

// The protocol header and STOP around a single value's opcodes.
std::string framed(std::string_view body_hex) { return hex(str_cat("80 04 ", body_hex, " 2e")); }

#define EXPECT_PICKLES_TO(value, body_hex) \
  EXPECT_EQ(to_hex(pickle_dumps(value)), to_hex(framed(body_hex))) << "for " #value

TEST(PickleDumps, IntegersUseTheSmallestOpcodeAtEachBoundary) {
  EXPECT_PICKLES_TO(0, "4b 00");                    // BININT1
  EXPECT_PICKLES_TO(255, "4b ff");                  // BININT1, unsigned byte
  EXPECT_PICKLES_TO(256, "4d 00 01");               // BININT2
  EXPECT_PICKLES_TO(65535, "4d ff ff");             // BININT2, unsigned
  EXPECT_PICKLES_TO(65536, "4a 00 00 01 00");       // BININT, signed 32-bit
  EXPECT_PICKLES_TO(2147483647, "4a ff ff ff 7f");  // 2^31-1
  EXPECT_PICKLES_TO(-1, "4a ff ff ff ff");
  EXPECT_PICKLES_TO(int64_t{-2147483648}, "4a 00 00 00 80");  // -2^31
  // LONG1: length byte, then the shortest little-endian two's complement.
  EXPECT_PICKLES_TO(int64_t{2147483648}, "8a 05 00 00 00 80 00");         // 2^31 needs a sign byte
  EXPECT_PICKLES_TO(int64_t{-2147483649}, "8a 05 ff ff ff 7f ff");        // -2^31-1
  EXPECT_PICKLES_TO(int64_t{0x7f3ac0000000}, "8a 06 00 00 00 c0 3a 7f");  // a device address
  EXPECT_PICKLES_TO(std::numeric_limits<int64_t>::max(), "8a 08 ff ff ff ff ff ff ff 7f");
  EXPECT_PICKLES_TO(std::numeric_limits<int64_t>::min(), "8a 08 00 00 00 00 00 00 00 80");
  EXPECT_PICKLES_TO(std::numeric_limits<uint64_t>::max(), "8a 09 ff ff ff ff ff ff ff ff 00");
  EXPECT_PICKLES_TO(uint64_t{1} << 63, "8a 09 00 00 00 00 00 00 00 80 00");
  // Unsigned values below 2^63 encode exactly as the same signed number.
  EXPECT_PICKLES_TO(uint64_t{255}, "4b ff");
  EXPECT_PICKLES_TO(uint64_t{2147483648}, "8a 05 00 00 00 80 00");
}

TEST(PickleDumps, FloatsAreBigEndianDoubles) {
  EXPECT_PICKLES_TO(1.5, "47 3f f8 00 00 00 00 00 00");
  EXPECT_PICKLES_TO(0.1, "47 3f b9 99 99 99 99 99 9a");
  EXPECT_PICKLES_TO(-0.0, "47 80 00 00 00 00 00 00 00");
  EXPECT_PICKLES_TO(-2.0, "47 c0 00 00 00 00 00 00 00");
  EXPECT_PICKLES_TO(std::numeric_limits<double>::infinity(), "47 7f f0 00 00 00 00 00 00");
  EXPECT_PICKLES_TO(1.0f, "47 3f f0 00 00 00 00 00 00");  // float widens to double
}

TEST(PickleDumps, NoneAndBooleans) {
  EXPECT_PICKLES_TO(PickleValue(), "4e");
  EXPECT_PICKLES_TO(nullptr, "4e");
  EXPECT_PICKLES_TO(true, "88");
  EXPECT_PICKLES_TO(false, "89");
}

TEST(PickleDumps, StringsAreUtf8AndMemoized) {
  EXPECT_PICKLES_TO("", "8c 00 94");
  EXPECT_PICKLES_TO("abc", "8c 03 61 62 63 94");
  EXPECT_PICKLES_TO("\xc3\xa9\xe2\x82\xac", "8c 05 c3 a9 e2 82 ac 94");  // "é€", length in bytes
  EXPECT_PICKLES_TO("\xf0\x9f\x98\x80", "8c 04 f0 9f 98 80 94");         // U+1F600
  const std::string s255(255, 'x');
  EXPECT_EQ(pickle_dumps(s255), hex("80 04 8c ff") + s255 + hex("94 2e"));
  const std::string s256(256, 'y');
  EXPECT_EQ(pickle_dumps(s256), hex("80 04 58 00 01 00 00") + s256 + hex("94 2e"));
  std::string s300;
  for (int i = 0; i < 100; ++i) s300 += "\xc3\xa9z";  // 300 bytes, 200 code points
  EXPECT_EQ(pickle_dumps(s300), hex("80 04 58 2c 01 00 00") + s300 + hex("94 2e"));
  // A repeat is a BINGET of the memo slot the first occurrence filled.
  EXPECT_PICKLES_TO(PickleValue::list({"name", "name", "file", "name"}),
                    "5d 28 8c 04 6e 61 6d 65 94 68 00 8c 04 66 69 6c 65 94 68 00 65");
}

TEST(PickleDumps, MemoIndexesPast255UseLongBinget) {
  PickleValue list = PickleValue::list();
  for (int i = 0; i < 300; ++i) list.append(str_cat("k", 1000 + i));  // memo slots 0..299
  list.append("k1000");                                               // slot 0: BINGET
  list.append("k1299");                                               // slot 299: LONG_BINGET
  const std::string bytes = pickle_dumps(list);
  // ... k1299 MEMOIZE, then BINGET 0, LONG_BINGET 299, APPENDS, STOP.
  EXPECT_EQ(to_hex(bytes.substr(bytes.size() - 10)), "94 68 00 6a 2b 01 00 00 65 2e");
}

TEST(PickleDumps, ShortStringsRepeatRatherThanUseLongerGets) {
  PickleValue list = PickleValue::list();
  for (int i = 0; i < 300; ++i) list.append(str_cat("k", 1000 + i));
  list.append("");  // slot 300: memoized
  list.append("");  // LONG_BINGET would be 5 bytes, the string itself is 2
  const std::string bytes = pickle_dumps(list);
  EXPECT_EQ(to_hex(bytes.substr(bytes.size() - 7)), "8c 00 94 8c 00 65 2e");
}

TEST(PickleDumps, RejectsInvalidUtf8) {
  for (const char* bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ab\xe2\x82"}) {
    EXPECT_THROW(pickle_dumps(PickleValue(bad)), ValueError) << to_hex(bad);
  }
  EXPECT_THROW(pickle_dumps(PickleValue::dict({{"ok", 1}, {"\x80", 2}})), ValueError);
}

TEST(PickleDumps, EmptyContainers) {
  EXPECT_PICKLES_TO(PickleValue::list(), "5d");
  EXPECT_PICKLES_TO(PickleValue::dict(), "7d");
  EXPECT_PICKLES_TO(PickleValue::tuple(), "29");
}

TEST(PickleDumps, ContainersUseAppendSetitemAndTupleForms) {
  EXPECT_PICKLES_TO(PickleValue::list({1}), "5d 4b 01 61");              // EMPTY_LIST x APPEND
  EXPECT_PICKLES_TO(PickleValue::list({1, 2}), "5d 28 4b 01 4b 02 65");  // MARK .. APPENDS
  EXPECT_PICKLES_TO(PickleValue::dict({{"a", 1}}), "7d 8c 01 61 94 4b 01 73");  // SETITEM
  EXPECT_PICKLES_TO(PickleValue::dict({{"a", 1}, {"b", PickleValue::list()}}),
                    "7d 28 8c 01 61 94 4b 01 8c 01 62 94 5d 75");  // MARK .. SETITEMS
  EXPECT_PICKLES_TO(PickleValue::tuple({7}), "4b 07 85");
  EXPECT_PICKLES_TO(PickleValue::tuple({7, 8}), "4b 07 4b 08 86");
  EXPECT_PICKLES_TO(PickleValue::tuple({7, 8, 9}), "4b 07 4b 08 4b 09 87");
  EXPECT_PICKLES_TO(PickleValue::tuple({1, 2, 3, 4}), "28 4b 01 4b 02 4b 03 4b 04 74");
}

TEST(PickleDumps, NestedContainers) {
  const PickleValue v = PickleValue::dict(
      {{"x", PickleValue::dict({{"y", PickleValue::list({nullptr, true})}})}, {"z", -1}});
  EXPECT_PICKLES_TO(v,
                    "7d 28 8c 01 78 94 7d 8c 01 79 94 5d 28 4e 88 65 73 "
                    "8c 01 7a 94 4a ff ff ff ff 75");
}

TEST(PickleValueApi, BuildsSnapshotShapedTrees) {
  const uint64_t addr = 0x7f0000200000;
  PickleValue segments = PickleValue::list();
  PickleValue& seg =
      segments.append(PickleValue::dict({{"device", 0},
                                         {"address", addr},
                                         {"total_size", 2 << 20},
                                         {"segment_type", "large"},
                                         {"segment_pool_id", PickleValue::tuple({0, 0})},
                                         {"blocks", PickleValue::list()}}));
  seg.at("blocks").append(PickleValue::dict({{"size", 512}, {"state", "active_allocated"}}));
  seg.set("total_size", 4 << 20);  // replaces in place
  EXPECT_EQ(seg.size(), 6u);
  EXPECT_EQ(seg.as_dict()[2].first, "total_size");
  EXPECT_EQ(seg.at("total_size").as_int64(), 4 << 20);
  EXPECT_EQ(seg.at("address").as_uint64(), addr);
  EXPECT_EQ(seg.at("address").kind(), PickleValue::Kind::UInt);
  EXPECT_EQ(seg.at("blocks").at(0).at("state").as_string(), "active_allocated");
  EXPECT_EQ(seg.find("frames"), nullptr);
  EXPECT_THROW(seg.at("frames"), IndexError);
  EXPECT_THROW(seg.at("address").as_string(), ValueError);
  EXPECT_THROW(PickleValue(-1).as_uint64(), ValueError);
  EXPECT_THROW(PickleValue(std::numeric_limits<uint64_t>::max()).as_int64(), ValueError);
  EXPECT_THROW(PickleValue::list().set("k", 1), ValueError);
  // A repeated key keeps its first position and the last value, as in a Python dict literal.
  const PickleValue d = PickleValue::dict({{"a", 1}, {"b", 2}, {"a", 3}});
  EXPECT_EQ(d, PickleValue::dict({{"a", 3}, {"b", 2}}));
  // Integers compare by value, whatever their kind.
  EXPECT_EQ(PickleValue(uint64_t{5}), PickleValue(int64_t{5}));
  EXPECT_NE(PickleValue(-1), PickleValue(std::numeric_limits<uint64_t>::max()));
  EXPECT_NE(PickleValue::list({1}), PickleValue::tuple({1}));
}

PickleValue decode(const PickleValue& v) { return MemoryVizDecoder(pickle_dumps(v)).decode(); }

class RandomValues {
 public:
  explicit RandomValues(uint32_t seed) : rng_(seed) {}

  PickleValue value(int depth) {
    const int kinds = depth > 0 ? 9 : 6;
    switch (pick(kinds)) {
      case 0:
        return pick(4) == 0 ? PickleValue() : PickleValue(pick(2) == 1);
      case 1:
        return integer();
      case 2:
        return integer();
      case 3: {
        double d;  // any bit pattern but NaN, which is unequal to itself
        do d = std::bit_cast<double>(bits64());
        while (std::isnan(d));
        return d;
      }
      case 4:
        return string();
      case 5:
        return words_[pick(words_.size())];  // repeats exercise the memo
      case 6: {
        PickleValue list = PickleValue::list();
        const size_t n = pick(8) == 0 ? pick(2600) : pick(6);  // sometimes over a 1000-batch
        for (size_t i = 0; i < n; ++i) list.append(n > 50 ? integer() : value(depth - 1));
        return list;
      }
      case 7: {
        PickleValue::List items;
        for (size_t i = 0, n = pick(6); i < n; ++i) items.push_back(value(depth - 1));
        return PickleValue::tuple(std::move(items));
      }
      default: {
        PickleValue dict = PickleValue::dict();
        const size_t n = pick(12) == 0 ? pick(1500) : pick(7);
        for (size_t i = 0; i < n; ++i) {
          dict.set(pick(3) == 0 ? string() : str_cat(words_[pick(words_.size())], i),
                   n > 50 ? integer() : value(depth - 1));
        }
        return dict;
      }
    }
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  uint64_t bits64() { return uint64_t{rng_()} << 32 | rng_(); }

  PickleValue integer() {
    // Around every encoding boundary, and anywhere.
    static constexpr int64_t kEdges[] = {0,
                                         255,
                                         65535,
                                         2147483647,
                                         -2147483648LL,
                                         int64_t{1} << 39,
                                         int64_t{1} << 47,
                                         int64_t{1} << 55};
    const int64_t delta = static_cast<int64_t>(pick(5)) - 2;
    switch (pick(5)) {
      case 0:
        return kEdges[pick(std::size(kEdges))] + delta;
      case 1:
        return -kEdges[pick(std::size(kEdges))] + delta;
      case 2:
        return std::numeric_limits<uint64_t>::max() - pick(3);
      case 3:
        return static_cast<int64_t>(bits64());
      default:
        return bits64();
    }
  }

  std::string string() {
    static const char* kPieces[] = {"a",
                                    "Z",
                                    "_",
                                    " ",
                                    "\xc3\xa9",
                                    "\xe2\x82\xac",
                                    "\xf0\x9f\x98\x80",
                                    "torch/nn/modules/linear.py",
                                    "\n",
                                    "\t"};
    std::string s;
    const size_t n = pick(10) == 0 ? 100 + pick(200) : pick(12);
    for (size_t i = 0; i < n; ++i) s += kPieces[pick(std::size(kPieces))];
    return s;
  }

  std::mt19937 rng_;
  std::vector<std::string> words_ = {"address", "size", "frames", "filename", "", "x"};
};

TEST(PickleDumps, RandomTreesRoundTripThroughMemoryVizOpcodes) {
  RandomValues random(20240611);
  for (int i = 0; i < 300; ++i) {
    const PickleValue v = random.value(4);
    PickleValue back;
    ASSERT_NO_THROW(back = decode(v)) << "tree " << i;
    ASSERT_EQ(back, v) << "tree " << i;
  }
}

TEST(PickleDumps, LargeContainersAreBatchedByThousand) {
  PickleValue list = PickleValue::list();
  for (int i = 0; i < 2501; ++i) list.append(i);
  MemoryVizDecoder decoder(pickle_dumps(list));
  EXPECT_EQ(decoder.decode(), list);
  EXPECT_EQ(decoder.count('('), 3);
  EXPECT_EQ(decoder.count('e'), 3);  // 1000 + 1000 + 501
  EXPECT_EQ(decoder.count('a'), 0);

  // 1001 items: a full batch, then a lone APPEND.
  PickleValue lone = PickleValue::list();
  for (int i = 0; i < 1001; ++i) lone.append(i);
  MemoryVizDecoder lone_decoder(pickle_dumps(lone));
  EXPECT_EQ(lone_decoder.decode(), lone);
  EXPECT_EQ(lone_decoder.count('e'), 1);
  EXPECT_EQ(lone_decoder.count('a'), 1);

  PickleValue dict = PickleValue::dict();
  for (int i = 0; i < 2000; ++i) dict.set(str_cat("k", i), i);
  MemoryVizDecoder dict_decoder(pickle_dumps(dict));
  EXPECT_EQ(dict_decoder.decode(), dict);
  EXPECT_EQ(dict_decoder.count('u'), 2);
}

// A value with the structure torch.cuda.memory._snapshot() has, as the allocator will build it.
PickleValue snapshot_like() {
  const uint64_t base = 0x7f1234000000;
  PickleValue frames = PickleValue::list(
      {PickleValue::dict({{"filename", "train.py"}, {"line", 42}, {"name", "forward"}}),
       PickleValue::dict({{"filename", "train.py"}, {"line", 7}, {"name", "main \xe2\x9c\x93"}})});
  PickleValue blocks = PickleValue::list({PickleValue::dict({{"address", base},
                                                             {"size", 1 << 20},
                                                             {"requested_size", 1000000},
                                                             {"state", "active_allocated"},
                                                             {"frames", frames}}),
                                          PickleValue::dict({{"address", base + (1 << 20)},
                                                             {"size", 1 << 20},
                                                             {"requested_size", 0},
                                                             {"state", "inactive"},
                                                             {"frames", PickleValue::list()}})});
  PickleValue segment = PickleValue::dict({{"device", 0},
                                           {"address", base},
                                           {"total_size", 2 << 20},
                                           {"allocated_size", 1 << 20},
                                           {"active_size", 1 << 20},
                                           {"requested_size", 1000000},
                                           {"stream", 0},
                                           {"segment_type", "large"},
                                           {"segment_pool_id", PickleValue::tuple({0, 0})},
                                           {"is_expandable", false},
                                           {"frames", PickleValue::list()},
                                           {"blocks", blocks}});
  PickleValue trace = PickleValue::list();
  trace.append(PickleValue::dict({{"action", "segment_alloc"},
                                  {"addr", base},
                                  {"size", 2 << 20},
                                  {"stream", 0},
                                  {"frames", frames},
                                  {"time_us", 1718000000123456}}));
  trace.append(PickleValue::dict({{"action", "alloc"},
                                  {"addr", base},
                                  {"size", 1 << 20},
                                  {"stream", 0},
                                  {"frames", frames},
                                  {"time_us", 1718000000123500}}));
  return PickleValue::dict(
      {{"segments", PickleValue::list({segment})},
       {"device_traces", PickleValue::list({trace, PickleValue::list()})},
       {"allocator_settings", PickleValue::dict({{"garbage_collection_threshold", 0.8},
                                                 {"expandable_segments", false}})}});
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / str_cat("headroom_pickle_test_", ::getpid(), "_",
                                               ::testing::UnitTest::GetInstance()->random_seed(),
                                               "_", counter++);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  static inline int counter = 0;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool python3_on_path() { return std::system("command -v python3 >/dev/null 2>&1") == 0; }

std::string run_and_capture(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return "popen failed";
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) out += str_cat("\n[exit status ", status, "]");
  return out;
}

TEST(PickleDumps, PythonPickleLoadReadsASnapshot) {
  if (!python3_on_path()) {
    GTEST_SKIP() << "python3 is not on PATH; cannot cross-check the pickle with pickle.load";
  }
  TempDir dir;
  const fs::path file = dir.path / "snapshot.pickle";
  const std::string bytes = pickle_dumps(snapshot_like());
  write_file_atomically(file.string(), bytes);
  EXPECT_EQ(MemoryVizDecoder(bytes).decode(), snapshot_like());

  // Prints the structure and the opcodes Python sees, one fact per line.
  const std::string script = R"PY(
import pickle, pickletools, sys
data = open(sys.argv[1], 'rb').read()
s = pickle.loads(data)
print(sorted(s))
seg = s['segments'][0]
print(hex(seg['address']), seg['total_size'], seg['segment_type'], seg['segment_pool_id'],
      seg['is_expandable'])
print([(hex(b['address']), b['size'], b['state']) for b in seg['blocks']])
print(seg['blocks'][0]['frames'][1])
alloc = s['device_traces'][0][1]
print([len(t) for t in s['device_traces']], alloc['action'], alloc['time_us'])
print(s['allocator_settings'])
print(' '.join(sorted({op.name for op, _, _ in pickletools.genops(data)})))
)PY";
  const fs::path script_file = dir.path / "check.py";
  write_file_atomically(script_file.string(), script);
  const std::string out =
      run_and_capture(str_cat("python3 '", script_file.string(), "' '", file.string(), "' 2>&1"));
  EXPECT_EQ(out,
            "['allocator_settings', 'device_traces', 'segments']\n"
            "0x7f1234000000 2097152 large (0, 0) False\n"
            "[('0x7f1234000000', 1048576, 'active_allocated'), "
            "('0x7f1234100000', 1048576, 'inactive')]\n"
            "{'filename': 'train.py', 'line': 7, 'name': 'main \xe2\x9c\x93'}\n"
            "[2, 0] alloc 1718000000123500\n"
            "{'garbage_collection_threshold': 0.8, 'expandable_segments': False}\n"
            "APPEND APPENDS BINFLOAT BINGET BININT BININT1 EMPTY_DICT EMPTY_LIST LONG1 MARK "
            "MEMOIZE NEWFALSE PROTO SETITEMS SHORT_BINUNICODE STOP TUPLE2\n");
}

TEST(WriteFileAtomically, WritesAndOverwritesLeavingNoTemporaries) {
  TempDir dir;
  const fs::path file = dir.path / "out.bin";
  write_file_atomically(file.string(), "first version, longer than the second");
  EXPECT_EQ(read_file(file), "first version, longer than the second");
  const std::string binary("a\0b\xff", 4);
  write_file_atomically(file.string(), binary);
  EXPECT_EQ(read_file(file), binary);
  write_file_atomically(file.string(), "");
  EXPECT_EQ(read_file(file), "");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
}

TEST(WriteFileAtomically, RelativePathWritesIntoTheWorkingDirectory) {
  TempDir dir;
  const fs::path old_cwd = fs::current_path();
  fs::current_path(dir.path);
  write_file_atomically("relative.txt", "here");
  fs::current_path(old_cwd);
  EXPECT_EQ(read_file(dir.path / "relative.txt"), "here");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"relative.txt"});
}

void expect_write_error(const std::string& path, const std::string& reason) {
  try {
    write_file_atomically(path, "data");
    ADD_FAILURE() << "no error writing " << path;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << message;
  }
}

TEST(WriteFileAtomically, ReportsTheUnwritableDirectory) {
  TempDir dir;
  const fs::path locked = dir.path / "locked";
  fs::create_directory(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(locked.c_str(), W_OK) == 0) {
    // Root ignores directory permissions; a missing directory fails for everyone.
    expect_write_error((dir.path / "missing" / "snap.pickle").string(),
                       "No such file or directory");
  } else {
    expect_write_error((locked / "snap.pickle").string(), "Permission denied");
  }
  fs::permissions(locked, fs::perms::owner_all);
  EXPECT_TRUE(fs::is_empty(locked));
  // A parent that is a file.
  write_file_atomically((dir.path / "plain").string(), "x");
  expect_write_error((dir.path / "plain" / "snap.pickle").string(), "Not a directory");
}

TEST(WriteFileAtomically, FailedRenameKeepsTheTargetAndRemovesTheTemporary) {
  TempDir dir;
  // rename() of a file over a non-empty directory fails after the data was written and synced.
  const fs::path target = dir.path / "taken";
  fs::create_directory(target);
  write_file_atomically((target / "inside").string(), "kept");
  expect_write_error(target.string(), "rename failed");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"taken"});
  EXPECT_EQ(read_file(target / "inside"), "kept");
  expect_write_error(dir.path.string() + "/", "names a directory");
}

}  // namespace
}  // namespace headroom
