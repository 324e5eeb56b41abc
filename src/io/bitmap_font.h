// A 5x7 bitmap font for printable ASCII (32..126), so plots can carry text without a font
// library: capitals and digits are 5x7, g j p q y descend into an 8th row, and each glyph
// advances 6 columns.
#pragma once

#include <cstdint>

namespace headroom {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 8;  // 7 rows down to the baseline, 1 for descenders
inline constexpr int kGlyphAdvance = 6;  // glyph width plus one column of spacing

// Row `row` (0 = top) of the glyph of `c`: bit 4 is the leftmost pixel. Characters outside
// 32..126 draw as '?'.
uint8_t glyph_row(char c, int row);

}  // namespace headroom
