// FP8 E4M3, the operand format of Hopper's FP8 tensor cores (QGMMA) and of FA3's FP8 forward.
//
// The OCP "E4M3FN" encoding: sign | 4 exponent bits (bias 7) | 3 mantissa bits. There are no
// infinities: the exponent field 1111 holds normal numbers except S.1111.111, the only NaN, so the
// largest finite value is 1.75 x 2^8 = 448 (not the IEEE-style 1.875 x 2^8). Normal numbers down to
// 2^-6, subnormals down to 2^-9; precision p = 4, so u = 2^-4.
//
// Conversion saturates, as Hopper's cvt.rn.satfinite.e4m3x2.f32 does: a finite value whose rounding
// lands beyond 448, and +-Inf, become +-448; NaN stays NaN. (PyTorch's float8_e4m3fn conversion gives
// NaN on overflow instead; flashcheck follows the hardware its kernels run on.) Rounding modes as in
// rounding.hpp: to nearest even, toward zero, and stochastic with one 32-bit word per element, by the
// same rule and the same code (detail::rounds_away: the low k discarded bits plus the word's low k bits
// for k <= 32, the top 32 otherwise).
#pragma once

#include <cmath>
#include <cstdint>

#include "precision/format.hpp"
#include "precision/half.hpp"
#include "precision/host_device.hpp"
#include "precision/rounding.hpp"

namespace fc {

struct e4m3 {
  std::uint8_t bits = 0;
};
template <>
struct FormatOf<e4m3> {
  static constexpr Format value = Format::e4m3;
};

inline constexpr std::uint8_t kE4m3MaxBits = 0x7e;  // 448
inline constexpr std::uint8_t kE4m3NanBits = 0x7f;

// Exact widening (every E4M3 value is a float).
FC_HD inline float to_float(e4m3 x) {
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x80u) << 24;
  const std::uint32_t exp = (x.bits >> 3) & 0xfu, mant = x.bits & 0x7u;
  if (exp == 0xfu && mant == 0x7u) return float_from_bits(sign | 0x7fc00000u);  // the NaN
  if (exp != 0) return float_from_bits(sign | ((exp - 7 + 127) << 23) | (mant << 20));
  if (mant == 0) return float_from_bits(sign);  // +-0
  // Subnormal: mant * 2^-9 = 1.f * 2^(h - 9) with h the index of mant's highest set bit.
  const int h = highest_bit(mant);
  return float_from_bits(sign | (static_cast<std::uint32_t>(h - 9 + 127) << 23) | ((mant << (23 - h)) & 0x7fffffu));
}
FC_HD inline double to_double(e4m3 x) { return static_cast<double>(to_float(x)); }
FC_HD inline bool is_nan(e4m3 x) { return (x.bits & 0x7fu) == kE4m3NanBits; }
FC_HD inline bool is_finite(e4m3 x) { return !is_nan(x); }

// x (float or double) rounded to E4M3 per `mode`, saturating (see above).
template <class From>
FC_HD inline e4m3 round_to_e4m3(From x, Rounding mode, std::uint32_t random_word = 0) {
  using SrcBits = typename Encoding<From>::Bits;
  constexpr int src_m = Encoding<From>::mant_bits, src_e = Encoding<From>::exp_bits;
  constexpr int src_bias = (1 << (src_e - 1)) - 1;
  constexpr int dst_m = 3, dst_bias = 7, dst_emin = -6, dst_emax = 8;
  const SrcBits b = raw_bits(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((b >> (src_m + src_e)) << 7);
  const SrcBits src_exp = (b >> src_m) & ((SrcBits{1} << src_e) - 1);
  const std::uint64_t src_mant = b & ((SrcBits{1} << src_m) - 1);
  if (src_exp == (SrcBits{1} << src_e) - 1) return e4m3{static_cast<std::uint8_t>(sign | (src_mant != 0 ? kE4m3NanBits : kE4m3MaxBits))};
  if (src_exp == 0 && src_mant == 0) return e4m3{sign};
  const std::uint64_t M = src_exp == 0 ? src_mant : (src_mant | (std::uint64_t{1} << src_m));
  const int E = (src_exp == 0 ? 1 : static_cast<int>(src_exp)) - src_bias - src_m;
  const int e_x = E + highest_bit(M);
  if (e_x > dst_emax) return e4m3{static_cast<std::uint8_t>(sign | kE4m3MaxBits)};
  const int q = (e_x > dst_emin ? e_x : dst_emin) - dst_m;  // the last place at |x| is 2^q
  const int shift = q - E;                                    // >= 1: E4M3 is narrower than float
  std::uint64_t kept = shift >= 64 ? 0 : M >> shift;
  const std::uint64_t rem = shift >= 64 ? M : M & ((std::uint64_t{1} << shift) - 1);
  kept += detail::rounds_away(kept, rem, shift, mode, random_word) ? 1 : 0;
  // As in round_encoding: a carry out of the mantissa bumps the exponent; from 448 it would reach the
  // NaN pattern (480 does not exist), which saturates back to 448.
  std::uint64_t magnitude = e_x >= dst_emin ? (static_cast<std::uint64_t>(e_x + dst_bias - 1) << dst_m) + kept : kept;
  if (magnitude > kE4m3MaxBits) magnitude = kE4m3MaxBits;
  return e4m3{static_cast<std::uint8_t>(sign | magnitude)};
}

// The generic storage-type interface (round_to<e4m3>, raw_bits, from_raw_bits, Encoding's field
// widths) for code written over bf16/fp16/float, e.g. `flashcheck round --to e4m3`. Encoding<e4m3>
// gives the widths only: E4M3's specials are not IEEE's, so round_encoding and the generic is_nan /
// is_finite templates must not be used with it (the overloads above take precedence).
template <>
struct Encoding<e4m3> {
  using Bits = std::uint8_t;
  static constexpr int exp_bits = 4, mant_bits = 3;
};
FC_HD inline std::uint8_t raw_bits(e4m3 x) { return x.bits; }
template <>
FC_HD inline e4m3 from_raw_bits<e4m3>(std::uint8_t b) { return e4m3{b}; }
template <>
FC_HD inline e4m3 round_to<e4m3, float>(float x, Rounding mode, std::uint32_t random_word) { return round_to_e4m3(x, mode, random_word); }
template <>
FC_HD inline e4m3 round_to<e4m3, double>(double x, Rounding mode, std::uint32_t random_word) { return round_to_e4m3(x, mode, random_word); }

// The power-of-two scale 2^e of a block whose largest magnitude is amax: the smallest e with
// amax 2^-e <= 448, so the block's values scaled by 2^-e fill E4M3's range without overflow (FA3's
// per-block quantization with power-of-two scales, which keeps descaling exact). 0 for an all-zero block.
inline int e4m3_block_exponent(double amax) {
  if (!(amax > 0) || !(amax < 1e300)) return 0;
  int e = static_cast<int>(std::ceil(std::log2(amax / 448.0)));
  while (std::ldexp(amax, -e) > 448.0) ++e;  // (guards log2's rounding at exact powers)
  while (std::ldexp(amax, 1 - e) <= 448.0) --e;
  return e;
}

// e4m3_block_exponent for a float amax, from its bits (no log2, so the CUDA quantizer runs the same rule,
// fa3_fp8_kernels.cu): amax = 1.f x 2^E and 448 = 1.75 x 2^8, so e = E - 8 when 1.f <= 1.75, else E - 7.
// Equal to e4m3_block_exponent(amax) for every finite float (precision/tests/fp8_test.cpp).
FC_HD inline int e4m3_block_exponent_of_float(float amax) {
  const std::uint32_t b = bits_of(amax) & 0x7fffffffu;
  if (b == 0 || b >= 0x7f800000u) return 0;  // zero, Inf, NaN
  int E;
  std::uint32_t frac;
  if (b >= 0x00800000u) {
    E = static_cast<int>(b >> 23) - 127, frac = b & 0x7fffffu;
  } else {  // subnormal: b x 2^-149
    const int h = highest_bit(b);
    E = h - 149, frac = (b << (23 - h)) & 0x7fffffu;
  }
  return frac <= 0x600000u ? E - 8 : E - 7;
}

}  // namespace fc
