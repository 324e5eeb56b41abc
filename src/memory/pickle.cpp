// PickleValue accessors and pickle_dumps: the encoder for memory snapshots (memory_viz format).
#include "memory/pickle.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <unordered_map>

#include "core/error.h"

// Note [Pickle subset for MemoryViz]
// pytorch.org/memory_viz does not use Python: MemoryViz.js (torch/utils/viz/MemoryViz.js, read
// at pytorch/pytorch 00067369c933) has its own unpickler. It accepts PROTO 2..4 only (protocol
// 5, Python 3.14's default, fails with "Unhandled version 5": pytorch#183842) and only these
// opcodes: MARK, STOP, EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, TUPLE1/2/3, TUPLE, LIST, DICT,
// SETITEM(S), APPEND(S), BININT, BININT1, BININT2, LONG1, BINFLOAT, SHORT_BINUNICODE,
// BINUNICODE, NONE, NEWTRUE, NEWFALSE, BINPUT, LONG_BINPUT, BINGET, LONG_BINGET, MEMOIZE, FRAME
// (skipped). Anything else throws "UNKNOWN OPCODE". So we write PROTO 4 without FRAME (framing
// is optional in protocol 4; Python reads unframed data), integers with the smallest of
// BININT1 / BININT2 / BININT / LONG1 that holds them, as Python's pickler does, and strings as
// (SHORT_)BINUNICODE.
//
// LONG1 is read into a JS Number through a sign-extended BigInt64 when it has at most 8 bytes:
// exact below 2^53, which device addresses (48-bit virtual) are. A uint64 of 2^63 or more needs a
// 9th byte; newer MemoryViz.js turns that into a BigInt (which then breaks its arithmetic with
// Numbers) and older copies reject it ("Unsupported number bigger than 8 bytes"). Python reads
// every case.
//
// Lists and dicts are filled in batches of at most 1000 (MARK ... APPENDS / SETITEMS), as
// Python's pickler does: MemoryViz.js runs `arr.push(...items)`, and V8 throws "Maximum call
// stack size exceeded" for a spread of about 200k items, a modest trace.
//
// Strings are memoized (MEMOIZE, then BINGET / LONG_BINGET on repeats) the way Python memoizes
// each str object: snapshot keys and stack-frame file names repeat in every entry.

namespace headroom {

const char* pickle_kind_name(PickleValue::Kind kind) {
  switch (kind) {
    case PickleValue::Kind::None:
      return "None";
    case PickleValue::Kind::Bool:
      return "bool";
    case PickleValue::Kind::Int:
      return "int";
    case PickleValue::Kind::UInt:
      return "uint";
    case PickleValue::Kind::Float:
      return "float";
    case PickleValue::Kind::String:
      return "str";
    case PickleValue::Kind::List:
      return "list";
    case PickleValue::Kind::Tuple:
      return "tuple";
    case PickleValue::Kind::Dict:
      return "dict";
  }
  return "?";
}

namespace {

[[noreturn]] void wrong_kind(const char* wanted, PickleValue::Kind kind) {
  throw ValueError(str_cat("PickleValue: expected ", wanted, ", got ", pickle_kind_name(kind)));
}

}  // namespace

PickleValue PickleValue::list(std::initializer_list<PickleValue> items) {
  return list(List(items));
}

PickleValue PickleValue::list(List items) {
  PickleValue v;
  v.value_ = std::move(items);
  return v;
}

PickleValue PickleValue::tuple(std::initializer_list<PickleValue> items) {
  return tuple(List(items));
}

PickleValue PickleValue::tuple(List items) {
  PickleValue v;
  v.value_ = TupleTag{std::move(items)};
  return v;
}

PickleValue PickleValue::dict(std::initializer_list<Item> items) {
  PickleValue v;
  v.value_ = Dict();
  for (const Item& item : items) v.set(item.first, item.second);
  return v;
}

PickleValue PickleValue::dict(Dict items) {
  PickleValue v;
  v.value_ = Dict();
  for (Item& item : items) v.set(item.first, std::move(item.second));
  return v;
}

bool PickleValue::as_bool() const {
  if (const bool* b = std::get_if<bool>(&value_)) return *b;
  wrong_kind("bool", kind());
}

int64_t PickleValue::as_int64() const {
  if (const int64_t* i = std::get_if<int64_t>(&value_)) return *i;
  if (const uint64_t* u = std::get_if<uint64_t>(&value_)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw ValueError(str_cat("PickleValue: ", *u, " does not fit in int64"));
    }
    return static_cast<int64_t>(*u);
  }
  wrong_kind("int", kind());
}

uint64_t PickleValue::as_uint64() const {
  if (const uint64_t* u = std::get_if<uint64_t>(&value_)) return *u;
  if (const int64_t* i = std::get_if<int64_t>(&value_)) {
    if (*i < 0) throw ValueError(str_cat("PickleValue: ", *i, " does not fit in uint64"));
    return static_cast<uint64_t>(*i);
  }
  wrong_kind("int", kind());
}

double PickleValue::as_double() const {
  if (const double* d = std::get_if<double>(&value_)) return *d;
  wrong_kind("float", kind());
}

const std::string& PickleValue::as_string() const {
  if (const std::string* s = std::get_if<std::string>(&value_)) return *s;
  wrong_kind("str", kind());
}

const PickleValue::List& PickleValue::as_list() const {
  if (const List* l = std::get_if<List>(&value_)) return *l;
  if (const TupleTag* t = std::get_if<TupleTag>(&value_)) return t->items;
  wrong_kind("list or tuple", kind());
}

PickleValue::List& PickleValue::as_list() {
  return const_cast<List&>(std::as_const(*this).as_list());
}

const PickleValue::Dict& PickleValue::as_dict() const {
  if (const Dict* d = std::get_if<Dict>(&value_)) return *d;
  wrong_kind("dict", kind());
}

PickleValue::Dict& PickleValue::as_dict() {
  return const_cast<Dict&>(std::as_const(*this).as_dict());
}

PickleValue& PickleValue::append(PickleValue value) {
  List& items = as_list();
  items.push_back(std::move(value));
  return items.back();
}

PickleValue& PickleValue::set(std::string_view key, PickleValue value) {
  Dict& items = as_dict();
  for (Item& item : items) {
    if (item.first == key) {
      item.second = std::move(value);
      return item.second;
    }
  }
  items.emplace_back(std::string(key), std::move(value));
  return items.back().second;
}

const PickleValue* PickleValue::find(std::string_view key) const {
  for (const Item& item : as_dict()) {
    if (item.first == key) return &item.second;
  }
  return nullptr;
}

PickleValue* PickleValue::find(std::string_view key) {
  return const_cast<PickleValue*>(std::as_const(*this).find(key));
}

const PickleValue& PickleValue::at(std::string_view key) const {
  if (const PickleValue* v = find(key)) return *v;
  throw IndexError(str_cat("PickleValue: dict has no key '", key, "'"));
}

PickleValue& PickleValue::at(std::string_view key) {
  return const_cast<PickleValue&>(std::as_const(*this).at(key));
}

const PickleValue& PickleValue::at(size_t index) const {
  const List& items = as_list();
  if (index >= items.size()) {
    throw IndexError(
        str_cat("PickleValue: index ", index, " out of range for ", items.size(), " elements"));
  }
  return items[index];
}

PickleValue& PickleValue::at(size_t index) {
  return const_cast<PickleValue&>(std::as_const(*this).at(index));
}

size_t PickleValue::size() const {
  if (kind() == Kind::Dict) return as_dict().size();
  return as_list().size();
}

bool operator==(const PickleValue& a, const PickleValue& b) {
  if (a.is_integer() && b.is_integer()) {
    const bool a_negative = a.kind() == PickleValue::Kind::Int && a.as_int64() < 0;
    const bool b_negative = b.kind() == PickleValue::Kind::Int && b.as_int64() < 0;
    if (a_negative || b_negative) {
      return a_negative == b_negative && a.as_int64() == b.as_int64();
    }
    return a.as_uint64() == b.as_uint64();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case PickleValue::Kind::None:
      return true;
    case PickleValue::Kind::Bool:
      return a.as_bool() == b.as_bool();
    case PickleValue::Kind::Float:
      return a.as_double() == b.as_double();
    case PickleValue::Kind::String:
      return a.as_string() == b.as_string();
    case PickleValue::Kind::List:
    case PickleValue::Kind::Tuple:
      return a.as_list() == b.as_list();
    case PickleValue::Kind::Dict:
      return a.as_dict() == b.as_dict();
    case PickleValue::Kind::Int:
    case PickleValue::Kind::UInt:
      break;  // handled above
  }
  return false;
}

namespace {

namespace op {
constexpr char kMark = '(';
constexpr char kStop = '.';
constexpr char kNone = 'N';
constexpr char kBinInt = 'J';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kBinFloat = 'G';
constexpr char kBinUnicode = 'X';
constexpr char kEmptyList = ']';
constexpr char kAppend = 'a';
constexpr char kAppends = 'e';
constexpr char kEmptyTuple = ')';
constexpr char kTuple = 't';
constexpr char kEmptyDict = '}';
constexpr char kSetItem = 's';
constexpr char kSetItems = 'u';
constexpr char kBinGet = 'h';
constexpr char kLongBinGet = 'j';
constexpr char kProto = '\x80';
constexpr char kTuple1 = '\x85';
constexpr char kTuple2 = '\x86';
constexpr char kTuple3 = '\x87';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kLong1 = '\x8a';
constexpr char kShortBinUnicode = '\x8c';
constexpr char kMemoize = '\x94';
}  // namespace op

// Python's pickler uses the same batch size (pickle.Pickler._BATCHSIZE).
constexpr size_t kBatchSize = 1000;

// Returns the offset of the first byte that does not start a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF included), or npos.
size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      const auto ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

class Pickler {
 public:
  explicit Pickler(std::string& out) : out_(out) {}

  void dump(const PickleValue& value) {
    out_ += op::kProto;
    out_ += '\x04';
    write(value);
    out_ += op::kStop;
  }

 private:
  void write(const PickleValue& value) {
    switch (value.kind()) {
      case PickleValue::Kind::None:
        out_ += op::kNone;
        break;
      case PickleValue::Kind::Bool:
        out_ += value.as_bool() ? op::kNewTrue : op::kNewFalse;
        break;
      case PickleValue::Kind::Int:
        write_int(value.as_int64());
        break;
      case PickleValue::Kind::UInt:
        write_uint(value.as_uint64());
        break;
      case PickleValue::Kind::Float:
        write_float(value.as_double());
        break;
      case PickleValue::Kind::String:
        write_string(value.as_string());
        break;
      case PickleValue::Kind::List:
        write_list(value.as_list());
        break;
      case PickleValue::Kind::Tuple:
        write_tuple(value.as_list());
        break;
      case PickleValue::Kind::Dict:
        write_dict(value.as_dict());
        break;
    }
  }

  void put_le(uint64_t bits, int nbytes) {
    for (int i = 0; i < nbytes; ++i) out_ += static_cast<char>((bits >> (8 * i)) & 0xFF);
  }

  void write_int(int64_t v) {
    if (v >= 0 && v <= 0xFF) {
      out_ += op::kBinInt1;
      put_le(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v <= 0xFFFF) {
      out_ += op::kBinInt2;
      put_le(static_cast<uint64_t>(v), 2);
    } else if (v >= std::numeric_limits<int32_t>::min() &&
               v <= std::numeric_limits<int32_t>::max()) {
      out_ += op::kBinInt;
      put_le(static_cast<uint64_t>(v), 4);
    } else {
      // LONG1: the shortest little-endian two's complement that sign-extends back to v.
      int nbytes = 5;  // 4 bytes hold every value that got here through BININT's range check
      while (nbytes < 8) {
        const int shift = 8 * nbytes - 1;
        const int64_t lo = -(int64_t{1} << shift);
        if (v >= lo && v < -lo) break;
        ++nbytes;
      }
      out_ += op::kLong1;
      out_ += static_cast<char>(nbytes);
      put_le(static_cast<uint64_t>(v), nbytes);
    }
  }

  void write_uint(uint64_t v) {
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      write_int(static_cast<int64_t>(v));
      return;
    }
    // Bit 63 set: a 9th, zero byte keeps LONG1's two's complement positive.
    out_ += op::kLong1;
    out_ += '\x09';
    put_le(v, 8);
    out_ += '\x00';
  }

  void write_float(double v) {
    // BINFLOAT is the big-endian IEEE 754 double.
    const auto bits = std::bit_cast<uint64_t>(v);
    out_ += op::kBinFloat;
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xFF);
  }

  void write_get(uint64_t index) {
    if (index <= 0xFF) {
      out_ += op::kBinGet;
      put_le(index, 1);
    } else {
      out_ += op::kLongBinGet;
      put_le(index, 4);
    }
  }

  void write_string(const std::string& s) {
    const size_t encoded_size = (s.size() < 256 ? 2 : 5) + s.size();
    if (auto it = memo_.find(s); it != memo_.end()) {
      const size_t get_size = it->second <= 0xFF ? 2 : 5;
      if (get_size <= encoded_size) {
        write_get(it->second);
        return;
      }
    }
    if (const size_t bad = find_invalid_utf8(s); bad != std::string_view::npos) {
      throw ValueError(str_cat("pickle_dumps: string is not valid UTF-8 (byte ", bad, " of ",
                               s.size(), "; it starts '", s.substr(0, 40), "')"));
    }
    if (s.size() > std::numeric_limits<uint32_t>::max()) {
      // BINUNICODE8 would be next, and MemoryViz.js does not read it.
      throw ValueError(str_cat("pickle_dumps: string of ", s.size(), " bytes is over 4 GiB"));
    }
    if (s.size() < 256) {
      out_ += op::kShortBinUnicode;
      put_le(s.size(), 1);
    } else {
      out_ += op::kBinUnicode;
      put_le(s.size(), 4);
    }
    out_ += s;
    // The memo index space of LONG_BINGET is 32-bit; past it, strings are simply written again.
    if (next_memo_ <= std::numeric_limits<uint32_t>::max() && !memo_.contains(s)) {
      out_ += op::kMemoize;
      memo_.emplace(std::string_view(s), next_memo_++);
    }
  }

  void write_list(const PickleValue::List& items) {
    out_ += op::kEmptyList;
    for (size_t begin = 0; begin < items.size(); begin += kBatchSize) {
      const size_t end = std::min(items.size(), begin + kBatchSize);
      if (end - begin == 1) {
        write(items[begin]);
        out_ += op::kAppend;
        continue;
      }
      out_ += op::kMark;
      for (size_t i = begin; i < end; ++i) write(items[i]);
      out_ += op::kAppends;
    }
  }

  void write_tuple(const PickleValue::List& items) {
    static constexpr char kSmallTuple[] = {op::kEmptyTuple, op::kTuple1, op::kTuple2, op::kTuple3};
    if (items.size() <= 3) {
      for (const PickleValue& item : items) write(item);
      out_ += kSmallTuple[items.size()];
      return;
    }
    out_ += op::kMark;
    for (const PickleValue& item : items) write(item);
    out_ += op::kTuple;
  }

  void write_dict(const PickleValue::Dict& items) {
    out_ += op::kEmptyDict;
    for (size_t begin = 0; begin < items.size(); begin += kBatchSize) {
      const size_t end = std::min(items.size(), begin + kBatchSize);
      if (end - begin == 1) {
        write_string(items[begin].first);
        write(items[begin].second);
        out_ += op::kSetItem;
        continue;
      }
      out_ += op::kMark;
      for (size_t i = begin; i < end; ++i) {
        write_string(items[i].first);
        write(items[i].second);
      }
      out_ += op::kSetItems;
    }
  }

  std::string& out_;
  // Keys view strings of the value being dumped, which outlives the Pickler.
  std::unordered_map<std::string_view, uint64_t> memo_;
  uint64_t next_memo_ = 0;
};

}  // namespace

std::string pickle_dumps(const PickleValue& value) {
  std::string out;
  Pickler(out).dump(value);
  return out;
}

}  // namespace headroom
