// NFC over the generated tables: binary searches for combining classes, decompositions and
// compositions, and the Hangul syllables computed as UAX #15 does.
#include "io/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "io/unicode_classes.h"

namespace headroom {
namespace {

struct CombiningClassRange {
  char32_t first, last;
  uint8_t combining_class;
};
struct Decomposition {
  char32_t code_point, first, second;
};
struct Composition {
  char32_t first, second, composite;
};

#include "io/unicode_nfc_table.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

int combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCombiningClasses);
  const auto* it =
      std::upper_bound(std::begin(kCombiningClasses), end, cp,
                       [](char32_t c, const CombiningClassRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClasses)) return 0;
  --it;
  return cp <= it->last ? it->combining_class : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const auto* it =
        std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                         [](const Decomposition& d, char32_t c) { return d.code_point < c; });
    if (it != std::end(kDecompositions) && it->code_point == cp) {
      decompose(it->first, out);
      if (it->second != 0) decompose(it->second, out);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of a pair, or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* it = std::lower_bound(
      std::begin(kCompositions), std::end(kCompositions), std::pair(a, b),
      [](const Composition& c, auto key) { return std::pair(c.first, c.second) < key; });
  if (it != std::end(kCompositions) && it->first == a && it->second == b) return it->composite;
  return 0;
}

// NFC of one run of valid characters, appended to `out`.
void nfc_run(std::vector<char32_t>& chars, std::string& out) {
  std::vector<char32_t> d;
  d.reserve(chars.size() + 4);
  for (const char32_t cp : chars) decompose(cp, d);
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(
        d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
        [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition (UAX #15): a character joins the last starter unless a character
  // between them is blocking (its class 0, or not lower than its own).
  size_t starter = 0, kept = 0;
  bool have_starter = false;
  int last_class = -1;
  for (size_t i = 0; i < d.size(); ++i) {
    const char32_t ch = d[i];
    const int cls = combining_class(ch);
    if (have_starter && (last_class < cls || last_class == 0)) {
      if (const char32_t composite = compose(d[starter], ch); composite != 0) {
        d[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = kept;
      have_starter = true;
    }
    last_class = cls;
    d[kept++] = ch;
  }
  for (size_t i = 0; i < kept; ++i) append_utf8(out, d[i]);
  chars.clear();
}

}  // namespace

std::string nfc(std::string_view text) {
  // Most text is ASCII, which NFC leaves as it is.
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; })) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size());
  std::vector<char32_t> run;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    if (c.code_point == kInvalidCodePoint) {
      nfc_run(run, out);
      out += text[pos];
    } else {
      run.push_back(c.code_point);
    }
    pos += c.length;
  }
  nfc_run(run, out);
  return out;
}

}  // namespace headroom
