// MemoryVizDecoder: a pickle reader with exactly the opcodes of PyTorch's MemoryViz.js, for
// tests that check a memory snapshot (memory/memory_snapshot.h) opens in memory_viz.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "memory/pickle.h"

namespace headroom::memory_test {

// Decodes a pickle the way MemoryViz.js's unpickler does, with the same opcode set, failing the
// test on any other opcode, and rebuilds a PickleValue. Also checks the limits we promise beyond
// what MemoryViz.js enforces: no APPENDS/SETITEMS batch over 1000 items, no LONG1 over 9 bytes.
class MemoryVizDecoder {
 public:
  explicit MemoryVizDecoder(std::string bytes) : in_(std::move(bytes)) {}

  PickleValue decode() {
    const uint8_t first = byte();
    if (first != 0x80) throw Error(str_cat("pickle does not start with PROTO: ", int{first}));
    const uint8_t version = byte();
    if (version < 2 || version > 4) throw Error(str_cat("Unhandled version ", int{version}));
    while (true) {
      const size_t at = pos_;
      const uint8_t opcode = byte();
      switch (opcode) {
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty()) throw Error("STOP with a malformed stack");
          if (pos_ != in_.size()) throw Error("bytes after STOP");
          return std::move(stack_.back());
        case '(':
          marks_.push_back(stack_.size());
          break;
        case 'N':
          stack_.emplace_back();
          break;
        case 0x88:
          stack_.emplace_back(true);
          break;
        case 0x89:
          stack_.emplace_back(false);
          break;
        case 'K':
          stack_.emplace_back(int64_t{byte()});
          break;
        case 'M':
          stack_.emplace_back(static_cast<int64_t>(uint_le(2)));
          break;
        case 'J':
          stack_.emplace_back(int64_t{static_cast<int32_t>(uint_le(4))});
          break;
        case 0x8a:
          stack_.push_back(long1(at));
          break;
        case 'G': {
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = (bits << 8) | byte();
          stack_.emplace_back(std::bit_cast<double>(bits));
          break;
        }
        case 0x8c:
          stack_.emplace_back(take(byte()));
          break;
        case 'X':
          stack_.emplace_back(take(uint_le(4)));
          break;
        case ']':
          stack_.push_back(PickleValue::list());
          break;
        case '}':
          stack_.push_back(PickleValue::dict());
          break;
        case ')':
          stack_.push_back(PickleValue::tuple());
          break;
        case 0x85:
        case 0x86:
        case 0x87: {
          const size_t n = opcode - 0x84;
          need(n, at);
          PickleValue::List items(std::make_move_iterator(stack_.end() - n),
                                  std::make_move_iterator(stack_.end()));
          stack_.resize(stack_.size() - n);
          stack_.push_back(PickleValue::tuple(std::move(items)));
          break;
        }
        case 't':
        case 'l': {
          PickleValue::List items = pop_to_mark(at);
          stack_.push_back(opcode == 't' ? PickleValue::tuple(std::move(items))
                                         : PickleValue::list(std::move(items)));
          break;
        }
        case 'a': {
          need(2, at);
          PickleValue v = std::move(stack_.back());
          stack_.pop_back();
          stack_.back().append(std::move(v));
          break;
        }
        case 'e': {
          PickleValue::List items = pop_to_mark(at);
          batch_limit(items.size(), at);
          need(1, at);
          for (PickleValue& v : items) stack_.back().append(std::move(v));
          break;
        }
        case 'd': {
          PickleValue::List items = pop_to_mark(at);
          stack_.push_back(PickleValue::dict());
          set_items(std::move(items), at);
          break;
        }
        case 's': {
          need(3, at);
          PickleValue::List items(std::make_move_iterator(stack_.end() - 2),
                                  std::make_move_iterator(stack_.end()));
          stack_.resize(stack_.size() - 2);
          set_items(std::move(items), at);
          break;
        }
        case 'u': {
          PickleValue::List items = pop_to_mark(at);
          batch_limit(items.size() / 2, at);
          need(1, at);
          set_items(std::move(items), at);
          break;
        }
        case 0x94:
          memo_.push_back(top(at));
          break;  // MEMOIZE
        case 'q':
          memo_put(byte(), at);
          break;  // BINPUT
        case 'r':
          memo_put(uint_le(4), at);
          break;  // LONG_BINPUT
        case 'h':
          stack_.push_back(memo_get(byte(), at));
          break;
        case 'j':
          stack_.push_back(memo_get(uint_le(4), at));
          break;
        case 0x95:
          uint_le(8);
          break;  // FRAME: MemoryViz skips its length
        default:
          char name[8];
          std::snprintf(name, sizeof name, "0x%02x", opcode);
          throw Error(str_cat("opcode ", name, " at byte ", at, " is not one MemoryViz.js reads"));
      }
      ++opcode_counts_[opcode];
    }
  }

  int count(uint8_t opcode) const { return opcode_counts_[opcode]; }
  size_t longest_long1() const { return longest_long1_; }

 private:
  uint8_t byte() {
    if (pos_ >= in_.size()) throw Error("pickle truncated");
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint64_t uint_le(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{byte()} << (8 * i);
    return v;
  }
  std::string take(size_t n) {
    if (in_.size() - pos_ < n) throw Error("string runs past the end");
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  PickleValue long1(size_t at) {
    const size_t n = byte();
    longest_long1_ = std::max(longest_long1_, n);
    if (n > 9) throw Error(str_cat("LONG1 of ", n, " bytes at ", at));
    const std::string b = take(n);
    if (n == 9) {
      if (b[8] != 0) throw Error("9-byte LONG1 outside uint64");
      uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(b[i])} << (8 * i);
      return PickleValue(v);
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(b[i])} << (8 * i);
    if (n > 0 && n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80)) v |= ~uint64_t{0} << (8 * n);
    return PickleValue(static_cast<int64_t>(v));
  }
  void need(size_t n, size_t at) {
    const size_t base = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < base + n) throw Error(str_cat("stack underflow at byte ", at));
  }
  const PickleValue& top(size_t at) {
    if (stack_.empty()) throw Error(str_cat("memo of an empty stack at byte ", at));
    return stack_.back();
  }
  PickleValue::List pop_to_mark(size_t at) {
    if (marks_.empty()) throw Error(str_cat("no MARK for the opcode at byte ", at));
    const size_t mark = marks_.back();
    marks_.pop_back();
    PickleValue::List items(std::make_move_iterator(stack_.begin() + mark),
                            std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }
  void set_items(PickleValue::List items, size_t at) {
    if (items.size() % 2 != 0) throw Error(str_cat("odd key/value count at byte ", at));
    for (size_t i = 0; i < items.size(); i += 2) {
      stack_.back().set(items[i].as_string(), std::move(items[i + 1]));
    }
  }
  void batch_limit(size_t n, size_t at) {
    if (n > 1000) throw Error(str_cat("batch of ", n, " items at byte ", at));
  }
  void memo_put(size_t index, size_t at) {
    if (memo_.size() <= index) memo_.resize(index + 1);
    memo_[index] = top(at);
  }
  PickleValue memo_get(size_t index, size_t at) {
    if (index >= memo_.size()) throw Error(str_cat("memo ", index, " unset at byte ", at));
    return memo_[index];
  }

  std::string in_;
  size_t pos_ = 0;
  std::vector<PickleValue> stack_;
  std::vector<size_t> marks_;
  std::vector<PickleValue> memo_;
  int opcode_counts_[256] = {};
  size_t longest_long1_ = 0;
};

}  // namespace headroom::memory_test
