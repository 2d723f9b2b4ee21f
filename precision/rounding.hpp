// Rounding a float or double to a narrower storage format: round-to-nearest-even (RN), toward zero
// (RZ) and stochastic (SR). One engine, compiled for host and device, so the CPU backends and the
// CUDA kernels produce identical bits for identical inputs and random words.
//
// Special values (all modes): NaN -> quiet NaN keeping sign and the high payload bits; +-Inf -> +-Inf;
// +-0 -> +-0. Subnormal results are exact where representable and rounded by the same rule otherwise.
// Overflow: RN and SR go to +-Inf; RZ goes to +-max finite.
//
// Stochastic rounding takes one 32-bit random word per element. With lo <= |x| <= hi the two
// neighbours in the target format and k the number of discarded significand bits:
//   k <= 32: the low k bits of the word are added to the discarded bits; a carry rounds away from
//            zero. P(round to hi) = (|x| - lo) / (hi - lo) exactly.
//   k >  32: (results deep in a narrow format's subnormal range, or sources in double) the word is
//            added to the top 32 discarded bits. P(round to hi) falls short of the exact value by
//            less than 2^-32, a bias below 2^-32 ULP.
// Above the largest finite value the upper neighbour is Inf (the next power of two, 2^(emax+1),
// does not exist in the format), so SR overflows with probability (|x| - max) / (2^(emax+1) - max).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "precision/half.hpp"
#include "precision/host_device.hpp"

namespace fc {

enum class Rounding : std::uint8_t { nearest_even, toward_zero, stochastic };

// "rn", "rz", "sr" (also "nearest", "zero", "stochastic").
std::string_view name(Rounding r);
std::optional<Rounding> parse_rounding(std::string_view text);

namespace detail {

// Whether a value whose significand keeps `kept` and discards the `shift` low bits `rem` rounds away
// from zero (to kept + 1), per mode; the rule every narrowing conversion here shares (rounding.hpp's
// header states it; fp8.hpp uses it for E4M3).
FC_HD inline bool rounds_away(std::uint64_t kept, std::uint64_t rem, int shift, Rounding mode, std::uint32_t random_word) {
  bool up = false;
  if (mode == Rounding::nearest_even) {
    // For shift >= 64, rem = M < 2^53 is below half a place (2^(shift-1) >= 2^63): round down.
    if (shift < 64) {
      // Branch-free: on random data a short-circuit here mispredicts and halves throughput.
      const std::uint64_t half = std::uint64_t{1} << (shift - 1);
      up = (rem > half) | ((rem == half) & static_cast<bool>(kept & 1u));
    }
  } else if (mode == Rounding::stochastic) {
    if (shift <= 32) {
      const std::uint64_t r = random_word & ((std::uint64_t{1} << shift) - 1);
      up = rem + r >= (std::uint64_t{1} << shift);
    } else {
      const int drop = shift - 32;
      const std::uint64_t top = drop >= 64 ? 0 : rem >> drop;
      up = top + random_word >= (std::uint64_t{1} << 32);
    }
  }
  return up;
}

// Rounds the encoding x of a From value to the encoding of the nearest-per-mode To value.
template <class To, class From>
FC_HD inline typename Encoding<To>::Bits round_encoding(typename Encoding<From>::Bits x, Rounding mode,
                                                        std::uint32_t random_word) {
  using SrcBits = typename Encoding<From>::Bits;
  using DstBits = typename Encoding<To>::Bits;
  constexpr int src_m = Encoding<From>::mant_bits, src_e = Encoding<From>::exp_bits;
  constexpr int dst_m = Encoding<To>::mant_bits, dst_e = Encoding<To>::exp_bits;
  static_assert(dst_m < src_m && dst_e <= src_e, "round_encoding narrows; widening is exact");
  constexpr int src_bias = (1 << (src_e - 1)) - 1;
  constexpr int dst_bias = (1 << (dst_e - 1)) - 1;
  constexpr int dst_emin = 1 - dst_bias, dst_emax = dst_bias;
  constexpr std::uint64_t dst_inf = ((std::uint64_t{1} << dst_e) - 1) << dst_m;

  const std::uint64_t sign = static_cast<std::uint64_t>(x >> (src_m + src_e)) << (dst_m + dst_e);
  const SrcBits src_exp = (x >> src_m) & ((SrcBits{1} << src_e) - 1);
  const std::uint64_t src_mant = x & ((SrcBits{1} << src_m) - 1);

  if (src_exp == (SrcBits{1} << src_e) - 1) {
    if (src_mant == 0) return static_cast<DstBits>(sign | dst_inf);
    // NaN: keep the payload's high bits and force the quiet bit, so a NaN never turns into Inf.
    const std::uint64_t quiet = std::uint64_t{1} << (dst_m - 1);
    return static_cast<DstBits>(sign | dst_inf | quiet | (src_mant >> (src_m - dst_m)));
  }
  if (src_exp == 0 && src_mant == 0) return static_cast<DstBits>(sign);

  // |x| = M * 2^E with M an integer significand; e_x = floor(log2 |x|).
  const std::uint64_t M = src_exp == 0 ? src_mant : (src_mant | (std::uint64_t{1} << src_m));
  const int E = (src_exp == 0 ? 1 : static_cast<int>(src_exp)) - src_bias - src_m;
  const int e_x = E + highest_bit(M);
  if (e_x > dst_emax) {
    return static_cast<DstBits>(sign | (mode == Rounding::toward_zero ? dst_inf - 1 : dst_inf));
  }

  // The target's last place at |x| is 2^q; `shift` significand bits of M fall below it.
  const int q = (e_x > dst_emin ? e_x : dst_emin) - dst_m;
  const int shift = q - E;  // >= 1: the target is narrower in precision and in exponent range
  std::uint64_t kept = shift >= 64 ? 0 : M >> shift;
  const std::uint64_t rem = shift >= 64 ? M : M & ((std::uint64_t{1} << shift) - 1);

  kept += rounds_away(kept, rem, shift, mode, random_word) ? 1 : 0;

  // Normal results: biased exponent (e_x + bias) over the mantissa kept - 2^dst_m; writing it as
  // ((e_x + bias - 1) << m) + kept lets a carry out of the mantissa bump the exponent (and reach
  // exactly the Inf encoding at the top). Subnormal results: the encoding is kept itself, and a carry
  // to 2^dst_m is the smallest normal.
  const std::uint64_t magnitude =
      e_x >= dst_emin ? (static_cast<std::uint64_t>(e_x + dst_bias - 1) << dst_m) + kept : kept;
  return static_cast<DstBits>(sign | magnitude);
}

// float -> fp16, round to nearest even, branch-free (the hot path of every fp16 store). Equal to
// round_encoding<fp16, float> bit for bit.
FC_HD inline std::uint16_t float_to_fp16_nearest(std::uint32_t b) {
  const std::uint32_t sign = (b >> 16) & 0x8000u;
  const std::uint32_t a = b & 0x7fffffffu;
  // Normal results: rebias the exponent (127 -> 15) and round the 13 dropped bits; a carry moves
  // into the exponent, and everything from 65520 up lands on or past Inf (clamped to Inf).
  std::uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  normal = normal < 0x7c00u ? normal : 0x7c00u;
  // Subnormal results (|x| < 2^-14): the encoding is |x| / 2^-24 rounded, i.e. the 24-bit
  // significand shifted right by 126 - exponent. The shift is clamped to [1, 31] so it is defined
  // for every input; inputs outside the subnormal range take the other branch of the select.
  const std::uint32_t exp = a >> 23;
  std::uint32_t s = 126u - exp;
  s = s > 31u ? 31u : (s < 1u ? 1u : s);
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t kept = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
  const std::uint32_t subnormal = kept + ((rem > half) | ((rem == half) & (kept & 1u)));
  std::uint32_t magnitude = a < 0x38800000u ? subnormal : normal;
  magnitude = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : magnitude;  // quiet NaN
  return static_cast<std::uint16_t>(sign | magnitude);
}

}  // namespace detail

// Rounds x (float or double) to To (bf16, fp16, or float from double). random_word is used only
// by Rounding::stochastic.
template <class To, class From>
FC_HD inline To round_to(From x, Rounding mode, std::uint32_t random_word = 0) {
  if constexpr (std::is_same_v<To, bf16> && std::is_same_v<From, float>) {
    // float -> bf16: the same exponent range, so rounding is an integer operation on the top half.
    // These fast paths equal the generic engine bit for bit (checked over all 2^32 floats).
    const std::uint32_t b = bits_of(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return To{static_cast<std::uint16_t>((b >> 16) | 0x0040u)};
    switch (mode) {
      case Rounding::nearest_even:
        return To{static_cast<std::uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16)};
      case Rounding::toward_zero:
        return To{static_cast<std::uint16_t>(b >> 16)};
      case Rounding::stochastic:
        return To{static_cast<std::uint16_t>((b + (random_word & 0xffffu)) >> 16)};
    }
  }
  if constexpr (std::is_same_v<To, fp16> && std::is_same_v<From, float>) {
    if (mode == Rounding::nearest_even) return To{detail::float_to_fp16_nearest(bits_of(x))};
  }
  return from_raw_bits<To>(detail::round_encoding<To, From>(raw_bits(x), mode, random_word));
}

}  // namespace fc
