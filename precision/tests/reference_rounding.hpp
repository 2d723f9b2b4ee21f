// An independent reference for rounding to a 16-bit format, for tests only.
//
// It shares nothing with the engine under test: the format's finite values are enumerated from the
// definition (-1)^s 2^(e - bias) (1 + f / 2^m), or 2^(1 - bias) (f / 2^m) for subnormals, with ldexp;
// the neighbours of x are found by binary search over those values; RN compares x with the midpoint
// of its neighbours (exact in double: both have at most 11 significant bits) and breaks ties toward
// the even encoding. Above the largest finite value the upper neighbour is 2^(emax+1), whose
// "encoding" is Inf's (max finite + 1, even), which gives IEEE's overflow rule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "precision/half.hpp"  // the storage types only, to name which reference a test wants

namespace fc::testing {

class ReferenceFormat {
 public:
  ReferenceFormat(int exp_bits, int mant_bits) : exp_bits_(exp_bits), mant_bits_(mant_bits) {
    const int bias = (1 << (exp_bits - 1)) - 1;
    const int max_exp_field = (1 << exp_bits) - 2;  // all ones is Inf/NaN
    for (int e = 0; e <= max_exp_field; ++e) {
      for (int f = 0; f < (1 << mant_bits); ++f) {
        const double v = e == 0 ? std::ldexp(static_cast<double>(f), 1 - bias - mant_bits)
                                : std::ldexp(1.0 + std::ldexp(static_cast<double>(f), -mant_bits), e - bias);
        values_.push_back(v);  // index == encoding of the positive value
      }
    }
    overflow_ = std::ldexp(1.0, bias + 1);
    inf_bits_ = static_cast<std::uint16_t>(values_.size());
  }

  std::uint16_t inf_bits() const { return inf_bits_; }
  std::uint16_t max_finite_bits() const { return static_cast<std::uint16_t>(inf_bits_ - 1); }
  std::uint16_t sign_bit() const { return static_cast<std::uint16_t>(1u << (exp_bits_ + mant_bits_)); }
  double value_of_positive(std::uint16_t bits) const {
    return bits == inf_bits_ ? INFINITY : values_[bits];
  }
  // The value of an encoding (NaN patterns give NaN).
  double value(std::uint16_t bits) const {
    const std::uint16_t mag = bits & static_cast<std::uint16_t>(sign_bit() - 1);
    const double v = mag > inf_bits_ ? NAN : value_of_positive(mag);
    return (bits & sign_bit()) ? -v : v;
  }

  // The neighbours lo <= a < hi of a finite a >= 0 (lo == a when a is representable, then hi is
  // unused). hi may be the overflow point 2^(emax+1) with hi_bits == inf_bits().
  struct Bracket {
    std::uint16_t lo_bits, hi_bits;
    double lo, hi;
    bool exact;
  };
  Bracket bracket(double a) const {
    if (a >= overflow_) return {max_finite_bits(), inf_bits_, values_.back(), overflow_, false};
    const auto it = std::upper_bound(values_.begin(), values_.end(), a);
    const auto lo_index = static_cast<std::uint16_t>((it - values_.begin()) - 1);
    const double lo = values_[lo_index];
    const auto hi_index = static_cast<std::uint16_t>(lo_index + 1);
    const double hi = hi_index == inf_bits_ ? overflow_ : values_[hi_index];
    return {lo_index, hi_index, lo, hi, lo == a};
  }

  // Encodings for finite x (callers handle NaN and Inf themselves).
  std::uint16_t nearest_even(double x) const {
    const double a = std::fabs(x);
    std::uint16_t mag;
    if (a >= overflow_) {
      mag = inf_bits_;
    } else {
      const Bracket b = bracket(a);
      const double mid = 0.5 * (b.lo + b.hi);
      if (b.exact || a < mid) {
        mag = b.lo_bits;
      } else if (a > mid) {
        mag = b.hi_bits;
      } else {
        mag = (b.lo_bits % 2 == 0) ? b.lo_bits : b.hi_bits;
      }
    }
    return std::signbit(x) ? static_cast<std::uint16_t>(mag | sign_bit()) : mag;
  }
  std::uint16_t toward_zero(double x) const {
    const std::uint16_t mag = bracket(std::fabs(x)).lo_bits;
    return std::signbit(x) ? static_cast<std::uint16_t>(mag | sign_bit()) : mag;
  }

 private:
  int exp_bits_, mant_bits_;
  std::vector<double> values_;
  double overflow_ = 0;
  std::uint16_t inf_bits_ = 0;
};

inline const ReferenceFormat& reference_bf16() {
  static const ReferenceFormat f(8, 7);
  return f;
}
inline const ReferenceFormat& reference_fp16() {
  static const ReferenceFormat f(5, 10);
  return f;
}

// The reference for a storage type: reference_for<bf16>() or reference_for<fp16>().
template <class T>
const ReferenceFormat& reference_for() {
  if constexpr (Encoding<T>::exp_bits == 8) {
    return reference_bf16();
  } else {
    return reference_fp16();
  }
}

}  // namespace fc::testing
