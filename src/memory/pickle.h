// PickleValue, a small tree of Python values, and pickle_dumps, which writes it in the part of the
// pickle format that PyTorch's memory_viz page can read, so memory snapshots open there as-is.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace headroom {

// A Python value: None, bool, int, float, str, list, tuple, or dict with str keys (kept in
// insertion order, as Python's dict is). Integers span int64 and uint64 (device addresses);
// Int and UInt are two kinds only so that no value is lost, and compare by number.
//
//   PickleValue seg = PickleValue::dict({{"address", addr}, {"total_size", n},
//                                        {"segment_type", "large"},
//                                        {"blocks", PickleValue::list()}});
//   seg.at("blocks").append(PickleValue::dict({{"size", 512}, {"state", "active_allocated"}}));
class PickleValue {
 public:
  enum class Kind { None, Bool, Int, UInt, Float, String, List, Tuple, Dict };
  using List = std::vector<PickleValue>;
  using Item = std::pair<std::string, PickleValue>;
  using Dict = std::vector<Item>;

  PickleValue() = default;  // None
  PickleValue(std::nullptr_t) {}
  PickleValue(bool value) : value_(value) {}
  template <std::integral T>
  requires(!std::same_as<T, bool>) PickleValue(T value) {
    if constexpr (std::is_signed_v<T>) {
      value_ = static_cast<int64_t>(value);
    } else {
      value_ = static_cast<uint64_t>(value);
    }
  }
  PickleValue(double value) : value_(value) {}
  PickleValue(const char* value) : value_(std::string(value)) {}
  PickleValue(std::string value) : value_(std::move(value)) {}
  PickleValue(std::string_view value) : value_(std::string(value)) {}

  static PickleValue list(std::initializer_list<PickleValue> items = {});
  static PickleValue list(List items);
  // Python tuples load as arrays in MemoryViz too; used where PyTorch's snapshot has a tuple
  // (segment_pool_id), so that Python readers see the same types.
  static PickleValue tuple(std::initializer_list<PickleValue> items = {});
  static PickleValue tuple(List items);
  // A repeated key keeps its first position and takes the last value, as a Python dict literal.
  static PickleValue dict(std::initializer_list<Item> items = {});
  static PickleValue dict(Dict items);

  Kind kind() const { return static_cast<Kind>(value_.index()); }
  bool is_none() const { return kind() == Kind::None; }
  bool is_integer() const { return kind() == Kind::Int || kind() == Kind::UInt; }

  // Accessors throw ValueError when the value is of another kind (or, for integers, out of
  // the requested type's range).
  bool as_bool() const;
  int64_t as_int64() const;
  uint64_t as_uint64() const;
  double as_double() const;
  const std::string& as_string() const;
  const List& as_list() const;  // List or Tuple
  List& as_list();
  const Dict& as_dict() const;
  Dict& as_dict();

  // Appends to a List (or Tuple) and returns the new element; references into the list are
  // invalidated by the next append, as with std::vector.
  PickleValue& append(PickleValue value);
  // Sets a Dict entry (replacing the value of an existing key in place) and returns it.
  // Looks keys up linearly: snapshot dicts hold a dozen keys.
  PickleValue& set(std::string_view key, PickleValue value);
  const PickleValue* find(std::string_view key) const;
  PickleValue* find(std::string_view key);
  const PickleValue& at(std::string_view key) const;  // IndexError when absent
  PickleValue& at(std::string_view key);
  const PickleValue& at(size_t index) const;  // List or Tuple element
  PickleValue& at(size_t index);
  size_t size() const;  // elements of a List/Tuple, entries of a Dict

  // Structural equality; integers compare by value across Int and UInt, floats with == (so a
  // NaN is unequal to itself, as in Python).
  friend bool operator==(const PickleValue& a, const PickleValue& b);

 private:
  struct TupleTag {
    List items;
  };
  std::variant<std::monostate, bool, int64_t, uint64_t, double, std::string, List, TupleTag, Dict>
      value_;
};

const char* pickle_kind_name(PickleValue::Kind kind);

// Serializes `value` as a protocol-4 pickle that both Python's pickle.load and MemoryViz.js's
// own unpickler read. See Note [Pickle subset for MemoryViz] in pickle.cpp for the opcodes used.
// Throws ValueError for a string that is not valid UTF-8 or is 4 GiB or longer.
std::string pickle_dumps(const PickleValue& value);

}  // namespace headroom
