// Per-row power-of-two scales for fp16 storage (AttnRes's mixed bf16 + fp16 policy). fp16 has 11
// bits of precision but a range that ends at 65504; rows of hidden states routinely exceed it (and
// bf16 holds them easily). A row x is stored as fp16 values round(x / s) with one fp32 scale s per
// row, a power of two, so that dividing and multiplying by s is exact and the row's largest
// magnitude lands in (2^14, 2^15]: no overflow, and fp16's full relative precision for the row.
// Decoding is stored * s, exact in fp32.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace fc {

// The scale for a row whose largest magnitude is `row_max_abs`: 2^(e - 15) with row_max_abs <= 2^e
// (frexp's exponent), clamped to fp32's normal exponents. 1 for a zero or non-finite row maximum
// (a non-finite entry stays non-finite after scaling, and the subject's error report sees it).
inline float fp16_row_scale(double row_max_abs) {
  if (!(row_max_abs > 0) || !std::isfinite(row_max_abs)) return 1.0f;
  int e = 0;
  std::frexp(row_max_abs, &e);  // row_max_abs = m 2^e, m in [0.5, 1)
  int k = e - 15;
  if (k < -126) k = -126;
  if (k > 127) k = 127;
  return std::ldexp(1.0f, k);
}

// The scale of a row given by its entries: from the largest finite magnitude among them.
template <class X>
float fp16_row_scale_of(const X* row, std::size_t n) {
  double row_max = 0;
  for (std::size_t c = 0; c < n; ++c) {
    const double x = std::fabs(static_cast<double>(row[c]));
    if (std::isfinite(x) && x > row_max) row_max = x;
  }
  return fp16_row_scale(row_max);
}

}  // namespace fc
