// Number formats flashcheck reasons about, described by their IEEE-style parameters.
//
// Every tolerance in the project is stated in units of a format's unit roundoff u = 2^-p or in ULPs
// of a format; this header is where those units come from.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fc {

// e4m3: FP8 E4M3 (OCP E4M3FN, Hopper's FP8 operand format; precision/fp8.hpp): no infinities, the
// largest finite value 448.
enum class Format : std::uint8_t { fp64, fp32, fp16, bf16, e4m3 };

inline constexpr std::array<Format, 5> kAllFormats = {Format::fp64, Format::fp32, Format::fp16,
                                                      Format::bf16, Format::e4m3};

// A binary floating-point format with an implicit leading bit: precision p counts that bit, so the
// stored mantissa has p - 1 bits; normal numbers are m * 2^e with 1 <= m < 2 and emin <= e <= emax.
struct FormatInfo {
  std::string_view name;
  int bits;       // storage width
  int precision;  // p, significand bits including the implicit one
  int emin;
  int emax;

  // u = 2^-p: the bound on the relative error of round-to-nearest in the normal range.
  double unit_roundoff() const;
  // 2^(1-p): the spacing of the format just above 1.
  double machine_epsilon() const;
  double max_finite() const;     // (2 - 2^(1-p)) * 2^emax; e4m3: 448 (its top pattern is NaN)
  double min_normal() const;     // 2^emin
  double min_subnormal() const;  // 2^(emin - p + 1)
};

constexpr FormatInfo format_info(Format f) {
  switch (f) {
    case Format::fp64: return {"fp64", 64, 53, -1022, 1023};
    case Format::fp32: return {"fp32", 32, 24, -126, 127};
    case Format::fp16: return {"fp16", 16, 11, -14, 15};
    case Format::bf16: return {"bf16", 16, 8, -126, 127};
    case Format::e4m3: return {"e4m3", 8, 4, -6, 8};
  }
  return {"?", 0, 0, 0, 0};
}

constexpr std::string_view name(Format f) { return format_info(f).name; }

// Accepts the canonical names (fp64, fp32, fp16, bf16, e4m3) and the common aliases (double, float64,
// float, float32, half, float16, bfloat16, fp8, float8_e4m3fn).
std::optional<Format> parse_format(std::string_view text);

inline double unit_roundoff(Format f) { return format_info(f).unit_roundoff(); }

// The spacing of format f's values at x: 2^(max(floor(log2|x|), emin) - p + 1). At x = 0 it is the
// subnormal spacing. Above the largest binade the spacing keeps growing as if the exponent range
// were unbounded, so an overflowed value still gets a finite, meaningful ULP distance. NaN for
// non-finite x.
double ulp(Format f, double x);

// The format a C++ storage type holds (specialised for bf16/fp16 in half.hpp).
template <class T>
struct FormatOf;
template <>
struct FormatOf<double> {
  static constexpr Format value = Format::fp64;
};
template <>
struct FormatOf<float> {
  static constexpr Format value = Format::fp32;
};
template <class T>
inline constexpr Format format_of_v = FormatOf<T>::value;

}  // namespace fc
