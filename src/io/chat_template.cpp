// A Jinja2 engine for chat templates: lexer, parser and renderer of the subset real templates
// use, with jinja2's semantics in transformers' sandbox (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loop controls, the AssistantTracker's {% generation %}), Python's
// str / list / dict methods and formats, and the limits of Note [Chat template limits].
#include "io/chat_template.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include "core/json_file.h"
#include "io/unicode_classes.h"

namespace headroom {

ChatTemplateError::ChatTemplateError(std::string origin, int line, int column,
                                     const std::string& what)
    : ValueError(str_cat(origin, ":", line, ":", column, ": ", what)),
      origin_(std::move(origin)),
      line_(line) {}

ChatTemplateRaised::ChatTemplateRaised(std::string origin, int line, std::string message)
    : ChatTemplateError(std::move(origin), line, 0, str_cat("raise_exception: ", message)),
      message_(std::move(message)) {}

namespace {

// ---------------------------------------------------------------------------------------------
// UTF-8 and Python's notion of characters: strings are indexed, sliced and measured in code
// points, as Python's str is.

// Decodes the code point at text[pos] and advances pos; an invalid byte is one code point of its
// own (U+FFFD), so that any bytes can be walked.
char32_t next_code_point(std::string_view text, size_t& pos) {
  const Utf8Char c = decode_utf8(text, pos);
  pos += c.length;
  return c.code_point == kInvalidCodePoint ? char32_t{0xFFFD} : c.code_point;
}

bool is_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    if (c.code_point == kInvalidCodePoint) return false;
    pos += c.length;
  }
  return true;
}

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; });
}

// Python's str.isspace (what str.strip() and str.split() drop).
bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Case mapping of ASCII and Latin-1, Greek and Cyrillic letters (the alphabets whose mapping is a
// fixed offset); other code points are left as they are.
char32_t py_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}
char32_t py_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}
bool py_is_cased_upper(char32_t c) { return py_lower(c) != c; }
bool py_is_cased_lower(char32_t c) { return py_upper(c) != c; }
// Python's str.isalpha: general categories L*.
bool py_isalpha(char32_t c) { return char_class(c) == CharClass::letter; }
bool py_isdigit(char32_t c) { return c >= '0' && c <= '9'; }

// Python's str.islower / str.isupper: at least one cased character, and none of the other case.
bool only_cased(std::string_view text, bool upper) {
  bool cased = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t c = next_code_point(text, pos);
    if (upper ? py_is_cased_lower(c) : py_is_cased_upper(c)) return false;
    cased = cased || (upper ? py_is_cased_upper(c) : py_is_cased_lower(c));
  }
  return cased;
}

std::vector<char32_t> code_points(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) out.push_back(next_code_point(text, pos));
  return out;
}

std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
  return out;
}

size_t code_point_count(std::string_view text) {
  if (is_ascii(text)) return text.size();
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Values: Python's objects as templates see them.

struct ListObj;
struct DictObj;
struct NamespaceObj;
struct FunctionObj;
struct LoopObj;

// jinja2's Undefined: `why` is the message an error shows when it is used.
struct Undef {
  std::shared_ptr<const std::string> why;
  bool unsafe = false;  // the sandbox refused the attribute (SecurityError when called)
};
struct NoneV {};
using StrP = std::shared_ptr<const std::string>;

struct Value {
  std::variant<Undef, NoneV, bool, int64_t, double, StrP, std::shared_ptr<ListObj>,
               std::shared_ptr<DictObj>, std::shared_ptr<NamespaceObj>,
               std::shared_ptr<FunctionObj>, std::shared_ptr<LoopObj>>
      v;

  Value() = default;
  // Implicit on purpose, values are made everywhere; a pointer (a C string) would become a bool.
  template <typename T>
  requires(!std::is_pointer_v<std::decay_t<T>>) Value(T x) : v(std::move(x)) {}  // NOLINT

  bool undefined() const { return v.index() == 0; }
  bool none() const { return v.index() == 1; }
  bool is_bool() const { return v.index() == 2; }
  bool is_int() const { return v.index() == 3; }
  bool is_float() const { return v.index() == 4; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_str() const { return v.index() == 5; }
  bool is_list() const { return v.index() == 6; }
  bool is_dict() const { return v.index() == 7; }
  bool is_ns() const { return v.index() == 8; }
  bool is_fn() const { return v.index() == 9; }
  bool is_loop() const { return v.index() == 10; }
  const std::string& str() const { return *std::get<StrP>(v); }
  ListObj& list() const { return *std::get<std::shared_ptr<ListObj>>(v); }
  DictObj& dict() const { return *std::get<std::shared_ptr<DictObj>>(v); }
  NamespaceObj& ns() const { return *std::get<std::shared_ptr<NamespaceObj>>(v); }
  FunctionObj& fn() const { return *std::get<std::shared_ptr<FunctionObj>>(v); }
  LoopObj& loop() const { return *std::get<std::shared_ptr<LoopObj>>(v); }
  int64_t as_int() const { return is_bool() ? std::get<bool>(v) : std::get<int64_t>(v); }
  double as_double() const { return is_float() ? std::get<double>(v) : double(as_int()); }
};

Value make_str(std::string s) {
  return Value(StrP(std::make_shared<const std::string>(std::move(s))));
}
Value make_undefined(std::string why, bool unsafe = false) {
  return Value(Undef{std::make_shared<const std::string>(std::move(why)), unsafe});
}

struct ListObj {
  std::vector<Value> items;
  bool tuple = false;
  int depth = 1;
};
struct DictObj {
  std::vector<std::pair<Value, Value>> items;         // insertion order, as Python's dict
  std::unordered_map<std::string, size_t> by_string;  // string keys' positions in items
  int depth = 1;
  const Value* find(const Value& key) const;
  // Adds or, for a key it has, replaces (keeping the first position, as Python's dict).
  void insert(Value key, Value value);
};
struct NamespaceObj {
  std::vector<std::pair<std::string, Value>> attrs;
  int depth = 1;
  Value* find(const std::string& name) {
    for (auto& [k, v] : attrs)
      if (k == name) return &v;
    return nullptr;
  }
};
struct Renderer;
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};
struct FunctionObj {
  std::string name;
  std::function<Value(Renderer&, CallArgs&, int line)> call;
  bool is_macro = false;
};
struct LoopObj {
  std::shared_ptr<const std::vector<Value>> items;
  size_t index0 = 0;
};

int value_depth(const Value& v) {
  if (v.is_list()) return v.list().depth;
  if (v.is_dict()) return v.dict().depth;
  if (v.is_ns()) return v.ns().depth;
  return 0;
}

const char* type_name(const Value& v) {
  switch (v.v.index()) {
    case 0:
      return "Undefined";
    case 1:
      return "NoneType";
    case 2:
      return "bool";
    case 3:
      return "int";
    case 4:
      return "float";
    case 5:
      return "str";
    case 6:
      return v.list().tuple ? "tuple" : "list";
    case 7:
      return "dict";
    case 8:
      return "Namespace";
    case 9:
      return v.fn().is_macro ? "Macro" : "function";
    default:
      return "LoopContext";
  }
}

bool truthy(const Value& v) {
  switch (v.v.index()) {
    case 0:
    case 1:
      return false;
    case 2:
      return std::get<bool>(v.v);
    case 3:
      return std::get<int64_t>(v.v) != 0;
    case 4:
      return std::get<double>(v.v) != 0.0;
    case 5:
      return !v.str().empty();
    case 6:
      return !v.list().items.empty();
    case 7:
      return !v.dict().items.empty();
    default:
      return true;
  }
}

// Python's ==: numbers by value across int / float / bool, containers deeply (a list never
// equals a tuple), dicts regardless of order; jinja2's Undefined equals only Undefined.
bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.v.index() != b.v.index()) return false;
  switch (a.v.index()) {
    case 0:
    case 1:
      return true;
    case 5:
      return a.str() == b.str();
    case 6: {
      const ListObj& x = a.list();
      const ListObj& y = b.list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!py_equal(x.items[i], y.items[i])) return false;
      return true;
    }
    case 7: {
      const DictObj& x = a.dict();
      const DictObj& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr || !py_equal(v, *other)) return false;
      }
      return true;
    }
    case 8:
      return &a.ns() == &b.ns();
    case 9:
      return &a.fn() == &b.fn();
    default:
      return &a.loop() == &b.loop();
  }
}

const Value* DictObj::find(const Value& key) const {
  if (key.is_str()) {
    auto it = by_string.find(key.str());
    return it == by_string.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

void DictObj::insert(Value key, Value value) {
  depth = std::max(depth, std::max(value_depth(key), value_depth(value)) + 1);
  if (key.is_str()) {
    auto [it, added] = by_string.emplace(key.str(), items.size());
    if (!added) {
      items[it->second].second = std::move(value);
      return;
    }
  } else {
    for (auto& existing : items)
      if (py_equal(existing.first, key)) {
        existing.second = std::move(value);
        return;
      }
  }
  items.emplace_back(std::move(key), std::move(value));
}

// ---------------------------------------------------------------------------------------------
// Python's text forms of values: str(), repr() and float's shortest repr.

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci is "[-]D[.DDD]e[+-]XX": split into sign, digits and the exponent of the first digit.
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  const int exp10 = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  // Python's repr: scientific when the exponent is below -4 or at least 16.
  if (exp10 < -4 || exp10 >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int ax = std::abs(exp10);
    out += exp10 < 0 ? "e-" : "e+";
    if (ax < 10) out += "0";
    return out + std::to_string(ax);
  }
  std::string out;
  if (exp10 < 0) {
    out = "0." + std::string(size_t(-exp10 - 1), '0') + digits;
  } else if (size_t(exp10) + 1 >= digits.size()) {
    out = digits + std::string(size_t(exp10) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, size_t(exp10) + 1) + "." + digits.substr(size_t(exp10) + 1);
  }
  return sign + out;
}

// Code points Python's str.isprintable() refuses among those text realistically holds
// (controls, separators other than the space, format characters, private use).
bool py_unprintable(char32_t c) {
  return c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
         (c >= 0x205F && c <= 0x2064) || c == 0x3000 || c == 0xFEFF ||
         (c >= 0xE000 && c <= 0xF8FF) || c == 0xFFFE || c == 0xFFFF;
}

std::string str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t c = next_code_point(s, pos);
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (py_unprintable(c)) {
      if (c < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", unsigned(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", unsigned(c));
      }
      out += buf;
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += quote;
  return out;
}

void repr_into(const Value& v, std::string& out);

void str_into(const Value& v, std::string& out) {
  switch (v.v.index()) {
    case 0:
      return;
    case 1:
      out += "None";
      return;
    case 2:
      out += std::get<bool>(v.v) ? "True" : "False";
      return;
    case 3:
      out += std::to_string(std::get<int64_t>(v.v));
      return;
    case 4:
      out += float_repr(std::get<double>(v.v));
      return;
    case 5:
      out += v.str();
      return;
    default:
      repr_into(v, out);
  }
}

std::string to_str(const Value& v) {
  if (v.is_str()) return v.str();
  std::string out;
  str_into(v, out);
  return out;
}

void repr_into(const Value& v, std::string& out) {
  switch (v.v.index()) {
    case 0:
      out += "Undefined";
      return;
    case 5:
      out += str_repr(v.str());
      return;
    case 6: {
      const ListObj& l = v.list();
      out += l.tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        repr_into(l.items[i], out);
      }
      if (l.tuple && l.items.size() == 1) out += ',';
      out += l.tuple ? ')' : ']';
      return;
    }
    case 7: {
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        repr_into(k, out);
        out += ": ";
        repr_into(x, out);
      }
      out += '}';
      return;
    }
    case 8: {
      out += "<Namespace {";
      bool first = true;
      for (const auto& [k, x] : v.ns().attrs) {
        if (!first) out += ", ";
        first = false;
        out += str_repr(k) + ": ";
        repr_into(x, out);
      }
      out += "}>";
      return;
    }
    case 9:
      out += str_cat("<", v.fn().is_macro ? "Macro " : "function ", str_repr(v.fn().name), ">");
      return;
    case 10:
      out += str_cat("<LoopContext ", v.loop().index0 + 1, "/", v.loop().items->size(), ">");
      return;
    default:
      str_into(v, out);
  }
}

// json.dumps(value, ensure_ascii=False, indent, separators, sort_keys), as transformers' tojson
// filter calls it.
struct JsonStyle {
  std::optional<std::string> indent;  // None: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

void json_string_into(std::string_view s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", unsigned(c));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// A failure while rendering, turned into ChatTemplateError with the line being rendered.
struct Fault {
  std::string what;
};
// raise_exception(message).
struct Raised {
  std::string message;
};

[[noreturn]] void fault(const std::string& what) { throw Fault{what}; }

[[noreturn]] void undefined_error(const Value& v) {
  const Undef& u = std::get<Undef>(v.v);
  fault(u.why ? *u.why : std::string("value is undefined"));
}

void json_dump_into(const Value& v, const JsonStyle& style, int level, std::string& out) {
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *style.indent;
  };
  switch (v.v.index()) {
    case 1:
      out += "null";
      return;
    case 2:
      out += std::get<bool>(v.v) ? "true" : "false";
      return;
    case 3:
      out += std::to_string(std::get<int64_t>(v.v));
      return;
    case 4: {
      const double d = std::get<double>(v.v);
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d < 0 ? "-Infinity" : "Infinity";
      } else {
        out += float_repr(d);
      }
      return;
    }
    case 5:
      json_string_into(v.str(), out);
      return;
    case 6: {
      const auto& items = v.list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += style.item_separator;
        if (style.indent) newline(level + 1);
        json_dump_into(items[i], style, level + 1, out);
      }
      if (style.indent) newline(level);
      out += ']';
      return;
    }
    case 7: {
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (style.sort_keys) {
        for (const auto* kv : items)
          if (!kv->first.is_str()) fault("tojson: sort_keys needs string keys");
        std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
          return a->first.str() < b->first.str();
        });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += style.item_separator;
        if (style.indent) newline(level + 1);
        const Value& key = items[i]->first;
        if (key.is_str()) {
          json_string_into(key.str(), out);
        } else if (key.is_number() || key.none()) {
          std::string text;
          json_dump_into(key, style, level, text);
          json_string_into(text, out);
        } else {
          fault(
              str_cat("tojson: keys must be str, int, float, bool or None, not ", type_name(key)));
        }
        out += style.key_separator;
        json_dump_into(items[i]->second, style, level + 1, out);
      }
      if (style.indent) newline(level);
      out += '}';
      return;
    }
    default:
      fault(str_cat("tojson: Object of type ", type_name(v), " is not JSON serializable"));
  }
}

// JSON from the caller (messages, tools, kwargs) as Python's json.loads makes it.
Value from_json(const nlohmann::ordered_json& j, int depth, int max_depth) {
  if (depth > max_depth)
    throw ValueError(str_cat("chat template input nests deeper than ", max_depth, " levels"));
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(NoneV{});
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<int64_t>::max()))
        throw ValueError(str_cat("chat template input: the integer ", u, " is over the limit ",
                                 std::numeric_limits<int64_t>::max()));
      return Value(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return make_str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      auto l = std::make_shared<ListObj>();
      for (const auto& x : j) {
        l->items.push_back(from_json(x, depth + 1, max_depth));
        l->depth = std::max(l->depth, value_depth(l->items.back()) + 1);
      }
      return Value(l);
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<DictObj>();
      for (const auto& [k, x] : j.items())
        d->insert(make_str(k), from_json(x, depth + 1, max_depth));
      return Value(d);
    }
    default:
      throw ValueError("chat template input: binary JSON values are not supported");
  }
}

// ---------------------------------------------------------------------------------------------
// Lexer: jinja2's, with trim_blocks and lstrip_blocks, on a source whose line ends are "\n"
// and whose one final newline is dropped (keep_trailing_newline=False).

enum class Tok { Data, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, End };

struct Token {
  Tok type;
  std::string text;  // data, name, the string's value, the operator, the number's digits
  int line;
  int column;
};

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& origin) : src_(source), origin_(origin) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      // Root state: text up to the next tag.
      size_t tag = pos_;
      while (true) {
        tag = src_.find('{', tag);
        if (tag == std::string::npos || tag + 1 >= src_.size()) {
          tag = std::string::npos;
          break;
        }
        const char c = src_[tag + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++tag;
      }
      if (tag == std::string::npos) {
        emit(Tok::Data, src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      std::string text = src_.substr(pos_, tag - pos_);
      const char kind = src_[tag + 1];
      char sign = 0;
      if (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+'))
        sign = src_[tag + 2];
      const bool raw = kind == '%' && is_raw_begin(tag);
      if (sign == '-') {
        text = rstrip_py(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: spaces and tabs alone between the line's start and a block or comment.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) &&
            text.find_first_not_of(" \t", l_pos) == std::string::npos)
          text.resize(l_pos);
      }
      if (!text.empty()) emit(Tok::Data, text, pos_);
      const size_t start = tag;
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (raw) {
        line_starting = lex_raw(start);
      } else if (kind == '#') {
        line_starting = lex_comment(start);
      } else {
        line_starting = lex_tag(kind == '%', start);
      }
    }
    emit(Tok::End, "", src_.size());
    return std::move(tokens_);
  }

 private:
  const std::string& src_;
  const std::string& origin_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  // Where the incremental scan of line ends stands (tokens come in order, so positions are
  // found in one pass).
  size_t scan_pos_ = 0;
  int scan_line_ = 1;
  size_t scan_line_start_ = 0;

  // The 1-based line and column (in bytes) of `at`.
  std::pair<int, int> position(size_t at) {
    if (at < scan_pos_) {
      scan_pos_ = 0;
      scan_line_ = 1;
      scan_line_start_ = 0;
    }
    for (; scan_pos_ < at && scan_pos_ < src_.size(); ++scan_pos_) {
      if (src_[scan_pos_] == '\n') {
        ++scan_line_;
        scan_line_start_ = scan_pos_ + 1;
      }
    }
    return {scan_line_, int(at - scan_line_start_) + 1};
  }
  [[noreturn]] void fail(size_t at, const std::string& what) {
    const auto [line, column] = position(at);
    throw ChatTemplateError(origin_, line, column, what);
  }
  void emit(Tok type, std::string text, size_t at) {
    const auto [line, column] = position(at);
    tokens_.push_back({type, std::move(text), line, column});
  }

  static std::string rstrip_py(const std::string& text) {
    // Python's str.rstrip(): Unicode whitespace.
    size_t end = text.size();
    while (end > 0) {
      size_t start = end - 1;
      while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t p = start;
      if (!py_isspace(next_code_point(text, p))) break;
      end = start;
    }
    return text.substr(0, end);
  }
  // Python's \s*: skips whitespace from `at`.
  size_t skip_space(size_t at) const {
    while (at < src_.size()) {
      size_t p = at;
      if (!py_isspace(next_code_point(src_, p))) break;
      at = p;
    }
    return at;
  }
  // `{%[-+]? raw [-]?%}` at `at`.
  bool is_raw_begin(size_t at) const {
    size_t p = at + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_space(p);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_space(p + 3);
    if (p < src_.size() && src_[p] == '-') ++p;
    return src_.compare(p, 2, "%}") == 0;
  }
  // After a closing tag at `at` of `len` bytes with its sign: `-` eats all whitespace after it,
  // trim_blocks one newline (blocks and comments only). Returns whether it ended on a newline.
  bool close_tag(size_t at, size_t len, bool minus, bool trim) {
    pos_ = at + len;
    if (minus) {
      pos_ = skip_space(pos_);
    } else if (trim && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    return pos_ > 0 && src_[pos_ - 1] == '\n';
  }
  bool lex_comment(size_t start) {
    for (size_t p = pos_; p + 1 < src_.size(); ++p) {
      if (src_[p] == '#' && src_[p + 1] == '}') {
        const bool minus = p > pos_ && src_[p - 1] == '-';
        const bool plus = p > pos_ && src_[p - 1] == '+';
        return close_tag(p, 2, minus, !plus);
      }
    }
    fail(start, "missing end of comment tag '#}'");
  }
  bool lex_raw(size_t start) {
    // Skip `{% raw %}` (no trim_blocks after it, as jinja2).
    size_t p = src_.find("%}", pos_);
    const bool minus = src_[p - 1] == '-';
    pos_ = p + 2;
    if (minus) pos_ = skip_space(pos_);
    // The body runs to `{%[-+]? endraw [-+]?%}`.
    for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      char sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
      r = skip_space(r);
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r = skip_space(r + 6);
      char end_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_sign = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) continue;
      std::string body = src_.substr(pos_, q - pos_);
      if (sign == '-') {
        body = rstrip_py(body);
      } else if (sign != '+') {
        const size_t nl = body.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 && body.find_first_not_of(" \t", l_pos) == std::string::npos)
          body.resize(l_pos);
      }
      if (!body.empty()) emit(Tok::Data, body, pos_);
      return close_tag(r, 2, end_sign == '-', end_sign != '+');
    }
    fail(start, "missing end of raw directive '{% endraw %}'");
  }

  // Inside {{ }} or {% %}: tokens up to the end delimiter, which counts only where brackets
  // balance (so `{{ {'a': {'b': 1}} }}` closes at the last `}}`).
  bool lex_tag(bool block, size_t start) {
    emit(block ? Tok::BlockBegin : Tok::VarBegin, "", start);
    std::vector<char> balance;
    const char closer = block ? '%' : '}';
    while (true) {
      if (pos_ >= src_.size())
        fail(start, block ? "unexpected end of template, expected '%}'"
                          : "unexpected end of template, expected '}}'");
      if (balance.empty()) {
        // The end: `%}` / `}}`, `-%}` (eats the whitespace after), `+%}` (no trim_blocks).
        size_t p = pos_;
        bool minus = false, plus = false;
        if (src_[p] == '-') {
          minus = true;
          ++p;
        } else if (block && src_[p] == '+') {
          plus = true;
          ++p;
        }
        if (src_.compare(p, 2, std::string{closer, '}'}) == 0) {
          emit(block ? Tok::BlockEnd : Tok::VarEnd, "", pos_);
          return close_tag(p, 2, minus, block && !plus);
        }
      }
      const char c = src_[pos_];
      size_t p = pos_;
      if (py_isspace(next_code_point(src_, p))) {
        pos_ = p;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
          ++e;
        emit(Tok::Name, src_.substr(pos_, e - pos_), pos_);
        pos_ = e;
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                           "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                           ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
        const char* op = nullptr;
        for (const char* candidate : kOps)
          if (src_.compare(pos_, std::strlen(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        if (op == nullptr)
          fail(pos_, str_cat("unexpected character ", str_repr(src_.substr(pos_, p - pos_))));
        const char o = op[0];
        if (std::strlen(op) == 1 && (o == '(' || o == '[' || o == '{')) {
          balance.push_back(o == '(' ? ')' : o == '[' ? ']' : '}');
        } else if (std::strlen(op) == 1 && (o == ')' || o == ']' || o == '}')) {
          if (balance.empty()) fail(pos_, str_cat("unexpected '", o, "'"));
          if (balance.back() != o)
            fail(pos_, str_cat("unexpected '", o, "', expected '", balance.back(), "'"));
          balance.pop_back();
        }
        emit(Tok::Op, op, pos_);
        pos_ += std::strlen(op);
      }
    }
  }

  void lex_number() {
    // jinja2: integers (with _ separators, 0b / 0o / 0x) and floats (digits.digits, exponent).
    size_t p = pos_;
    auto digits = [&](size_t q, auto ok) {
      while (q < src_.size() &&
             (ok(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && ok(src_[q + 1]))))
        ++q;
      return q;
    };
    auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    if (src_[p] == '0' && p + 1 < src_.size() && std::strchr("bBoOxX", src_[p + 1]) &&
        src_[p + 1] != 0) {
      const char base = char(std::tolower(static_cast<unsigned char>(src_[p + 1])));
      auto ok = [base](char ch) {
        if (base == 'b') return ch == '0' || ch == '1';
        if (base == 'o') return ch >= '0' && ch <= '7';
        return std::isxdigit(static_cast<unsigned char>(ch)) != 0;
      };
      size_t q = p + 2;
      if (q < src_.size() && src_[q] == '_') ++q;
      const size_t e = digits(q, ok);
      if (e == q) fail(pos_, "invalid integer literal");
      std::string text;
      for (size_t i = q; i < e; ++i)
        if (src_[i] != '_') text += src_[i];
      int64_t value = 0;
      const int radix = base == 'b' ? 2 : base == 'o' ? 8 : 16;
      auto res = std::from_chars(text.data(), text.data() + text.size(), value, radix);
      if (res.ec != std::errc()) fail(pos_, "integer literal out of range");
      emit(Tok::Int, std::to_string(value), pos_);
      pos_ = e;
      return;
    }
    size_t e = digits(p, dec);
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && dec(src_[e + 1])) {
      e = digits(e + 1, dec);
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && dec(src_[q])) {
        e = digits(q, dec);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    emit(is_float ? Tok::Float : Tok::Int, text, pos_);
    pos_ = e;
  }

  // A quoted string with Python's escapes (jinja2 decodes it as "unicode-escape").
  void lex_string() {
    const char quote = src_[pos_];
    const size_t start = pos_;
    std::string value;
    size_t p = pos_ + 1;
    while (true) {
      if (p >= src_.size()) fail(start, "unterminated string");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail(start, "unterminated string");
      const char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) {
        if (p + n > src_.size()) fail(start, "truncated \\x, \\u or \\U escape in a string");
        uint32_t cp = 0;
        for (int i = 0; i < n; ++i) {
          const char h = src_[p + i];
          if (!std::isxdigit(static_cast<unsigned char>(h)))
            fail(start, "truncated \\x, \\u or \\U escape in a string");
          cp = cp * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h))
                                      ? h - '0'
                                      : std::tolower(h) - 'a' + 10);
        }
        p += n;
        if (cp > 0x10FFFF) fail(start, "illegal Unicode character in a \\U escape");
        append_utf8(value, cp);
      };
      switch (e) {
        case '\n':
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        case 'N':
          fail(start, "\\N{name} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = uint32_t(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i)
              cp = cp * 8 + uint32_t(src_[p++] - '0');
            append_utf8(value, cp);
          } else {
            // Python keeps an unknown escape as it is.
            value += '\\';
            --p;
          }
      }
    }
    emit(Tok::String, value, start);
    pos_ = p + 1;
  }
};

// ---------------------------------------------------------------------------------------------
// The syntax tree.

enum class Ex {
  Const,
  Name,
  List,
  Tuple,
  Dict,
  Getattr,
  Getitem,
  Slice,
  Call,
  Filter,
  Test,
  Not,
  Neg,
  Pos,
  Binary,
  Concat,
  Compare,
  And,
  Or,
  Cond
};

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
  Ex kind;
  int line;
  Value value;              // Const
  std::string name;         // Name; Getattr's attribute; Filter / Test name; Binary's operator
  ExprP a, b, c;            // operands (Cond: a if b else c; Slice: start, stop, step)
  std::vector<ExprP> args;  // items, positional arguments, Concat's parts, Compare's operands
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops;  // Compare's operators
  bool negated = false;          // `is not`
  int depth = 1;                 // of the tree below: chains (a + b + c ...) nest without recursion
};

// An assignment target: a name, names to unpack, or a namespace's attribute.
struct Target {
  std::vector<std::string> names;
  bool tuple = false;
  std::string attr;  // `set ns.attr = ...`: names[0] is the namespace
};

enum class St {
  Output,
  Print,
  If,
  For,
  Set,
  SetBlock,
  Macro,
  Break,
  Continue,
  Generation,
  FilterBlock,
  With
};

struct Stmt;
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

struct Stmt {
  St kind;
  int line;
  std::string text;  // Output
  ExprP expr;        // Print, Set, For's iterable, SetBlock / FilterBlock filter
  std::vector<std::pair<ExprP, Body>> branches;  // If (a null condition is `else`)
  Target target;                                 // For, Set, SetBlock
  ExprP cond;                                    // For's `if`
  Body body, else_body;
  std::string name;                               // Macro
  std::vector<std::string> params;                // Macro
  std::vector<ExprP> defaults;                    // Macro, aligned with params (null: none)
  std::vector<std::pair<Target, ExprP>> assigns;  // With
};

bool known_filter(const std::string& name);
bool known_test(const std::string& name);

// ---------------------------------------------------------------------------------------------
// Parser: jinja2's grammar (parser.py), the statements of the sandbox plus loop controls and
// {% generation %}.

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin, const ChatTemplateLimits& limits)
      : toks_(std::move(tokens)), origin_(origin), limits_(limits) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != Tok::End) fail_here("unexpected tag");
    return body;
  }

 private:
  std::vector<Token> toks_;
  size_t i_ = 0;
  const std::string& origin_;
  const ChatTemplateLimits& limits_;
  int depth_ = 0;
  int loops_ = 0;  // for-loops around the statement being parsed (break / continue need one)

  // Nesting guard for the recursive descent.
  struct Deeper {
    Parser& p;
    explicit Deeper(Parser& parser) : p(parser) {
      if (++p.depth_ > p.limits_.max_nesting)
        p.fail_here(str_cat("nesting deeper than the limit of ", p.limits_.max_nesting, " levels"));
    }
    ~Deeper() { --p.depth_; }
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  Token next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Data:
        return "template data";
      case Tok::BlockBegin:
        return "'{%'";
      case Tok::BlockEnd:
        return "'%}'";
      case Tok::VarBegin:
        return "'{{'";
      case Tok::VarEnd:
        return "'}}'";
      case Tok::Name:
        return "'" + t.text + "'";
      case Tok::String:
        return "a string";
      case Tok::Int:
      case Tok::Float:
        return "a number";
      case Tok::Op:
        return "'" + t.text + "'";
      default:
        return "the end of the template";
    }
  }
  [[noreturn]] void fail_at(const Token& t, const std::string& what) {
    throw ChatTemplateError(origin_, t.line, t.column, what);
  }
  [[noreturn]] void fail_here(const std::string& what) { fail_at(cur(), what); }
  [[noreturn]] void expected(const std::string& what) {
    fail_here(str_cat("expected ", what, ", got ", describe(cur())));
  }

  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) expected(str_cat("'", op, "'"));
  }
  std::string expect_name(const char* what) {
    if (cur().type != Tok::Name) expected(what);
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) expected("'%}'");
    next();
  }

  ExprP node(Ex kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Records the depth of a node whose operands are set; chains of operators, filters and
  // attributes build trees the parser does not recurse for, and the renderer does.
  ExprP finish(ExprP e) {
    int d = 0;
    for (const ExprP* x : {&e->a, &e->b, &e->c})
      if (*x) d = std::max(d, (*x)->depth);
    for (const ExprP& x : e->args) d = std::max(d, x->depth);
    for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > 2 * limits_.max_nesting)
      fail_here(str_cat("an expression nests deeper than the limit of ", 2 * limits_.max_nesting,
                        " levels"));
    return e;
  }

  // Statements up to `{% <one of ends> %}` (left unconsumed: the caller reads it).
  Body parse_body(std::initializer_list<const char*> ends) {
    Deeper guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::End) {
        if (ends.size() == 0) return body;
        std::string names;
        for (const char* e : ends) names += str_cat(names.empty() ? "" : " or ", "'", e, "'");
        fail_here(str_cat("unexpected end of template, expected ", names));
      }
      if (t.type == Tok::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = St::Output;
        s->line = t.line;
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.type == Tok::VarBegin) {
        const int line = next().line;
        auto s = std::make_unique<Stmt>();
        s->kind = St::Print;
        s->line = line;
        s->expr = parse_tuple();
        if (cur().type != Tok::VarEnd) expected("'}}'");
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        const Token& kw = peek();
        if (kw.type == Tok::Name)
          for (const char* e : ends)
            if (kw.text == e) return body;
        next();
        body.push_back(parse_statement());
      } else {
        fail_here(str_cat("unexpected ", describe(t)));
      }
    }
  }

  // After a tag's own tokens: its `%}`, the body and the closing `{% <end> %}`.
  Body parse_block_body(const char* end) {
    expect_block_end();
    Body body = parse_body({end});
    next();
    next();
    expect_block_end();
    return body;
  }

  StmtP parse_statement() {
    const Token t = cur();
    if (t.type != Tok::Name) expected("a statement name");
    const std::string& k = t.text;
    auto s = std::make_unique<Stmt>();
    s->line = t.line;
    next();
    if (k == "if") {
      s->kind = St::If;
      while (true) {
        ExprP c = parse_tuple();
        expect_block_end();
        Body b = parse_body({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(c), std::move(b));
        next();  // {%
        const std::string which = next().text;
        if (which == "elif") continue;
        if (which == "else") {
          expect_block_end();
          Body e = parse_body({"endif"});
          s->branches.emplace_back(nullptr, std::move(e));
          next();
          next();
        }
        break;
      }
      expect_block_end();
    } else if (k == "for") {
      s->kind = St::For;
      s->target = parse_target(true);
      if (!skip_name("in")) expected("'in'");
      s->expr = parse_tuple(/*no_condexpr=*/true);
      if (skip_name("if")) s->cond = parse_expression();
      if (is_name("recursive")) fail_here("recursive loops are not supported");
      expect_block_end();
      ++loops_;
      s->body = parse_body({"endfor", "else"});
      --loops_;
      next();
      if (next().text == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"});
        next();
        next();
      }
      expect_block_end();
    } else if (k == "set") {
      s->target = parse_target(false);
      if (skip_op("=")) {
        s->kind = St::Set;
        s->expr = parse_tuple();
        expect_block_end();
      } else {
        s->kind = St::SetBlock;
        if (s->target.tuple || !s->target.attr.empty()) fail_here("a block set assigns one name");
        if (is_op("|")) s->expr = parse_filters(nullptr);
        s->body = parse_block_body("endset");
      }
    } else if (k == "macro") {
      s->kind = St::Macro;
      s->name = expect_name("a macro name");
      expect_op("(");
      while (!is_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (is_op(")")) break;
        s->params.push_back(expect_name("a parameter name"));
        s->defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
      }
      next();
      expect_block_end();
      const int saved_loops = loops_;
      loops_ = 0;
      s->body = parse_body({"endmacro"});
      loops_ = saved_loops;
      next();
      next();
      if (cur().type == Tok::Name) next();  // {% endmacro name %}
      expect_block_end();
    } else if (k == "break" || k == "continue") {
      if (loops_ == 0) fail_at(t, str_cat("'", k, "' outside of a loop"));
      s->kind = k == "break" ? St::Break : St::Continue;
      expect_block_end();
    } else if (k == "generation") {
      s->kind = St::Generation;
      s->body = parse_block_body("endgeneration");
    } else if (k == "filter") {
      s->kind = St::FilterBlock;
      s->expr = parse_filter_chain(nullptr);
      s->body = parse_block_body("endfilter");
    } else if (k == "with") {
      s->kind = St::With;
      while (cur().type != Tok::BlockEnd) {
        if (!s->assigns.empty()) expect_op(",");
        Target target = parse_target(false);
        expect_op("=");
        s->assigns.emplace_back(std::move(target), parse_expression());
      }
      s->body = parse_block_body("endwith");
    } else if (k == "print") {
      s->kind = St::Print;
      s->expr = parse_tuple();
      expect_block_end();
    } else if (k == "include" || k == "import" || k == "from" || k == "extends" || k == "block" ||
               k == "call" || k == "autoescape" || k == "do") {
      fail_at(t, str_cat("the '", k, "' tag is not supported in chat templates"));
    } else {
      fail_at(t, str_cat("unknown tag '", k, "'"));
    }
    return s;
  }

  Target parse_target(bool allow_tuple) {
    Target target;
    const bool paren = allow_tuple && skip_op("(");
    target.names.push_back(expect_name("a variable name"));
    if (!paren && !allow_tuple && skip_op(".")) {
      target.attr = expect_name("an attribute name");
      return target;
    }
    while (skip_op(",")) {
      target.tuple = true;
      if (cur().type != Tok::Name) break;
      target.names.push_back(next().text);
    }
    if (paren) expect_op(")");
    return target;
  }

  // parse_tuple: `a, b` makes a tuple; `no_condexpr` for a for-loop's iterable (its `if` filters).
  ExprP parse_tuple(bool no_condexpr = false) {
    const int line = cur().line;
    std::vector<ExprP> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        is_tuple = true;
      }
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") ||
          (no_condexpr && (is_name("if") || is_name("recursive"))))
        break;
      items.push_back(no_condexpr ? parse_or() : parse_expression());
    }
    if (!is_tuple) {
      if (items.empty()) expected("an expression");
      return std::move(items[0]);
    }
    auto e = node(Ex::Tuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprP parse_expression() {
    Deeper guard(*this);
    ExprP e = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      auto cond = node(Ex::Cond, line);
      cond->b = parse_or();
      cond->a = std::move(e);
      if (skip_name("else")) cond->c = parse_expression();
      e = finish(std::move(cond));
    }
    return e;
  }

  // `a or b or c` and `a and b`: left-deep chains of one operator.
  ExprP parse_chain(Ex kind, const char* word, ExprP (Parser::*operand)()) {
    ExprP left = (this->*operand)();
    while (is_name(word)) {
      auto e = node(kind, next().line);
      e->a = std::move(left);
      e->b = (this->*operand)();
      left = finish(std::move(e));
    }
    return left;
  }
  ExprP parse_or() { return parse_chain(Ex::Or, "or", &Parser::parse_and); }
  ExprP parse_and() { return parse_chain(Ex::And, "and", &Parser::parse_not); }
  ExprP parse_not() {
    if (is_name("not")) {
      Deeper guard(*this);
      auto e = node(Ex::Not, next().line);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    const int line = cur().line;
    ExprP first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprP> operands;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = node(Ex::Compare, line);
    e->a = std::move(first);
    e->ops = std::move(ops);
    e->args = std::move(operands);
    return e;
  }
  ExprP binary(std::string op, int line, ExprP a, ExprP b) {
    auto e = node(Ex::Binary, line);
    e->name = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return finish(std::move(e));
  }
  ExprP parse_math1() {
    ExprP left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token t = next();
      left = binary(t.text, t.line, std::move(left), parse_concat());
    }
    return left;
  }
  ExprP parse_concat() {
    const int line = cur().line;
    std::vector<ExprP> parts;
    parts.push_back(parse_math2());
    while (skip_op("~")) parts.push_back(parse_math2());
    if (parts.size() == 1) return std::move(parts[0]);
    auto e = node(Ex::Concat, line);
    e->args = std::move(parts);
    return e;
  }
  ExprP parse_math2() {
    ExprP left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = next();
      left = binary(t.text, t.line, std::move(left), parse_pow());
    }
    return left;
  }
  ExprP parse_pow() {
    ExprP left = parse_unary(true);
    while (is_op("**")) {
      const Token t = next();
      left = binary("**", t.line, std::move(left), parse_unary(true));
    }
    return left;
  }
  ExprP parse_unary(bool with_filter) {
    Deeper guard(*this);
    ExprP e;
    if (is_op("-") || is_op("+")) {
      const Token t = next();
      e = node(t.text == "-" ? Ex::Neg : Ex::Pos, t.line);
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprP parse_primary() {
    const Token t = cur();
    if (t.type == Tok::Name) {
      next();
      if (t.text == "true" || t.text == "True") return constant(Value(true), t.line);
      if (t.text == "false" || t.text == "False") return constant(Value(false), t.line);
      if (t.text == "none" || t.text == "None") return constant(Value(NoneV{}), t.line);
      auto e = node(Ex::Name, t.line);
      e->name = t.text;
      return e;
    }
    if (t.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) s += next().text;
      return constant(make_str(std::move(s)), t.line);
    }
    if (t.type == Tok::Int) {
      next();
      int64_t v = 0;
      auto res = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
      if (res.ec != std::errc())
        fail_at(t, str_cat("integer literal ", shortened(t.text), " out of range"));
      return constant(Value(v), t.line);
    }
    if (t.type == Tok::Float) {
      next();
      return constant(Value(std::strtod(t.text.c_str(), nullptr)), t.line);
    }
    if (is_op("(")) {
      next();
      ExprP inner;
      if (is_op(")")) {
        inner = node(Ex::Tuple, t.line);
      } else {
        inner = parse_tuple();
      }
      expect_op(")");
      return inner;
    }
    if (is_op("[")) {
      next();
      auto e = node(Ex::List, t.line);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = node(Ex::Dict, t.line);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    expected("an expression");
  }

  ExprP constant(Value v, int line) {
    auto e = node(Ex::Const, line);
    e->value = std::move(v);
    return e;
  }

  ExprP parse_postfix(ExprP e) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        if (cur().type == Tok::Name) {
          auto g = node(Ex::Getattr, line);
          g->a = std::move(e);
          g->name = next().text;
          e = finish(std::move(g));
        } else if (cur().type == Tok::Int) {
          auto g = node(Ex::Getitem, line);
          g->a = std::move(e);
          g->b = parse_primary();
          e = finish(std::move(g));
        } else {
          expected("an attribute name");
        }
      } else if (is_op("[")) {
        const int line = next().line;
        auto g = node(Ex::Getitem, line);
        g->a = std::move(e);
        std::vector<ExprP> subs;
        bool tuple = false;
        while (!is_op("]")) {
          if (!subs.empty()) {
            expect_op(",");
            tuple = true;
            if (is_op("]")) break;
          }
          subs.push_back(parse_subscribed());
        }
        next();
        if (subs.empty()) fail_here("expected a subscript");
        if (tuple) {
          auto t = node(Ex::Tuple, line);
          t->args = std::move(subs);
          g->b = std::move(t);
        } else {
          g->b = std::move(subs[0]);
        }
        e = finish(std::move(g));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprP parse_subscribed() {
    const int line = cur().line;
    ExprP start;
    if (!is_op(":")) {
      start = parse_expression();
      if (!is_op(":")) return start;
    }
    next();
    auto s = node(Ex::Slice, line);
    s->a = std::move(start);
    if (!is_op("]") && !is_op(",") && !is_op(":")) s->b = parse_expression();
    if (skip_op(":"))
      if (!is_op("]") && !is_op(",")) s->c = parse_expression();
    return s;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail_here("*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string key = next().text;
        next();
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail_here("a positional argument follows a keyword argument");
        call.args.push_back(parse_expression());
      }
    }
    next();
  }

  ExprP parse_call(ExprP callee) {
    auto e = node(Ex::Call, cur().line);
    e->a = std::move(callee);
    parse_call_args(*e);
    return finish(std::move(e));
  }

  std::string dotted_name() {
    std::string name = expect_name("a name");
    while (is_op(".") && peek().type == Tok::Name) {
      next();
      name += '.';
      name.append(next().text);
    }
    return name;
  }

  ExprP parse_filter_expr(ExprP e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filters(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // One `| name(args)` after `e` (null for a filter block's input).
  ExprP parse_filters(ExprP e) {
    expect_op("|");
    return parse_filter_chain(std::move(e));
  }
  ExprP parse_filter_chain(ExprP e) {
    while (true) {
      const Token t = cur();
      auto f = node(Ex::Filter, t.line);
      f->name = dotted_name();
      if (!known_filter(f->name)) fail_at(t, str_cat("no filter named '", f->name, "'"));
      f->a = std::move(e);
      if (is_op("(")) parse_call_args(*f);
      e = finish(std::move(f));
      if (!skip_op("|")) return e;
    }
  }

  ExprP parse_test(ExprP e) {
    const int line = next().line;  // is
    auto t = node(Ex::Test, line);
    t->negated = skip_name("not");
    const Token name_tok = cur();
    t->name = dotted_name();
    if (!known_test(t->name)) fail_at(name_tok, str_cat("no test named '", t->name, "'"));
    t->a = std::move(e);
    if (is_op("(")) {
      parse_call_args(*t);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("tests cannot be chained with 'is'");
      t->args.push_back(parse_postfix(parse_primary()));
    }
    return finish(std::move(t));
  }
};

// ---------------------------------------------------------------------------------------------
// Rendering.

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  Value* find(const std::string& name) {
    for (Scope* s = this; s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopeP = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

// Python's type name as jinja2's undefined messages show an object ("'dict object'").
std::string object_name(const Value& v) {
  if (v.none()) return "'None'";
  return str_cat("'", type_name(v), " object'");
}

// PySlice_AdjustIndices: the positions a slice visits in a sequence of `len`.
std::vector<size_t> slice_positions(int64_t len, const Value& start_v, const Value& stop_v,
                                    const Value& step_v) {
  auto get = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.none() || v.undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool())
      fault(str_cat("slice ", what, " must be an integer or None, not ", type_name(v)));
    return v.as_int();
  };
  const int64_t step = get(step_v, "step").value_or(1);
  if (step == 0) fault("slice step cannot be zero");
  int64_t start, stop;
  auto adjust = [&](std::optional<int64_t> x, int64_t def) {
    if (!x) return def;
    int64_t v = *x;
    if (v < 0) {
      v += len;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= len) {
      v = step < 0 ? len - 1 : len;
    }
    return v;
  };
  start = adjust(get(start_v, "start"), step < 0 ? len - 1 : 0);
  stop = adjust(get(stop_v, "stop"), step < 0 ? -1 : len);
  std::vector<size_t> out;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) out.push_back(size_t(i));
  } else {
    for (int64_t i = start; i > stop; i += step) out.push_back(size_t(i));
  }
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Python's str.strip / lstrip / rstrip: `chars` null strips whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars != nullptr && !chars->none()) {
    if (!chars->is_str()) fault(str_cat("strip arg must be None or str, not ", type_name(*chars)));
    set = code_points(chars->str());
  }
  auto strip_it = [&](char32_t c) {
    return chars == nullptr || chars->none() ? py_isspace(c)
                                             : std::find(set.begin(), set.end(), c) != set.end();
  };
  const std::vector<char32_t> cps = code_points(s);
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

// Python's str.split / rsplit.
std::vector<std::string> py_split(const std::string& s, const Value* sep_v, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> parts;
  if (sep_v == nullptr || sep_v->none()) {
    const std::vector<char32_t> cps = code_points(s);
    if (!from_right) {
      size_t i = 0;
      while (true) {
        while (i < cps.size() && py_isspace(cps[i])) ++i;
        if (i >= cps.size()) break;
        if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
          size_t e = cps.size();
          while (e > i && py_isspace(cps[e - 1])) --e;
          parts.push_back(from_code_points(cps, i, e));
          break;
        }
        size_t j = i;
        while (j < cps.size() && !py_isspace(cps[j])) ++j;
        parts.push_back(from_code_points(cps, i, j));
        i = j;
      }
    } else {
      size_t i = cps.size();
      while (true) {
        while (i > 0 && py_isspace(cps[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
          size_t b = 0;
          while (b < i && py_isspace(cps[b])) ++b;
          parts.push_back(from_code_points(cps, b, i));
          break;
        }
        size_t j = i;
        while (j > 0 && !py_isspace(cps[j - 1])) --j;
        parts.push_back(from_code_points(cps, j, i));
        i = j;
      }
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  if (!sep_v->is_str()) fault(str_cat("must be str or None, not ", type_name(*sep_v)));
  const std::string& sep = sep_v->str();
  if (sep.empty()) fault("empty separator");
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
      const size_t at = s.find(sep, pos);
      if (at == std::string::npos) break;
      parts.push_back(s.substr(pos, at - pos));
      pos = at + sep.size();
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
      if (end < sep.size()) break;
      const size_t at = s.rfind(sep, end - sep.size());
      if (at == std::string::npos) break;
      parts.push_back(s.substr(at + sep.size(), end - at - sep.size()));
      end = at;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::string py_capitalize(const std::string& s) {
  std::vector<char32_t> cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? py_upper(cps[i]) : py_lower(cps[i]);
  return from_code_points(cps, 0, cps.size());
}

std::string map_case(const std::string& s, char32_t (*f)(char32_t)) {
  if (is_ascii(s)) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(f(static_cast<unsigned char>(c)));
    return out;
  }
  std::vector<char32_t> cps = code_points(s);
  for (char32_t& c : cps) c = f(c);
  return from_code_points(cps, 0, cps.size());
}

// Python's str.title(): a letter after a cased letter is lowered, any other is raised.
std::string py_title(const std::string& s) {
  std::vector<char32_t> cps = code_points(s);
  bool prev_cased = false;
  for (char32_t& c : cps) {
    const bool cased = py_is_cased_upper(c) || py_is_cased_lower(c);
    c = prev_cased ? py_lower(c) : py_upper(c);
    prev_cased = cased;
  }
  return from_code_points(cps, 0, cps.size());
}

// jinja2's title filter: words start after whitespace or one of -({[<.
std::string jinja_title(const std::string& s) {
  std::vector<char32_t> cps = code_points(s);
  bool word_start = true;
  for (char32_t& c : cps) {
    const bool sep = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      word_start = true;
      continue;
    }
    c = word_start ? py_upper(c) : py_lower(c);
    word_start = false;
  }
  return from_code_points(cps, 0, cps.size());
}

// str.splitlines() boundaries.
std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  size_t pos = 0, start = 0;
  while (pos < s.size()) {
    const size_t at = pos;
    const char32_t c = next_code_point(s, pos);
    if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
        c == 0x85 || c == 0x2028 || c == 0x2029) {
      lines.push_back(s.substr(start, at - start));
      if (c == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
      start = pos;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

struct Renderer {
  const ChatTemplateLimits& limits;
  const std::string& origin;
  std::string root;
  std::vector<std::string> captures;
  std::vector<std::pair<size_t, size_t>> spans;
  int64_t iterations = 0;
  int depth = 0;
  int macro_depth = 0;
  int line = 0;
  std::unordered_map<std::string, Value> builtins;

  Renderer(const ChatTemplateLimits& l, const std::string& o) : limits(l), origin(o) {}

  struct Deeper {
    Renderer& r;
    explicit Deeper(Renderer& renderer) : r(renderer) {
      if (++r.depth > 8 * r.limits.max_nesting)
        fault(str_cat("rendering nests deeper than the limit of ", 8 * r.limits.max_nesting,
                      " levels (blocks, expressions and macro calls)"));
    }
    ~Deeper() { --r.depth; }
  };

  void write(std::string_view s) {
    std::string& o = captures.empty() ? root : captures.back();
    if (o.size() + s.size() > limits.max_output_bytes)
      fault(str_cat("the output is over the limit of ", limits.max_output_bytes, " bytes"));
    o.append(s);
  }
  Value text(std::string s) const {
    if (s.size() > limits.max_output_bytes)
      fault(str_cat("a string of ", s.size(), " bytes is over the limit of ",
                    limits.max_output_bytes, " bytes"));
    return make_str(std::move(s));
  }
  Value list(std::vector<Value> items, bool tuple = false) const {
    if (items.size() > limits.max_items)
      fault(str_cat("a list of ", items.size(), " items is over the limit of ", limits.max_items));
    auto l = std::make_shared<ListObj>();
    l->tuple = tuple;
    for (const Value& v : items) l->depth = std::max(l->depth, value_depth(v) + 1);
    if (l->depth > limits.max_value_depth)
      fault(str_cat("values nest deeper than the limit of ", limits.max_value_depth, " levels"));
    l->items = std::move(items);
    return Value(l);
  }
  Value dict(std::vector<std::pair<Value, Value>> items) const {
    if (items.size() > limits.max_items)
      fault(str_cat("a dict of ", items.size(), " items is over the limit of ", limits.max_items));
    auto d = std::make_shared<DictObj>();
    for (auto& [k, v] : items) {
      if (k.is_list() && !k.list().tuple) fault("unhashable type: 'list'");
      if (k.is_dict()) fault("unhashable type: 'dict'");
      d->insert(std::move(k), std::move(v));
    }
    if (d->depth > limits.max_value_depth)
      fault(str_cat("values nest deeper than the limit of ", limits.max_value_depth, " levels"));
    return Value(d);
  }
  void count_iteration() {
    if (++iterations > limits.max_loop_iterations)
      fault(str_cat("loops ran over the limit of ", limits.max_loop_iterations, " iterations"));
  }

  // Runs `body` into a buffer of its own and returns what it wrote.
  template <typename F>
  std::string capture(F&& body) {
    captures.emplace_back();
    struct Pop {
      std::vector<std::string>& c;
      ~Pop() { c.pop_back(); }
    };
    Pop pop{captures};
    body();
    return std::move(captures.back());
  }

  // ---- values: iteration, attributes, items, operators

  std::vector<Value> iterate(const Value& v) {
    switch (v.v.index()) {
      case 0:
        return {};
      case 5: {
        std::vector<Value> out;
        const std::string& s = v.str();
        size_t pos = 0;
        while (pos < s.size()) {
          const size_t at = pos;
          next_code_point(s, pos);
          out.push_back(make_str(s.substr(at, pos - at)));
        }
        return out;
      }
      case 6:
        return v.list().items;
      case 7: {
        std::vector<Value> out;
        for (const auto& kv : v.dict().items) out.push_back(kv.first);
        return out;
      }
      case 10:
        return *v.loop().items;
      default:
        fault(str_cat("'", type_name(v), "' object is not iterable"));
    }
  }

  int64_t length(const Value& v) {
    switch (v.v.index()) {
      case 0:
        return 0;
      case 5:
        return int64_t(code_point_count(v.str()));
      case 6:
        return int64_t(v.list().items.size());
      case 7:
        return int64_t(v.dict().items.size());
      case 10:
        return int64_t(v.loop().items->size());
      default:
        fault(str_cat("object of type '", type_name(v), "' has no len()"));
    }
  }

  Value bound(const Value& self, const std::string& name,
              std::function<Value(Renderer&, const Value&, CallArgs&)> f) {
    auto fn = std::make_shared<FunctionObj>();
    fn->name = name;
    fn->call = [self, f = std::move(f)](Renderer& r, CallArgs& a, int) { return f(r, self, a); };
    return Value(fn);
  }

  Value method(const Value& self, const std::string& name);

  Value get_attr(const Value& obj, const std::string& name) {
    if (obj.undefined()) undefined_error(obj);
    auto missing = [&] {
      return make_undefined(str_cat(object_name(obj), " has no attribute ", str_repr(name)));
    };
    if (!name.empty() && name[0] == '_') return missing();
    if (obj.is_loop()) return loop_attr(obj, name);
    if (obj.is_ns()) {
      Value* v = obj.ns().find(name);
      return v != nullptr ? *v : missing();
    }
    if (obj.is_str() || obj.is_list() || obj.is_dict()) {
      Value m = method(obj, name);
      if (!m.undefined() || std::get<Undef>(m.v).unsafe) return m;
      if (obj.is_dict()) {
        const Value* v = obj.dict().find(make_str(name));
        if (v != nullptr) return *v;
      }
    }
    return missing();
  }

  Value get_item(const Value& obj, const Value& key) {
    if (obj.undefined()) undefined_error(obj);
    if (obj.is_dict()) {
      const Value* v = obj.dict().find(key);
      if (v != nullptr) return *v;
    } else if ((obj.is_list() || obj.is_str()) && (key.is_int() || key.is_bool())) {
      const int64_t n = length(obj);
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        if (obj.is_list()) return obj.list().items[size_t(i)];
        const std::string& s = obj.str();
        if (is_ascii(s)) return make_str(s.substr(size_t(i), 1));
        const std::vector<char32_t> cps = code_points(s);
        return make_str(from_code_points(cps, size_t(i), size_t(i) + 1));
      }
    }
    if (key.is_str()) return get_attr(obj, key.str());
    std::string k;
    repr_into(key, k);
    return make_undefined(str_cat(object_name(obj), " has no element ", k));
  }

  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
    if (obj.undefined()) undefined_error(obj);
    if (obj.is_list()) {
      const auto& items = obj.list().items;
      std::vector<Value> out;
      for (size_t i : slice_positions(int64_t(items.size()), start, stop, step))
        out.push_back(items[i]);
      return list(std::move(out), obj.list().tuple);
    }
    if (obj.is_str()) {
      const std::string& s = obj.str();
      std::string out;
      if (is_ascii(s)) {
        for (size_t i : slice_positions(int64_t(s.size()), start, stop, step)) out += s[i];
      } else {
        const std::vector<char32_t> cps = code_points(s);
        for (size_t i : slice_positions(int64_t(cps.size()), start, stop, step))
          append_utf8(out, cps[i]);
      }
      return make_str(std::move(out));
    }
    // jinja2 compiles a slice to Python's own obj[a:b:c] (not its forgiving getitem).
    fault(str_cat("'", type_name(obj), "' object is not subscriptable"));
  }

  Value loop_attr(const Value& obj, const std::string& name) {
    const LoopObj& l = obj.loop();
    const int64_t n = int64_t(l.items->size());
    const int64_t i = int64_t(l.index0);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(int64_t{1});
    if (name == "depth0") return Value(int64_t{0});
    if (name == "previtem")
      return i > 0 ? (*l.items)[size_t(i - 1)] : make_undefined("there is no previous item");
    if (name == "nextitem")
      return i + 1 < n ? (*l.items)[size_t(i + 1)] : make_undefined("there is no next item");
    if (name == "cycle") {
      return bound(obj, "cycle", [](Renderer&, const Value& self, CallArgs& a) {
        if (a.pos.empty()) fault("no items for cycling given");
        return a.pos[self.loop().index0 % a.pos.size()];
      });
    }
    return make_undefined(str_cat("'LoopContext object' has no attribute ", str_repr(name)));
  }

  static int compare_order(const Value& a, const Value& b, const char* op) {
    if (a.is_number() && b.is_number()) {
      if (a.is_float() || b.is_float()) {
        const double x = a.as_double(), y = b.as_double();
        return x < y ? -1 : x > y ? 1 : 0;
      }
      const int64_t x = a.as_int(), y = b.as_int();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_str() && b.is_str()) {
      const int c = a.str().compare(b.str());
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
      const auto& x = a.list().items;
      const auto& y = b.list().items;
      for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
        if (py_equal(x[i], y[i])) continue;
        return compare_order(x[i], y[i], op);
      }
      return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    if (a.undefined()) undefined_error(a);
    if (b.undefined()) undefined_error(b);
    fault(str_cat("'", op, "' not supported between instances of '", type_name(a), "' and '",
                  type_name(b), "'"));
  }

  bool contains(const Value& container, const Value& item) {
    if (container.is_str()) {
      if (!item.is_str())
        fault(str_cat("'in <string>' requires string as left operand, not ", type_name(item)));
      return container.str().find(item.str()) != std::string::npos;
    }
    if (container.is_list()) {
      for (const Value& x : container.list().items)
        if (py_equal(x, item)) return true;
      return false;
    }
    if (container.is_dict()) return container.dict().find(item) != nullptr;
    if (container.undefined()) return false;
    if (container.is_loop()) {
      for (const Value& x : *container.loop().items)
        if (py_equal(x, item)) return true;
      return false;
    }
    fault(str_cat("argument of type '", type_name(container), "' is not iterable"));
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return py_equal(a, b);
    if (op == "!=") return !py_equal(a, b);
    if (op == "in") return contains(b, a);
    if (op == "notin") return !contains(b, a);
    const char* sym = op.c_str();
    const int c = compare_order(a, b, sym);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  static int64_t checked(bool overflow, int64_t v, const char* op) {
    if (overflow) fault(str_cat("integer overflow in '", op, "'"));
    return v;
  }

  Value repeat(const Value& seq, int64_t n) {
    if (n < 0) n = 0;
    if (seq.is_str()) {
      const std::string& s = seq.str();
      if (!s.empty() && uint64_t(n) > limits.max_output_bytes / s.size())
        fault(str_cat("a string of ", s.size(), " bytes repeated ", n,
                      " times is over the limit of ", limits.max_output_bytes, " bytes"));
      // By doubling: a one-byte string repeated to the limit is 26 copies, not 64 million
      // appends (which take seconds under the fuzzer's instrumentation).
      const size_t total = s.size() * size_t(n);
      std::string out;
      out.reserve(total);
      if (total > 0) out = s;
      while (out.size() < total) out.append(out, 0, std::min(out.size(), total - out.size()));
      return make_str(std::move(out));
    }
    const auto& items = seq.list().items;
    if (!items.empty() && uint64_t(n) > limits.max_items / items.size())
      fault(str_cat("a list of ", items.size(), " items repeated ", n,
                    " times is over the limit of ", limits.max_items, " items"));
    std::vector<Value> out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
    return list(std::move(out), seq.list().tuple);
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (a.undefined()) undefined_error(a);
    if (b.undefined()) undefined_error(b);
    const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
    const bool nums = a.is_number() && b.is_number();
    if (op == "+") {
      if (ints) {
        int64_t r = 0;
        const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
        return Value(checked(overflow, r, "+"));
      }
      if (nums) return Value(a.as_double() + b.as_double());
      if (a.is_str() && b.is_str()) return text(a.str() + b.str());
      if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
        std::vector<Value> out = a.list().items;
        out.insert(out.end(), b.list().items.begin(), b.list().items.end());
        return list(std::move(out), a.list().tuple);
      }
      if (a.is_str())
        fault(str_cat("can only concatenate str (not \"", type_name(b), "\") to str"));
    } else if (op == "-") {
      if (ints) {
        int64_t r = 0;
        const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
        return Value(checked(overflow, r, "-"));
      }
      if (nums) return Value(a.as_double() - b.as_double());
    } else if (op == "*") {
      if (ints) {
        int64_t r = 0;
        const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
        return Value(checked(overflow, r, "*"));
      }
      if (nums) return Value(a.as_double() * b.as_double());
      if ((a.is_str() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
      if ((b.is_str() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    } else if (op == "/") {
      if (nums) {
        if (b.as_double() == 0.0) fault("division by zero");
        return Value(a.as_double() / b.as_double());
      }
    } else if (op == "//" || op == "%") {
      if (ints) {
        const int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) fault("integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1)
          fault(str_cat("integer overflow in '", op, "'"));
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value(op == "//" ? q : m);
      }
      if (nums) {
        const double x = a.as_double(), y = b.as_double();
        if (y == 0.0) fault("float division by zero");
        double m = std::fmod(x, y);
        if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
        if (op == "%") return Value(m);
        return Value(std::floor((x - m) / y + 0.0));
      }
      if (op == "%" && a.is_str())
        fault("printf-style string formatting ('%') is not supported; use format()");
    } else if (op == "**") {
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), e = b.as_int(), r = 1;
        while (e > 0) {
          if ((e & 1) && __builtin_mul_overflow(r, base, &r)) checked(true, r, "**");
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) checked(true, base, "**");
        }
        return Value(r);
      }
      if (nums) return Value(std::pow(a.as_double(), b.as_double()));
    }
    fault(str_cat("unsupported operand type(s) for ", op, ": '", type_name(a), "' and '",
                  type_name(b), "'"));
  }

  // ---- expressions

  Value lookup(const std::string& name, const ScopeP& scope) {
    if (Value* v = scope->find(name)) return *v;
    auto it = builtins.find(name);
    if (it != builtins.end()) return it->second;
    return make_undefined(str_cat("'", name, "' is undefined"));
  }

  Value call(const Value& callee, CallArgs& args, int at_line) {
    if (callee.undefined()) undefined_error(callee);
    if (!callee.is_fn()) fault(str_cat("'", type_name(callee), "' object is not callable"));
    return callee.fn().call(*this, args, at_line);
  }

  CallArgs eval_args(const Expr& e, const ScopeP& scope) {
    CallArgs a;
    for (const ExprP& x : e.args) a.pos.push_back(eval(*x, scope));
    for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x, scope));
    return a;
  }

  Value eval(const Expr& e, const ScopeP& scope) {
    Deeper guard(*this);
    line = e.line;
    switch (e.kind) {
      case Ex::Const:
        return e.value;
      case Ex::Name:
        return lookup(e.name, scope);
      case Ex::List:
      case Ex::Tuple: {
        std::vector<Value> items;
        for (const ExprP& x : e.args) items.push_back(eval(*x, scope));
        return list(std::move(items), e.kind == Ex::Tuple);
      }
      case Ex::Dict: {
        std::vector<std::pair<Value, Value>> items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2)
          items.emplace_back(eval(*e.args[i], scope), eval(*e.args[i + 1], scope));
        return dict(std::move(items));
      }
      case Ex::Getattr: {
        Value obj = eval(*e.a, scope);
        line = e.line;
        return get_attr(obj, e.name);
      }
      case Ex::Getitem: {
        Value obj = eval(*e.a, scope);
        if (e.b->kind == Ex::Slice) {
          const Expr& s = *e.b;
          Value start = s.a ? eval(*s.a, scope) : Value(NoneV{});
          Value stop = s.b ? eval(*s.b, scope) : Value(NoneV{});
          Value step = s.c ? eval(*s.c, scope) : Value(NoneV{});
          line = e.line;
          return slice(obj, start, stop, step);
        }
        Value key = eval(*e.b, scope);
        line = e.line;
        return get_item(obj, key);
      }
      case Ex::Slice:
        fault("a slice outside of a subscript");
      case Ex::Call: {
        Value callee = eval(*e.a, scope);
        CallArgs args = eval_args(e, scope);
        line = e.line;
        return call(callee, args, e.line);
      }
      case Ex::Filter:
        return eval_filter(e, scope, nullptr);
      case Ex::Test: {
        Value v = eval(*e.a, scope);
        CallArgs args = eval_args(e, scope);
        line = e.line;
        const bool r = run_test(e.name, v, args);
        return Value(e.negated ? !r : r);
      }
      case Ex::Not:
        return Value(!truthy(eval(*e.a, scope)));
      case Ex::Neg:
      case Ex::Pos: {
        Value v = eval(*e.a, scope);
        line = e.line;
        if (v.undefined()) undefined_error(v);
        if (!v.is_number())
          fault(str_cat("bad operand type for unary ", e.kind == Ex::Neg ? "-" : "+", ": '",
                        type_name(v), "'"));
        if (e.kind == Ex::Pos) return v.is_bool() ? Value(v.as_int()) : v;
        if (v.is_float()) return Value(-v.as_double());
        if (v.as_int() == std::numeric_limits<int64_t>::min())
          fault("integer overflow in unary '-'");
        return Value(-v.as_int());
      }
      case Ex::Binary: {
        Value a = eval(*e.a, scope);
        Value b = eval(*e.b, scope);
        line = e.line;
        return binary(e.name, a, b);
      }
      case Ex::Concat: {
        std::string out;
        for (const ExprP& x : e.args) {
          str_into(eval(*x, scope), out);
          if (out.size() > limits.max_output_bytes) text(std::move(out));
        }
        return text(std::move(out));
      }
      case Ex::Compare: {
        Value left = eval(*e.a, scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i], scope);
          line = e.line;
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Ex::And: {
        Value a = eval(*e.a, scope);
        return truthy(a) ? eval(*e.b, scope) : a;
      }
      case Ex::Or: {
        Value a = eval(*e.a, scope);
        return truthy(a) ? a : eval(*e.b, scope);
      }
      case Ex::Cond: {
        if (truthy(eval(*e.b, scope))) return eval(*e.a, scope);
        if (e.c) return eval(*e.c, scope);
        return make_undefined(str_cat("the inline if-expression on line ", e.line,
                                      " evaluated to false and no else section was defined."));
      }
    }
    fault("unknown expression");
  }

  Value eval_filter(const Expr& f, const ScopeP& scope, const Value* block_input) {
    Value input;
    if (!f.a) {
      input = *block_input;
    } else if (f.a->kind == Ex::Filter) {
      input = eval_filter(*f.a, scope, block_input);
    } else {
      input = eval(*f.a, scope);
    }
    CallArgs args = eval_args(f, scope);
    line = f.line;
    return run_filter(f.name, input, args);
  }

  Value run_filter(const std::string& name, const Value& input, CallArgs& args);
  bool run_test(const std::string& name, const Value& v, CallArgs& args);

  // ---- statements

  void assign(const Target& t, Value v, const ScopeP& scope) {
    if (!t.attr.empty()) {
      Value* ns = scope->find(t.names[0]);
      if (ns == nullptr || !ns->is_ns()) fault("cannot assign attribute on non-namespace object");
      set_namespace_attr(ns->ns(), t.attr, std::move(v));
      return;
    }
    if (!t.tuple) {
      scope->vars[t.names[0]] = std::move(v);
      return;
    }
    std::vector<Value> items = iterate(v);
    if (items.size() != t.names.size())
      fault(str_cat(items.size() < t.names.size() ? "not enough" : "too many",
                    " values to unpack (expected ", t.names.size(), ", got ", items.size(), ")"));
    for (size_t i = 0; i < items.size(); ++i) scope->vars[t.names[i]] = std::move(items[i]);
  }

  static bool holds_namespace(const Value& v) {
    if (v.is_ns()) return true;
    if (v.is_list())
      for (const Value& x : v.list().items)
        if (holds_namespace(x)) return true;
    if (v.is_dict())
      for (const auto& [k, x] : v.dict().items)
        if (holds_namespace(x)) return true;
    return false;
  }

  void set_namespace_attr(NamespaceObj& ns, const std::string& name, Value v) {
    if (!name.empty() && name[0] == '_')
      fault(str_cat(
          "Chat templates cannot store underscore-prefixed attributes on a namespace, but got ",
          str_repr(name), ". Please rename the attribute."));
    // A namespace is the one mutable object: one inside another could close a cycle.
    if (holds_namespace(v)) fault("a namespace attribute cannot hold a namespace");
    if (value_depth(v) + 1 > limits.max_value_depth)
      fault(str_cat("values nest deeper than the limit of ", limits.max_value_depth, " levels"));
    ns.depth = std::max(ns.depth, value_depth(v) + 1);
    if (Value* slot = ns.find(name)) {
      *slot = std::move(v);
    } else {
      if (ns.attrs.size() >= limits.max_items)
        fault(str_cat("a namespace of ", ns.attrs.size(), " attributes is at the limit of ",
                      limits.max_items));
      ns.attrs.emplace_back(name, std::move(v));
    }
  }

  Flow exec(const Body& body, const ScopeP& scope) {
    Deeper guard(*this);
    for (const StmtP& sp : body) {
      const Stmt& s = *sp;
      line = s.line;
      switch (s.kind) {
        case St::Output:
          write(s.text);
          break;
        case St::Print: {
          Value v = eval(*s.expr, scope);
          if (v.is_str()) {
            write(v.str());
          } else {
            std::string out;
            str_into(v, out);
            write(out);
          }
          break;
        }
        case St::If:
          for (const auto& [cond, branch] : s.branches) {
            if (cond && !truthy(eval(*cond, scope))) continue;
            const Flow f = exec(branch, scope);
            if (f != Flow::Normal) return f;
            break;
          }
          break;
        case St::For:
          exec_for(s, scope);
          break;
        case St::Set:
          assign(s.target, eval(*s.expr, scope), scope);
          break;
        case St::SetBlock: {
          std::string out = capture([&] { exec(s.body, scope); });
          Value v = make_str(std::move(out));
          if (s.expr) v = eval_filter(*s.expr, scope, &v);
          assign(s.target, std::move(v), scope);
          break;
        }
        case St::Macro:
          define_macro(s, scope);
          break;
        case St::Break:
          return Flow::Break;
        case St::Continue:
          return Flow::Continue;
        case St::Generation: {
          std::string out = capture([&] { exec(s.body, scope); });
          // As transformers' AssistantTracker: the start is what the template has yielded so
          // far (the top-level output), the end that plus what the block rendered.
          const size_t start = root.size();
          spans.emplace_back(start, start + out.size());
          write(out);
          break;
        }
        case St::FilterBlock: {
          Value v = make_str(capture([&] { exec(s.body, scope); }));
          Value r = eval_filter(*s.expr, scope, &v);
          write(to_str(r));
          break;
        }
        case St::With: {
          auto inner = std::make_shared<Scope>();
          inner->parent = scope;
          for (const auto& [target, value] : s.assigns) assign(target, eval(*value, scope), inner);
          const Flow f = exec(s.body, inner);
          if (f != Flow::Normal) return f;
          break;
        }
      }
    }
    return Flow::Normal;
  }

  void exec_for(const Stmt& s, const ScopeP& scope) {
    Value iterable = eval(*s.expr, scope);
    line = s.line;
    std::vector<Value> items = iterate(iterable);
    if (s.cond) {
      std::vector<Value> kept;
      for (Value& item : items) {
        count_iteration();
        auto probe = std::make_shared<Scope>();
        probe->parent = scope;
        assign(s.target, item, probe);
        if (truthy(eval(*s.cond, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      exec(s.else_body, inner);
      return;
    }
    auto shared_items = std::make_shared<const std::vector<Value>>(std::move(items));
    for (size_t i = 0; i < shared_items->size(); ++i) {
      count_iteration();
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      auto loop = std::make_shared<LoopObj>();
      loop->items = shared_items;
      loop->index0 = i;
      inner->vars["loop"] = Value(loop);
      line = s.line;
      assign(s.target, (*shared_items)[i], inner);
      if (exec(s.body, inner) == Flow::Break) break;
    }
  }

  void define_macro(const Stmt& s, const ScopeP& scope) {
    auto fn = std::make_shared<FunctionObj>();
    fn->name = s.name;
    fn->is_macro = true;
    std::weak_ptr<Scope> closure = scope;
    const Stmt* def = &s;
    fn->call = [def, closure](Renderer& r, CallArgs& a, int) -> Value {
      ScopeP parent = closure.lock();
      if (!parent)
        fault(str_cat("macro '", def->name, "' is called after the block that defined it ended"));
      if (r.macro_depth >= r.limits.max_macro_depth)
        fault(str_cat("macro calls nest deeper than the limit of ", r.limits.max_macro_depth));
      if (a.pos.size() > def->params.size())
        fault(str_cat("macro '", def->name, "' takes not more than ", def->params.size(),
                      " argument(s)"));
      auto inner = std::make_shared<Scope>();
      inner->parent = parent;
      std::vector<bool> given(def->params.size(), false);
      for (size_t i = 0; i < a.pos.size(); ++i) {
        inner->vars[def->params[i]] = a.pos[i];
        given[i] = true;
      }
      for (auto& [k, v] : a.kw) {
        auto it = std::find(def->params.begin(), def->params.end(), k);
        if (it == def->params.end())
          fault(str_cat("macro '", def->name, "' takes no keyword argument '", k, "'"));
        const size_t i = size_t(it - def->params.begin());
        if (given[i])
          fault(str_cat("macro '", def->name, "' got multiple values for argument '", k, "'"));
        inner->vars[k] = v;
        given[i] = true;
      }
      for (size_t i = 0; i < def->params.size(); ++i) {
        if (given[i]) continue;
        inner->vars[def->params[i]] =
            def->defaults[i]
                ? r.eval(*def->defaults[i], inner)
                : make_undefined(str_cat("parameter '", def->params[i], "' was not provided"));
      }
      ++r.macro_depth;
      struct Down {
        int& d;
        ~Down() { --d; }
      } down{r.macro_depth};
      return make_str(r.capture([&] { r.exec(def->body, inner); }));
    };
    scope->vars[s.name] = Value(fn);
  }
};

// ---------------------------------------------------------------------------------------------
// Arguments, methods, filters, tests and globals.

// Binds Python-style arguments to the parameter names of `fname`.
std::vector<std::optional<Value>> bind_args(const std::string& fname, const CallArgs& a,
                                            std::initializer_list<const char*> names) {
  std::vector<std::optional<Value>> out(names.size());
  if (a.pos.size() > names.size())
    fault(str_cat(fname, "() takes at most ", names.size(), " argument(s) (", a.pos.size(),
                  " given)"));
  for (size_t i = 0; i < a.pos.size(); ++i) out[i] = a.pos[i];
  for (const auto& [k, v] : a.kw) {
    size_t i = 0;
    for (const char* n : names) {
      if (k == n) break;
      ++i;
    }
    if (i == names.size()) fault(str_cat(fname, "() got an unexpected keyword argument '", k, "'"));
    if (out[i]) fault(str_cat(fname, "() got multiple values for argument '", k, "'"));
    out[i] = v;
  }
  return out;
}

const std::string& need_str(const Value& v, const std::string& what) {
  if (v.undefined()) undefined_error(v);
  if (!v.is_str()) fault(str_cat(what, " must be str, not ", type_name(v)));
  return v.str();
}
int64_t need_int(const Value& v, const std::string& what) {
  if (v.undefined()) undefined_error(v);
  if (!v.is_int() && !v.is_bool()) fault(str_cat(what, " must be an integer, not ", type_name(v)));
  return v.as_int();
}

// Python's str.find family on code point positions.
int64_t py_find(const std::string& s, const std::string& sub, bool from_right) {
  const size_t at = from_right ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return -1;
  return int64_t(code_point_count(std::string_view(s).substr(0, at)));
}

// str.format with automatic and explicit field numbers and names, `!s` / `!r` conversions; no
// format specs.
std::string py_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      fault("format(): single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) fault("format(): single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) fault("format(): conversions are !s or !r");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos) fault("format(): format specs are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index >= a.pos.size())
        fault(str_cat("format(): replacement index ", auto_index, " out of range"));
      v = &a.pos[auto_index++];
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t k = std::stoul(field.substr(0, 9));
      if (k >= a.pos.size()) fault(str_cat("format(): replacement index ", k, " out of range"));
      v = &a.pos[k];
    } else {
      for (const auto& [name, x] : a.kw)
        if (name == field) v = &x;
      if (v == nullptr) fault(str_cat("format(): no argument named '", field, "'"));
    }
    if (conversion == 'r') {
      repr_into(*v, out);
    } else if (conversion == 's') {
      str_into(*v, out);
    } else {
      fault("format(): conversions are !s or !r");
    }
  }
  return out;
}

bool str_predicate(const std::string& s, bool (*pred)(char32_t)) {
  if (s.empty()) return false;
  for (char32_t c : code_points(s))
    if (!pred(c)) return false;
  return true;
}

std::string pad(const std::string& s, int64_t width, const std::string& fill, int where) {
  const int64_t len = int64_t(code_point_count(s));
  if (width <= len) return s;
  if (width > int64_t(size_t{1} << 24))
    fault(str_cat("a width of ", width, " is over the limit of ", size_t{1} << 24));
  const int64_t total = width - len;
  int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

using Method = std::function<Value(Renderer&, const Value&, CallArgs&)>;

// str.strip / lstrip / rstrip.
Method strip_method(const char* name, bool left, bool right) {
  return [=](Renderer&, const Value& s, CallArgs& a) {
    auto p = bind_args(name, a, {"chars"});
    return make_str(py_strip(s.str(), p[0] ? &*p[0] : nullptr, left, right));
  };
}

// str.split / rsplit.
Method split_method(const char* name, bool from_right) {
  return [=](Renderer& r, const Value& s, CallArgs& a) {
    auto p = bind_args(name, a, {"sep", "maxsplit"});
    std::vector<Value> out;
    for (auto& part : py_split(s.str(), p[0] ? &*p[0] : nullptr,
                               p[1] ? need_int(*p[1], "maxsplit") : -1, from_right))
      out.push_back(make_str(std::move(part)));
    return r.list(std::move(out));
  };
}

// str.startswith / endswith: a string or a tuple of them.
Method affix_method(const char* name, bool prefix) {
  return [=](Renderer&, const Value& s, CallArgs& a) {
    auto p = bind_args(name, a, {prefix ? "prefix" : "suffix"});
    if (!p[0]) fault(str_cat(name, "() takes at least 1 argument (0 given)"));
    const std::vector<Value> options =
        p[0]->is_list() ? p[0]->list().items : std::vector<Value>{*p[0]};
    for (const Value& o : options) {
      const std::string& x = need_str(o, str_cat(name, "() argument"));
      if (prefix ? s.str().starts_with(x) : s.str().ends_with(x)) return Value(true);
    }
    return Value(false);
  };
}

// str.center / ljust / rjust.
Method pad_method(const char* name, int where) {
  return [=](Renderer&, const Value& s, CallArgs& a) {
    auto p = bind_args(name, a, {"width", "fillchar"});
    return make_str(pad(s.str(), need_int(p[0] ? *p[0] : Value(NoneV{}), "width"),
                        p[1] ? need_str(*p[1], "fillchar") : " ", where));
  };
}

Value Renderer::method(const Value& self, const std::string& name) {
  using M = Method;
  static const std::unordered_map<std::string, M> str_methods = {
      {"strip", strip_method("strip", true, true)},
      {"lstrip", strip_method("lstrip", true, false)},
      {"rstrip", strip_method("rstrip", false, true)},
      {"split", split_method("split", false)},
      {"rsplit", split_method("rsplit", true)},
      {"splitlines",
       [](Renderer& r, const Value& s, CallArgs& a) {
         bind_args("splitlines", a, {});
         std::vector<Value> out;
         for (auto& part : py_splitlines(s.str())) out.push_back(make_str(std::move(part)));
         return r.list(std::move(out));
       }},
      {"startswith", affix_method("startswith", true)},
      {"endswith", affix_method("endswith", false)},
      {"upper",
       [](Renderer&, const Value& s, CallArgs&) { return make_str(map_case(s.str(), py_upper)); }},
      {"lower",
       [](Renderer&, const Value& s, CallArgs&) { return make_str(map_case(s.str(), py_lower)); }},
      {"casefold",
       [](Renderer&, const Value& s, CallArgs&) { return make_str(map_case(s.str(), py_lower)); }},
      {"title", [](Renderer&, const Value& s, CallArgs&) { return make_str(py_title(s.str())); }},
      {"capitalize",
       [](Renderer&, const Value& s, CallArgs&) { return make_str(py_capitalize(s.str())); }},
      {"replace",
       [](Renderer& r, const Value& s, CallArgs& a) {
         auto p = bind_args("replace", a, {"old", "new", "count"});
         if (!p[0] || !p[1]) fault("replace() takes at least 2 arguments");
         return r.run_filter("replace", s, a);
       }},
      {"find",
       [](Renderer&, const Value& s, CallArgs& a) {
         auto p = bind_args("find", a, {"sub"});
         if (!p[0]) fault("find() takes at least 1 argument (0 given)");
         return Value(py_find(s.str(), need_str(*p[0], "find() argument"), false));
       }},
      {"rfind",
       [](Renderer&, const Value& s, CallArgs& a) {
         auto p = bind_args("rfind", a, {"sub"});
         if (!p[0]) fault("rfind() takes at least 1 argument (0 given)");
         return Value(py_find(s.str(), need_str(*p[0], "rfind() argument"), true));
       }},
      {"index",
       [](Renderer&, const Value& s, CallArgs& a) {
         auto p = bind_args("index", a, {"sub"});
         if (!p[0]) fault("index() takes at least 1 argument (0 given)");
         const int64_t i = py_find(s.str(), need_str(*p[0], "index() argument"), false);
         if (i < 0) fault("substring not found");
         return Value(i);
       }},
      {"count",
       [](Renderer&, const Value& s, CallArgs& a) {
         auto p = bind_args("count", a, {"sub"});
         if (!p[0]) fault("count() takes at least 1 argument (0 given)");
         const std::string& sub = need_str(*p[0], "count() argument");
         if (sub.empty()) return Value(int64_t(code_point_count(s.str())) + 1);
         int64_t n = 0;
         for (size_t at = s.str().find(sub); at != std::string::npos;
              at = s.str().find(sub, at + sub.size()))
           ++n;
         return Value(n);
       }},
      {"join",
       [](Renderer& r, const Value& s, CallArgs& a) {
         auto p = bind_args("join", a, {"iterable"});
         if (!p[0]) fault("join() takes exactly one argument (0 given)");
         std::string out;
         size_t i = 0;
         for (const Value& x : r.iterate(*p[0])) {
           if (!x.is_str())
             fault(
                 str_cat("sequence item ", i, ": expected str instance, ", type_name(x), " found"));
           if (i++) out += s.str();
           out += x.str();
           if (out.size() > r.limits.max_output_bytes) r.text(std::move(out));
         }
         return r.text(std::move(out));
       }},
      {"format",
       [](Renderer& r, const Value& s, CallArgs& a) { return r.text(py_format(s.str(), a)); }},
      {"isdigit", [](Renderer&, const Value& s,
                     CallArgs&) { return Value(str_predicate(s.str(), py_isdigit)); }},
      {"isnumeric", [](Renderer&, const Value& s,
                       CallArgs&) { return Value(str_predicate(s.str(), py_isdigit)); }},
      {"isalpha", [](Renderer&, const Value& s,
                     CallArgs&) { return Value(str_predicate(s.str(), py_isalpha)); }},
      {"isalnum",
       [](Renderer&, const Value& s, CallArgs&) {
         return Value(
             str_predicate(s.str(), [](char32_t c) { return py_isalpha(c) || py_isdigit(c); }));
       }},
      {"isspace", [](Renderer&, const Value& s,
                     CallArgs&) { return Value(str_predicate(s.str(), py_isspace)); }},
      {"islower", [](Renderer&, const Value& s,
                     CallArgs&) { return Value(only_cased(s.str(), /*upper=*/false)); }},
      {"isupper", [](Renderer&, const Value& s,
                     CallArgs&) { return Value(only_cased(s.str(), /*upper=*/true)); }},
      {"removeprefix",
       [](Renderer&, const Value& s, CallArgs& a) {
         auto p = bind_args("removeprefix", a, {"prefix"});
         const std::string& x = need_str(p[0] ? *p[0] : Value(NoneV{}), "removeprefix() argument");
         return make_str(s.str().starts_with(x) ? s.str().substr(x.size()) : s.str());
       }},
      {"removesuffix",
       [](Renderer&, const Value& s, CallArgs& a) {
         auto p = bind_args("removesuffix", a, {"suffix"});
         const std::string& x = need_str(p[0] ? *p[0] : Value(NoneV{}), "removesuffix() argument");
         return make_str(s.str().ends_with(x) ? s.str().substr(0, s.str().size() - x.size())
                                              : s.str());
       }},
      {"center", pad_method("center", 0)},
      {"ljust", pad_method("ljust", -1)},
      {"rjust", pad_method("rjust", 1)},
  };
  static const std::unordered_map<std::string, M> dict_methods = {
      {"get",
       [](Renderer&, const Value& d, CallArgs& a) {
         auto p = bind_args("get", a, {"key", "default"});
         if (!p[0]) fault("get expected at least 1 argument, got 0");
         const Value* v = d.dict().find(*p[0]);
         return v != nullptr ? *v : p[1] ? *p[1] : Value(NoneV{});
       }},
      {"items",
       [](Renderer& r, const Value& d, CallArgs& a) {
         bind_args("items", a, {});
         return r.run_filter("items", d, a);
       }},
      {"keys",
       [](Renderer& r, const Value& d, CallArgs& a) {
         bind_args("keys", a, {});
         std::vector<Value> out;
         for (const auto& kv : d.dict().items) out.push_back(kv.first);
         return r.list(std::move(out));
       }},
      {"values",
       [](Renderer& r, const Value& d, CallArgs& a) {
         bind_args("values", a, {});
         std::vector<Value> out;
         for (const auto& kv : d.dict().items) out.push_back(kv.second);
         return r.list(std::move(out));
       }},
      {"copy", [](Renderer&, const Value& d, CallArgs&) { return d; }},
  };
  static const std::unordered_map<std::string, M> list_methods = {
      {"index",
       [](Renderer&, const Value& l, CallArgs& a) {
         auto p = bind_args("index", a, {"value"});
         if (!p[0]) fault("index expected 1 argument, got 0");
         const auto& items = l.list().items;
         for (size_t i = 0; i < items.size(); ++i)
           if (py_equal(items[i], *p[0])) return Value(int64_t(i));
         fault("list.index(x): x not in list");
       }},
      {"count",
       [](Renderer&, const Value& l, CallArgs& a) {
         auto p = bind_args("count", a, {"value"});
         if (!p[0]) fault("count() takes exactly one argument (0 given)");
         return Value(int64_t(std::count_if(l.list().items.begin(), l.list().items.end(),
                                            [&](const Value& x) { return py_equal(x, *p[0]); })));
       }},
      {"copy", [](Renderer&, const Value& l, CallArgs&) { return l; }},
  };
  // What ImmutableSandboxedEnvironment refuses: the methods that change a list or dict.
  static const char* const kMutating[] = {"append",  "extend",     "insert", "pop",
                                          "remove",  "reverse",    "sort",   "clear",
                                          "popitem", "setdefault", "update"};
  const auto& table = self.is_str() ? str_methods : self.is_dict() ? dict_methods : list_methods;
  auto it = table.find(name);
  if (it != table.end()) return bound(self, name, it->second);
  if (!self.is_str())
    for (const char* m : kMutating)
      if (name == m)
        return make_undefined(str_cat("access to attribute '", name, "' of '", type_name(self),
                                      "' object is unsafe."),
                              true);
  return Value(Undef{});
}

// An attribute path of the map / selectattr / sort family: "a.b.0" reads item by item.
Value attribute_of(Renderer& r, const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits =
        !part.empty() && part.size() < 18 &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = r.get_item(cur, digits ? Value(int64_t(std::stoll(part))) : make_str(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// jinja2's sort key: case-insensitive strings unless asked.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_str()) return make_str(map_case(v.str(), py_lower));
  return v;
}

const char* const kFilters[] = {
    "abs",      "attr",   "capitalize", "center",     "count",      "d",           "default",
    "dictsort", "e",      "escape",     "first",      "float",      "forceescape", "indent",
    "int",      "items",  "join",       "last",       "length",     "list",        "lower",
    "map",      "max",    "min",        "reject",     "rejectattr", "replace",     "reverse",
    "round",    "safe",   "select",     "selectattr", "sort",       "string",      "sum",
    "title",    "tojson", "trim",       "unique",     "upper",      "wordcount"};
const char* const kTests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",       "equalto",     "escaped",
    "even",    "false",    "filter",   "float",       "ge",       "greaterthan", "gt",
    "in",      "integer",  "iterable", "le",          "lessthan", "lower",       "lt",
    "mapping", "ne",       "none",     "number",      "odd",      "sameas",      "sequence",
    "string",  "test",     "true",     "undefined",   "upper",    "==",          "!=",
    "<",       "<=",       ">",        ">="};

bool known_filter(const std::string& name) {
  return std::find_if(std::begin(kFilters), std::end(kFilters),
                      [&](const char* f) { return name == f; }) != std::end(kFilters);
}
bool known_test(const std::string& name) {
  return std::find_if(std::begin(kTests), std::end(kTests),
                      [&](const char* f) { return name == f; }) != std::end(kTests);
}

std::string json_ascii(const std::string& s) {
  // ensure_ascii=True: every non-ASCII code point as \uXXXX (surrogate pairs above the BMP).
  std::string out;
  size_t pos = 0;
  char buf[16];
  while (pos < s.size()) {
    const char32_t c = next_code_point(s, pos);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x10000) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", unsigned(c));
      out += buf;
    } else {
      const char32_t v = c - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", unsigned(0xD800 + (v >> 10)),
                    unsigned(0xDC00 + (v & 0x3FF)));
      out += buf;
    }
  }
  return out;
}

Value Renderer::run_filter(const std::string& name, const Value& input, CallArgs& args) {
  auto p = [&](std::initializer_list<const char*> names) { return bind_args(name, args, names); };
  auto str_in = [&]() { return to_str(input); };
  if (name == "tojson") {
    auto a = p({"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonStyle style;
    if (a[1] && !a[1]->none()) {
      if (a[1]->is_str()) {
        style.indent = a[1]->str();
      } else {
        const int64_t n = need_int(*a[1], "tojson indent");
        if (n > 1024) fault(str_cat("tojson indent ", n, " is over the limit of 1024"));
        style.indent = std::string(size_t(std::max<int64_t>(n, 0)), ' ');
      }
      style.item_separator = ",";
    }
    if (a[2] && !a[2]->none()) {
      if (!a[2]->is_list() || a[2]->list().items.size() != 2)
        fault("tojson separators must be a pair of strings");
      style.item_separator = need_str(a[2]->list().items[0], "tojson item separator");
      style.key_separator = need_str(a[2]->list().items[1], "tojson key separator");
    }
    style.sort_keys = a[3] && truthy(*a[3]);
    std::string out;
    json_dump_into(input, style, 0, out);
    if (a[0] && truthy(*a[0])) out = json_ascii(out);
    return text(std::move(out));
  }
  if (name == "trim") {
    auto a = p({"chars"});
    return make_str(py_strip(str_in(), a[0] ? &*a[0] : nullptr, true, true));
  }
  if (name == "length" || name == "count") {
    p({});
    return Value(length(input));
  }
  if (name == "d" || name == "default") {
    auto a = p({"default_value", "boolean"});
    const bool use_default = input.undefined() || (a[1] && truthy(*a[1]) && !truthy(input));
    return use_default ? (a[0] ? *a[0] : make_str("")) : input;
  }
  if (name == "items") {
    p({});
    if (input.undefined()) return list({});
    if (!input.is_dict()) fault("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, v] : input.dict().items) out.push_back(list({k, v}, true));
    return list(std::move(out));
  }
  if (name == "list") {
    p({});
    return list(iterate(input));
  }
  if (name == "first" || name == "last") {
    p({});
    std::vector<Value> items = iterate(input);
    if (items.empty()) return make_undefined(str_cat("No ", name, " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    auto a = p({"d", "attribute"});
    const std::string sep = a[0] ? to_str(*a[0]) : "";
    std::string out;
    bool first = true;
    for (const Value& x : iterate(input)) {
      if (!first) out += sep;
      first = false;
      str_into(a[1] && !a[1]->none() ? attribute_of(*this, x, to_str(*a[1])) : x, out);
      if (out.size() > limits.max_output_bytes) text(std::move(out));
    }
    return text(std::move(out));
  }
  if (name == "upper") return make_str(map_case(str_in(), py_upper));
  if (name == "lower") return make_str(map_case(str_in(), py_lower));
  if (name == "capitalize") return make_str(py_capitalize(str_in()));
  if (name == "title") return make_str(jinja_title(str_in()));
  if (name == "string") return input.is_str() ? input : make_str(str_in());
  if (name == "safe") return input;
  if (name == "e" || name == "escape" || name == "forceescape") return text(html_escape(str_in()));
  if (name == "replace") {
    auto a = p({"old", "new", "count"});
    if (!a[0] || !a[1]) fault("replace() takes at least 2 arguments");
    const std::string s = str_in();
    const std::string old = to_str(*a[0]);
    const std::string repl = to_str(*a[1]);
    int64_t count = a[2] && !a[2]->none() ? need_int(*a[2], "replace count") : -1;
    std::string out;
    if (old.empty()) {
      // Python inserts the replacement around every character.
      const std::vector<char32_t> cps = code_points(s);
      for (size_t i = 0; i <= cps.size(); ++i) {
        if (count != 0) {
          out += repl;
          --count;
        }
        if (i < cps.size()) append_utf8(out, cps[i]);
        if (out.size() > limits.max_output_bytes) text(std::move(out));
      }
      return text(std::move(out));
    }
    size_t pos = 0;
    while (count != 0) {
      const size_t at = s.find(old, pos);
      if (at == std::string::npos) break;
      out.append(s, pos, at - pos);
      out += repl;
      pos = at + old.size();
      --count;
      if (out.size() > limits.max_output_bytes) text(std::move(out));
    }
    out.append(s, pos);
    return text(std::move(out));
  }
  if (name == "reverse") {
    p({});
    if (input.is_str()) {
      std::vector<char32_t> cps = code_points(input.str());
      std::reverse(cps.begin(), cps.end());
      return make_str(from_code_points(cps, 0, cps.size()));
    }
    std::vector<Value> items = iterate(input);
    std::reverse(items.begin(), items.end());
    return list(std::move(items));
  }
  if (name == "abs") {
    p({});
    if (input.is_float()) return Value(std::fabs(input.as_double()));
    if (input.is_int() || input.is_bool()) {
      if (input.as_int() == std::numeric_limits<int64_t>::min()) fault("integer overflow in abs");
      return Value(std::abs(input.as_int()));
    }
    if (input.undefined()) undefined_error(input);
    fault(str_cat("bad operand type for abs(): '", type_name(input), "'"));
  }
  if (name == "int") {
    auto a = p({"default", "base"});
    const Value def = a[0] ? *a[0] : Value(int64_t{0});
    if (input.undefined()) undefined_error(input);
    if (input.is_int() || input.is_bool()) return Value(input.as_int());
    if (input.is_float()) {
      const double d = input.as_double();
      if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
      return Value(int64_t(d));
    }
    if (input.is_str()) {
      const std::string s = py_strip(input.str(), nullptr, true, true);
      const int base = a[1] ? int(need_int(*a[1], "int base")) : 10;
      if (base < 2 || base > 36) fault("int() base must be >= 2 and <= 36");
      std::string digits;
      for (char c : s)
        if (c != '_') digits += c;
      int64_t v = 0;
      const char* b = digits.data();
      if (!digits.empty() && digits[0] == '+') ++b;
      auto res = std::from_chars(b, digits.data() + digits.size(), v, base);
      if (res.ec == std::errc() && res.ptr == digits.data() + digits.size() && !digits.empty())
        return Value(v);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value(int64_t(d));
    }
    return def;
  }
  if (name == "float") {
    auto a = p({"default"});
    const Value def = a[0] ? *a[0] : Value(0.0);
    if (input.undefined()) undefined_error(input);
    if (input.is_number()) return Value(input.as_double());
    if (input.is_str()) {
      const std::string s = py_strip(input.str(), nullptr, true, true);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && s.find_first_of("xX") == std::string::npos)
        return Value(d);
    }
    return def;
  }
  if (name == "round") {
    auto a = p({"precision", "method"});
    const int64_t precision = a[0] ? need_int(*a[0], "round precision") : 0;
    const std::string method = a[1] ? need_str(*a[1], "round method") : "common";
    if (!input.is_number()) {
      if (input.undefined()) undefined_error(input);
      fault(str_cat("round: a number is needed, not ", type_name(input)));
    }
    if (precision < -308 || precision > 308) fault("round precision out of range");
    const double scale = std::pow(10.0, double(precision));
    const double x = input.as_double() * scale;
    double r;
    if (method == "common") {
      r = std::nearbyint(x);  // Python's round: halves to even
      // round() of an int is an int in Python.
      if (!input.is_float() && std::fabs(r / scale) < 9.2e18) return Value(int64_t(r / scale));
    } else if (method == "ceil") {
      r = std::ceil(x);
    } else if (method == "floor") {
      r = std::floor(x);
    } else {
      fault("method must be 'common', 'ceil' or 'floor'");
    }
    return Value(r / scale);
  }
  if (name == "indent") {
    auto a = p({"width", "first", "blank"});
    std::string ind = "    ";
    if (a[0]) {
      if (a[0]->is_str()) {
        ind = a[0]->str();
      } else {
        const int64_t n = need_int(*a[0], "indent width");
        if (n > 1024) fault(str_cat("indent width ", n, " is over the limit of 1024"));
        ind = std::string(size_t(std::max<int64_t>(n, 0)), ' ');
      }
    }
    // jinja2's indent appends to its input, which only a string survives.
    if (input.undefined()) undefined_error(input);
    if (!input.is_str()) fault(str_cat("indent: a string is needed, not ", type_name(input)));
    std::vector<std::string> lines = py_splitlines(input.str() + "\n");
    std::string out;
    if (a[2] && truthy(*a[2])) {
      for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + ind : "") + lines[i];
    } else {
      out = lines.empty() ? "" : lines[0];
      for (size_t i = 1; i < lines.size(); ++i)
        out += "\n" + (lines[i].empty() ? "" : ind) + lines[i];
    }
    if (a[1] && truthy(*a[1])) out = ind + out;
    return text(std::move(out));
  }
  if (name == "center") {
    auto a = p({"width"});
    return make_str(pad(str_in(), a[0] ? need_int(*a[0], "center width") : 80, " ", 0));
  }
  if (name == "wordcount") {
    p({});
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : code_points(str_in())) {
      const bool w = py_isalpha(c) || py_isdigit(c) || c == '_';
      n += w && !in_word;
      in_word = w;
    }
    return Value(n);
  }
  if (name == "attr") {
    auto a = p({"name"});
    return get_attr(input, need_str(a[0] ? *a[0] : Value(NoneV{}), "attr name"));
  }
  if (name == "map" || name == "select" || name == "reject" || name == "selectattr" ||
      name == "rejectattr") {
    std::vector<Value> items = iterate(input);
    std::vector<Value> out;
    if (name == "map") {
      std::optional<Value> attribute, def;
      for (const auto& [k, v] : args.kw) {
        if (k == "attribute") {
          attribute = v;
        } else if (k == "default") {
          def = v;
        } else if (args.pos.empty()) {
          fault(str_cat("map() got an unexpected keyword argument '", k, "'"));
        }
      }
      if (attribute) {
        for (const Value& x : items) {
          Value v = attribute_of(*this, x, to_str(*attribute));
          out.push_back(v.undefined() && def ? *def : v);
        }
        return list(std::move(out));
      }
      if (args.pos.empty()) fault("map requires a filter argument");
      const std::string filter = need_str(args.pos[0], "map filter name");
      if (!known_filter(filter)) fault(str_cat("no filter named '", filter, "'"));
      for (const Value& x : items) {
        CallArgs rest;
        rest.pos.assign(args.pos.begin() + 1, args.pos.end());
        for (const auto& kv : args.kw) rest.kw.push_back(kv);
        out.push_back(run_filter(filter, x, rest));
      }
      return list(std::move(out));
    }
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep = name == "select" || name == "selectattr";
    size_t at = 0;
    std::string attribute;
    if (by_attr) {
      if (args.pos.empty()) fault(str_cat(name, " requires an attribute name"));
      attribute = to_str(args.pos[0]);
      at = 1;
    }
    std::optional<std::string> test;
    if (args.pos.size() > at) test = need_str(args.pos[at], str_cat(name, " test name"));
    if (test && !known_test(*test)) fault(str_cat("no test named '", *test, "'"));
    for (const Value& x : items) {
      const Value v = by_attr ? attribute_of(*this, x, attribute) : x;
      bool ok;
      if (test) {
        CallArgs rest;
        if (args.pos.size() > at + 1)
          rest.pos.assign(args.pos.begin() + long(at) + 1, args.pos.end());
        ok = run_test(*test, v, rest);
      } else {
        ok = truthy(v);
      }
      if (ok == keep) out.push_back(x);
    }
    return list(std::move(out));
  }
  if (name == "sort" || name == "unique" || name == "max" || name == "min" || name == "dictsort") {
    const bool dictsort = name == "dictsort";
    auto a = name == "sort" ? p({"reverse", "case_sensitive", "attribute"})
             : dictsort     ? p({"case_sensitive", "by", "reverse"})
                            : p({"case_sensitive", "attribute"});
    const bool reverse = name == "sort" ? a[0] && truthy(*a[0]) : dictsort && a[2] && truthy(*a[2]);
    const bool case_sensitive = name == "sort" ? a[1] && truthy(*a[1]) : a[0] && truthy(*a[0]);
    std::optional<std::string> attribute;
    if (!dictsort) {
      const auto& attr_arg = name == "sort" ? a[2] : a[1];
      if (attr_arg && !attr_arg->none()) attribute = to_str(*attr_arg);
    }
    std::vector<Value> items;
    size_t key_index = 0;
    if (dictsort) {
      if (!input.is_dict()) fault("dictsort: a dict is needed");
      for (const auto& [k, v] : input.dict().items) items.push_back(list({k, v}, true));
      const std::string by = a[1] ? need_str(*a[1], "dictsort by") : "key";
      if (by != "key" && by != "value") fault("You can only sort by either 'key' or 'value'");
      key_index = by == "key" ? 0 : 1;
    } else {
      items = iterate(input);
    }
    auto key = [&](const Value& x) {
      Value k = dictsort    ? x.list().items[key_index]
                : attribute ? attribute_of(*this, x, *attribute)
                            : x;
      return sort_key(k, case_sensitive);
    };
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value& x : items) keyed.emplace_back(key(x), x);
    if (name == "unique") {
      std::vector<Value> out;
      std::vector<Value> seen;
      for (const auto& [key_value, x] : keyed) {
        const Value& k = key_value;
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, k); }))
          continue;
        seen.push_back(k);
        out.push_back(x);
      }
      return list(std::move(out));
    }
    if (name == "max" || name == "min") {
      if (keyed.empty()) return make_undefined(str_cat("No aggregated item, sequence was empty."));
      size_t best = 0;
      for (size_t i = 1; i < keyed.size(); ++i) {
        const int c = compare_order(keyed[i].first, keyed[best].first, "<");
        if (name == "max" ? c > 0 : c < 0) best = i;
      }
      return keyed[best].second;
    }
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return reverse ? compare_order(y.first, x.first, "<") < 0
                     : compare_order(x.first, y.first, "<") < 0;
    });
    std::vector<Value> out;
    for (auto& kv : keyed) out.push_back(std::move(kv.second));
    return list(std::move(out));
  }
  if (name == "sum") {
    auto a = p({"attribute", "start"});
    Value total = a[1] ? *a[1] : Value(int64_t{0});
    for (const Value& x : iterate(input))
      total = binary("+", total, a[0] && !a[0]->none() ? attribute_of(*this, x, to_str(*a[0])) : x);
    return total;
  }
  fault(str_cat("no filter named '", name, "'"));
}

bool Renderer::run_test(const std::string& name, const Value& v, CallArgs& args) {
  auto arg = [&]() -> const Value& {
    if (args.pos.empty()) fault(str_cat("the test '", name, "' needs an argument"));
    return args.pos[0];
  };
  if (name == "defined") return !v.undefined();
  if (name == "undefined") return v.undefined();
  if (name == "none") return v.none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !std::get<bool>(v.v);
  if (name == "true") return v.is_bool() && std::get<bool>(v.v);
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_str();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable")
    return v.is_str() || v.is_list() || v.is_dict() || v.undefined() || v.is_loop();
  if (name == "sequence") return v.is_str() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_fn();
  if (name == "escaped") return false;
  if (name == "sameas") {
    const Value& o = arg();
    if (v.is_bool() || v.none() || o.is_bool() || o.none())
      return v.v.index() == o.v.index() && py_equal(v, o);
    if (v.is_list() && o.is_list()) return &v.list() == &o.list();
    if (v.is_dict() && o.is_dict()) return &v.dict() == &o.dict();
    return v.v.index() == o.v.index() && py_equal(v, o);
  }
  if (name == "in") return contains(arg(), v);
  if (name == "eq" || name == "equalto" || name == "==") return py_equal(v, arg());
  if (name == "ne" || name == "!=") return !py_equal(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return compare_order(v, arg(), "<") < 0;
  if (name == "le" || name == "<=") return compare_order(v, arg(), "<=") <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_order(v, arg(), ">") > 0;
  if (name == "ge" || name == ">=") return compare_order(v, arg(), ">=") >= 0;
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (v.undefined()) undefined_error(v);
    if (!v.is_int() && !v.is_bool())
      fault(str_cat("the test '", name, "' needs an integer, not ", type_name(v)));
    const int64_t n = name == "divisibleby" ? need_int(arg(), "divisibleby argument") : 2;
    if (n == 0) fault("integer division or modulo by zero");
    const int64_t m = n == -1 ? 0 : v.as_int() % n;
    return name == "odd" ? m != 0 : m == 0;
  }
  if (name == "lower" || name == "upper") {
    const std::string s = to_str(v);
    bool cased = false;
    for (char32_t c : code_points(s)) {
      if (name == "lower" ? py_is_cased_upper(c) : py_is_cased_lower(c)) return false;
      cased = cased || py_is_cased_upper(c) || py_is_cased_lower(c);
    }
    return cased;
  }
  if (name == "filter") return v.is_str() && known_filter(v.str());
  if (name == "test") return v.is_str() && known_test(v.str());
  fault(str_cat("no test named '", name, "'"));
}

// ---------------------------------------------------------------------------------------------
// Globals: what transformers puts in the environment and jinja2's own.

Value make_fn(std::string name, std::function<Value(Renderer&, CallArgs&, int)> f) {
  auto fn = std::make_shared<FunctionObj>();
  fn->name = std::move(name);
  fn->call = std::move(f);
  return Value(fn);
}

// dict(...) and namespace(...) take Python's dict() arguments: a mapping or pairs, then keywords.
std::vector<std::pair<Value, Value>> dict_arguments(Renderer& r, const std::string& fname,
                                                    CallArgs& a) {
  if (a.pos.size() > 1) fault(str_cat(fname, " expected at most 1 argument, got ", a.pos.size()));
  std::vector<std::pair<Value, Value>> items;
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      items = src.dict().items;
    } else {
      for (const Value& pair : r.iterate(src)) {
        std::vector<Value> kv = r.iterate(pair);
        if (kv.size() != 2)
          fault(str_cat(fname, ": a sequence element has length ", kv.size(), "; 2 is required"));
        items.emplace_back(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kw) items.emplace_back(make_str(k), v);
  return items;
}

std::unordered_map<std::string, Value> make_builtins() {
  std::unordered_map<std::string, Value> g;
  g["range"] = make_fn("range", [](Renderer& r, CallArgs& a, int) {
    if (!a.kw.empty()) fault("range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3)
      fault(str_cat("range expected 1 to 3 arguments, got ", a.pos.size()));
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = need_int(a.pos[0], "range() argument");
    } else {
      start = need_int(a.pos[0], "range() argument");
      stop = need_int(a.pos[1], "range() argument");
      if (a.pos.size() == 3) step = need_int(a.pos[2], "range() argument");
    }
    if (step == 0) fault("range() arg 3 must not be zero");
    const long double n =
        step > 0
            ? std::ceil((static_cast<long double>(stop) - start) / step)
            : std::ceil((static_cast<long double>(start) - stop) / -static_cast<long double>(step));
    // jinja2's sandbox refuses ranges over MAX_RANGE items.
    if (n > 100000)
      fault("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    std::vector<Value> out;
    for (int64_t i = 0; i < int64_t(std::max<long double>(n, 0)); ++i)
      out.push_back(Value(start + i * step));
    return r.list(std::move(out));
  });
  g["dict"] = make_fn(
      "dict", [](Renderer& r, CallArgs& a, int) { return r.dict(dict_arguments(r, "dict", a)); });
  g["namespace"] = make_fn("namespace", [](Renderer& r, CallArgs& a, int) {
    auto ns = std::make_shared<NamespaceObj>();
    for (auto& [k, v] : dict_arguments(r, "namespace", a)) {
      if (!k.is_str()) fault("namespace attribute names must be strings");
      r.set_namespace_attr(*ns, k.str(), v);
    }
    return Value(ns);
  });
  g["raise_exception"] = make_fn("raise_exception", [](Renderer&, CallArgs& a, int) -> Value {
    auto p = bind_args("raise_exception", a, {"message"});
    if (!p[0]) fault("raise_exception() missing 1 required positional argument: 'message'");
    throw Raised{to_str(*p[0])};
  });
  g["strftime_now"] = make_fn("strftime_now", [](Renderer&, CallArgs& a, int) {
    auto p = bind_args("strftime_now", a, {"format"});
    const std::string& format = need_str(p[0] ? *p[0] : Value(NoneV{}), "strftime_now format");
    if (format.size() > 256)
      fault(str_cat("strftime_now format of ", format.size(), " bytes is over the limit of 256"));
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::string out(4096, '\0');
    const size_t n =
        format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &local);
    out.resize(n);
    return make_str(std::move(out));
  });
  return g;
}

// Line ends become "\n" and one final newline is dropped, as jinja2's lexer does before lexing.
std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ChatTemplate.

struct ChatTemplate::Impl {
  std::string source;
  std::string origin;
  ChatTemplateLimits limits;
  Body body;
};

ChatTemplate::ChatTemplate(std::string source, std::string origin, ChatTemplateLimits limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->source = std::move(source);
  impl_->origin = std::move(origin);
  impl_->limits = limits;
  if (!is_utf8(impl_->source))
    throw ChatTemplateError(impl_->origin, 1, 0, "the template is not valid UTF-8");
  if (impl_->source.size() > limits.max_output_bytes)
    throw ChatTemplateError(impl_->origin, 1, 0,
                            str_cat("the template's ", impl_->source.size(),
                                    " bytes are over the limit of ", limits.max_output_bytes));
  const std::string text = normalize_newlines(impl_->source);
  Lexer lexer(text, impl_->origin);
  Parser parser(lexer.run(), impl_->origin, impl_->limits);
  impl_->body = parser.parse_template();
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

const std::string& ChatTemplate::origin() const { return impl_->origin; }
const std::string& ChatTemplate::source() const { return impl_->source; }

ChatTemplateRendering ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object())
    throw ValueError(str_cat(impl_->origin, ": the template's variables must be a JSON object"));
  Renderer r(impl_->limits, impl_->origin);
  r.builtins = make_builtins();
  auto context = std::make_shared<Scope>();
  for (const auto& [k, v] : variables.items())
    context->vars[k] = from_json(v, 0, impl_->limits.max_value_depth);
  auto top = std::make_shared<Scope>();
  top->parent = context;
  try {
    r.exec(impl_->body, top);
  } catch (const Fault& f) {
    throw ChatTemplateError(impl_->origin, r.line, 0, f.what);
  } catch (const Raised& raised) {
    throw ChatTemplateRaised(impl_->origin, r.line, raised.message);
  }
  return {std::move(r.root), std::move(r.spans)};
}

ChatTemplateRendering apply_chat_template(const ChatTemplate& chat_template,
                                          const ChatTemplateInputs& inputs) {
  const std::string& origin = chat_template.origin();
  if (!inputs.messages.is_array())
    throw ValueError(
        str_cat(origin, ": messages must be a list of objects, not ", inputs.messages.type_name()));
  if (inputs.messages.empty())
    throw ValueError(str_cat(origin, ": cannot apply a chat template to an empty conversation"));
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < inputs.messages.size(); ++i) {
    const auto& m = inputs.messages[i];
    if (!m.is_object())
      throw ValueError(
          str_cat(origin, ": messages[", i, "] must be an object, not ", m.type_name()));
    // transformers 5 drops keys holding null (templates test for presence).
    nlohmann::ordered_json kept = nlohmann::ordered_json::object();
    for (const auto& [k, v] : m.items())
      if (!v.is_null()) kept[k] = v;
    // ... and passes a reasoning field as both "thinking" (first) and "reasoning_content".
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"})
      if (kept.contains(key)) {
        reasoning = &kept[key];
        break;
      }
    if (reasoning != nullptr) {
      nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
      aliased["thinking"] = *reasoning;
      for (const auto& [k, v] : kept.items()) aliased[k] = v;
      aliased["reasoning_content"] = *reasoning;
      kept = std::move(aliased);
    }
    messages.push_back(std::move(kept));
  }
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = std::move(messages);
  vars["tools"] = inputs.tools;
  vars["documents"] = inputs.documents;
  vars["add_generation_prompt"] = inputs.add_generation_prompt;
  for (const auto& [k, v] : inputs.special_tokens.items()) vars[k] = v;
  for (const auto& [k, v] : inputs.kwargs.items()) vars[k] = v;
  return chat_template.render(vars);
}

// ---------------------------------------------------------------------------------------------
// Loading.

ChatTemplateSource load_chat_template(const std::string& model_dir,
                                      const std::optional<std::string>& name, bool has_tools,
                                      const std::optional<std::string>& override_path) {
  namespace fs = std::filesystem;
  if (override_path) return {read_text_file(*override_path), *override_path};
  // Template files win over tokenizer_config.json: chat_template.jinja is "default" and
  // additional_chat_templates/<name>.jinja the others (transformers' from_pretrained).
  std::map<std::string, ChatTemplateSource> named;
  const fs::path dir(model_dir);
  std::error_code ec;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    const std::string path = (dir / "chat_template.jinja").string();
    named["default"] = {read_text_file(path), path};
  }
  if (fs::is_directory(dir / "additional_chat_templates", ec)) {
    for (const auto& entry : fs::directory_iterator(dir / "additional_chat_templates", ec)) {
      if (entry.path().extension() != ".jinja" || !entry.is_regular_file()) continue;
      named[entry.path().stem().string()] = {read_text_file(entry.path().string()),
                                             entry.path().string()};
    }
  }
  std::string source_file = (dir / "chat_template.jinja").string();
  bool single = named.size() == 1 && named.count("default") == 1;
  if (named.empty()) {
    source_file = (dir / "tokenizer_config.json").string();
    if (!fs::is_regular_file(source_file, ec))
      throw ValueError(str_cat(
          model_dir, ": no chat template (neither chat_template.jinja nor tokenizer_config.json)"));
    const nlohmann::json config = parse_json(read_text_file(source_file), source_file);
    if (!config.is_object() || !config.contains("chat_template") ||
        config["chat_template"].is_null())
      throw ValueError(
          str_cat(source_file, ": no \"chat_template\" (and no chat_template.jinja beside it)"));
    const nlohmann::json& t = config["chat_template"];
    if (t.is_string()) {
      named["default"] = {t.get<std::string>(), source_file};
      single = true;
    } else if (t.is_array()) {
      for (size_t i = 0; i < t.size(); ++i) {
        const auto& entry = t[i];
        if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
            !entry.contains("template") || !entry["template"].is_string())
          throw ValueError(
              str_cat(source_file, ": chat_template[", i,
                      "] must be an object with string \"name\" and \"template\", got ",
                      describe_json(entry)));
        const std::string n = entry["name"].get<std::string>();
        named[n] = {entry["template"].get<std::string>(),
                    str_cat(source_file, ":chat_template[", n, "]")};
      }
    } else {
      throw ValueError(str_cat(
          source_file,
          ": \"chat_template\" must be a string or a list of {\"name\", \"template\"}, got ",
          describe_json(t)));
    }
  }
  std::string names;
  for (const auto& [n, s] : named) names += str_cat(names.empty() ? "" : ", ", "'", n, "'");
  if (name) {
    auto it = named.find(*name);
    if (it == named.end())
      throw ValueError(str_cat(source_file, ": no chat template named '", *name,
                               "'; the templates are ", names));
    return it->second;
  }
  if (single) return named.begin()->second;
  if (has_tools && named.count("tool_use")) return named["tool_use"];
  if (named.count("default")) return named["default"];
  throw ValueError(str_cat(source_file, ": several chat templates and none named 'default' (",
                           names, "); pass the name of one"));
}

nlohmann::ordered_json read_special_tokens(const std::string& model_dir) {
  namespace fs = std::filesystem;
  static const char* const kNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                       "pad_token", "cls_token", "mask_token"};
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  std::map<std::string, std::string> found;
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string path = (fs::path(model_dir) / file).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    const nlohmann::json j = parse_json(read_text_file(path), path);
    if (!j.is_object())
      throw ValueError(str_cat(path, ": must be a JSON object, got ", describe_json(j)));
    for (const char* key : kNames) {
      if (found.count(key) || !j.contains(key) || j[key].is_null()) continue;
      const nlohmann::json& v = j[key];
      if (v.is_string()) {
        found[key] = v.get<std::string>();
      } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
        found[key] = v["content"].get<std::string>();
      } else {
        throw ValueError(str_cat(path, ": \"", key,
                                 "\" must be a string or an object with a string \"content\", got ",
                                 describe_json(v)));
      }
    }
  }
  for (const char* key : kNames)
    if (found.count(key)) out[key] = found[key];
  return out;
}

}  // namespace headroom
