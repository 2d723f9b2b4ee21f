// The 16-bit storage formats bf16 and fp16 on the host (and device), and the IEEE encoding of every
// storage type the rounding engine handles.
//
// bf16 and fp16 are storage types only: they hold a bit pattern, convert exactly to float/double,
// and are produced by the rounding functions in rounding.hpp. Arithmetic happens in float or wider,
// as it does in the kernels (tensor cores multiply 16-bit inputs exactly and accumulate in fp32).
#pragma once

#include <cstdint>

#include "precision/format.hpp"
#include "precision/host_device.hpp"

namespace fc {

struct bf16 {
  std::uint16_t bits = 0;
};
struct fp16 {
  std::uint16_t bits = 0;
};

template <>
struct FormatOf<bf16> {
  static constexpr Format value = Format::bf16;
};
template <>
struct FormatOf<fp16> {
  static constexpr Format value = Format::fp16;
};

// Field widths of a storage type's encoding: sign | exponent (exp_bits) | mantissa (mant_bits).
template <class T>
struct Encoding;
template <>
struct Encoding<bf16> {
  using Bits = std::uint16_t;
  static constexpr int exp_bits = 8, mant_bits = 7;
};
template <>
struct Encoding<fp16> {
  using Bits = std::uint16_t;
  static constexpr int exp_bits = 5, mant_bits = 10;
};
template <>
struct Encoding<float> {
  using Bits = std::uint32_t;
  static constexpr int exp_bits = 8, mant_bits = 23;
};
template <>
struct Encoding<double> {
  using Bits = std::uint64_t;
  static constexpr int exp_bits = 11, mant_bits = 52;
};

FC_HD inline std::uint16_t raw_bits(bf16 x) { return x.bits; }
FC_HD inline std::uint16_t raw_bits(fp16 x) { return x.bits; }
FC_HD inline std::uint32_t raw_bits(float x) { return bits_of(x); }
FC_HD inline std::uint64_t raw_bits(double x) { return bits_of(x); }

template <class T>
FC_HD inline T from_raw_bits(typename Encoding<T>::Bits b) {
  if constexpr (sizeof(T) == 2) {
    return T{b};
  } else if constexpr (sizeof(T) == 4) {
    return float_from_bits(b);
  } else {
    return double_from_bits(b);
  }
}

// Exact widening. Every bf16 and fp16 value (subnormals, +-0, +-Inf) is a float; NaNs keep their
// sign and payload (shifted into the high mantissa bits), so they stay quiet or signalling as they were.
FC_HD inline float to_float(bf16 x) { return float_from_bits(static_cast<std::uint32_t>(x.bits) << 16); }

FC_HD inline float to_float(fp16 x) {
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x8000u) << 16;
  const std::uint32_t exp = (x.bits >> 10) & 0x1fu;
  const std::uint32_t mant = x.bits & 0x3ffu;
  if (exp == 0x1fu) return float_from_bits(sign | 0x7f800000u | (mant << 13));  // Inf, NaN
  if (exp != 0) return float_from_bits(sign | ((exp - 15 + 127) << 23) | (mant << 13));
  if (mant == 0) return float_from_bits(sign);  // +-0
  // Subnormal: mant * 2^-24 = 1.f * 2^(h - 24) with h the index of mant's highest set bit.
  const int h = highest_bit(mant);
  const std::uint32_t exp32 = static_cast<std::uint32_t>(h - 24 + 127);
  return float_from_bits(sign | (exp32 << 23) | ((mant << (23 - h)) & 0x7fffffu));
}

FC_HD inline double to_double(bf16 x) { return static_cast<double>(to_float(x)); }
FC_HD inline double to_double(fp16 x) { return static_cast<double>(to_float(x)); }
FC_HD inline float to_float(float x) { return x; }
FC_HD inline double to_double(float x) { return static_cast<double>(x); }
FC_HD inline double to_double(double x) { return x; }

template <class T>
FC_HD inline bool is_nan(T x) {
  using E = Encoding<T>;
  const auto b = raw_bits(x);
  const auto exp_mask = ((typename E::Bits{1} << E::exp_bits) - 1) << E::mant_bits;
  const auto mant_mask = (typename E::Bits{1} << E::mant_bits) - 1;
  return (b & exp_mask) == exp_mask && (b & mant_mask) != 0;
}

template <class T>
FC_HD inline bool is_finite(T x) {
  using E = Encoding<T>;
  const auto exp_mask = ((typename E::Bits{1} << E::exp_bits) - 1) << E::mant_bits;
  return (raw_bits(x) & exp_mask) != exp_mask;
}

}  // namespace fc
