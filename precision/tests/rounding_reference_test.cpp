// Float and double -> bf16/fp16 in RN and RZ against the independent reference (and CUDA's host
// conversions where present): every boundary case of each format, and 10^7 random floats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "precision/convert.hpp"
#include "precision/rounding.hpp"
#include "precision/tests/cuda_host_reference.hpp"
#include "precision/tests/reference_rounding.hpp"

namespace fc {
namespace {

using testing::ReferenceFormat;

#if FLASHCHECK_HAVE_CUDA_HEADERS
// Against CUDA's conversions, NaN results are compared by class: CUDA canonicalises them, and our
// payload rule is tested in half_test.cpp.
bool same_result(std::uint16_t got, std::uint16_t want, const ReferenceFormat& ref) {
  const bool got_nan = std::isnan(ref.value(got)), want_nan = std::isnan(ref.value(want));
  return got_nan || want_nan ? got_nan == want_nan : got == want;
}
#endif

template <class T, class X>
::testing::AssertionResult matches_reference(X x, const ReferenceFormat& ref) {
  const double xd = static_cast<double>(x);
  if (std::isnan(xd)) {
    const bool ok = is_nan(round_to<T>(x, Rounding::nearest_even)) && is_nan(round_to<T>(x, Rounding::toward_zero));
    return ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "NaN did not stay NaN";
  }
  std::uint16_t want_rn, want_rz;
  if (std::isinf(xd)) {
    want_rn = want_rz = static_cast<std::uint16_t>(ref.inf_bits() | (xd < 0 ? ref.sign_bit() : 0));
  } else {
    want_rn = ref.nearest_even(xd);
    want_rz = ref.toward_zero(xd);
  }
  const std::uint16_t rn = round_to<T>(x, Rounding::nearest_even).bits;
  const std::uint16_t rz = round_to<T>(x, Rounding::toward_zero).bits;
  if (rn == want_rn && rz == want_rz) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << "x = " << xd << std::hex << ": RN 0x" << rn
                                       << " (reference 0x" << want_rn << "), RZ 0x" << rz
                                       << " (reference 0x" << want_rz << ")";
}

// Every value of the format, every midpoint between neighbours, and the source values one place
// either side of each: the points where a rounding rule can go wrong. Includes +-0, the smallest
// subnormal, the subnormal/normal border, every power of two, the largest finite value and the
// overflow threshold (the midpoint between max finite and 2^(emax+1)).
template <class X>
std::vector<X> boundary_points(const ReferenceFormat& ref) {
  std::vector<X> points;
  const auto add_with_neighbours = [&points](double v) {
    const X c = static_cast<X>(v);  // exact: at most 12 significant bits (2^128 is Inf as a float)
    for (X p : {c, std::nextafter(c, X(0)), std::nextafter(c, X(INFINITY))}) {
      points.push_back(p);
      points.push_back(-p);
    }
  };
  const double overflow = 2.0 * std::ldexp(1.0, std::ilogb(ref.value_of_positive(ref.max_finite_bits())));
  for (std::uint32_t bits = 0; bits < ref.inf_bits(); ++bits) {
    const double lo = ref.value_of_positive(static_cast<std::uint16_t>(bits));
    const double hi = bits == ref.max_finite_bits() ? overflow
                                                    : ref.value_of_positive(static_cast<std::uint16_t>(bits + 1));
    add_with_neighbours(lo);
    add_with_neighbours(0.5 * (lo + hi));
  }
  add_with_neighbours(overflow);
  return points;
}

template <class T>
void check_boundaries(const ReferenceFormat& ref) {
  for (float x : boundary_points<float>(ref)) ASSERT_TRUE(matches_reference<T>(x, ref));
  for (double x : boundary_points<double>(ref)) ASSERT_TRUE(matches_reference<T>(x, ref));
  for (float x : {INFINITY, -INFINITY, NAN, -NAN, float_from_bits(0x7f800001u), float_from_bits(0xffbfffffu),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()}) {
    ASSERT_TRUE(matches_reference<T>(x, ref));
    ASSERT_TRUE(matches_reference<T>(static_cast<double>(x), ref));
  }
  for (double x : {std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min(),
                   std::numeric_limits<double>::min(), -std::numeric_limits<double>::min()}) {
    ASSERT_TRUE(matches_reference<T>(x, ref));
  }
}

TEST(RoundingReference, Bf16BoundaryCases) { check_boundaries<bf16>(testing::reference_bf16()); }
TEST(RoundingReference, Fp16BoundaryCases) { check_boundaries<fp16>(testing::reference_fp16()); }

// Rounding a double straight to 16 bits is not the same as rounding it to float first: a double just
// above a 16-bit midpoint rounds to the midpoint in float, and then ties-to-even may go the wrong way.
TEST(RoundingReference, DoubleInputsAreRoundedOnceNotTwice) {
  const double just_above_mid = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);  // fp16: 1 + ulp/2 + tiny
  EXPECT_EQ(round_to<fp16>(just_above_mid, Rounding::nearest_even).bits, 0x3c01);
  EXPECT_EQ(round_to<fp16>(static_cast<float>(just_above_mid), Rounding::nearest_even).bits, 0x3c00)
      << "the float detour rounds to the midpoint first, then ties to even (down)";
  const double bf16_trap = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -45);
  EXPECT_EQ(round_to<bf16>(bf16_trap, Rounding::nearest_even).bits, 0x3f81);
  EXPECT_EQ(round_to<bf16>(static_cast<float>(bf16_trap), Rounding::nearest_even).bits, 0x3f80);
}

// 10^7 random floats per format: half uniform over all bit patterns (every binade, NaNs, subnormals),
// half concentrated on the format's own exponent range with the discarded bits near a midpoint.
template <class T>
void check_random(const ReferenceFormat& ref, int emin, int emax, int mant_bits, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  constexpr int kCount = 10'000'000;
  const int dropped = 23 - mant_bits;
  for (int i = 0; i < kCount; ++i) {
    std::uint32_t b = static_cast<std::uint32_t>(rng());
    if (i % 2 == 1) {
      // exponent in [emin - 12, emax + 1], discarded bits within +-3 of half
      const int e_lo = std::max(emin - 12, -126), e_hi = std::min(emax + 1, 127);  // float normals
      const int e = e_lo + static_cast<int>(rng() % static_cast<std::uint64_t>(e_hi - e_lo + 1));
      const std::uint32_t half = 1u << (dropped - 1);
      const std::uint32_t low = half + static_cast<std::uint32_t>(rng() % 7) - 3u;
      b = (b & 0x80000000u) | (static_cast<std::uint32_t>(e + 127) << 23) | (b & 0x7fffffu & ~((1u << dropped) - 1)) | low;
    }
    const float x = float_from_bits(b);
    ASSERT_TRUE(matches_reference<T>(x, ref)) << "draw " << i;
#if FLASHCHECK_HAVE_CUDA_HEADERS
    if constexpr (sizeof(T) == 2 && Encoding<T>::exp_bits == 8) {
      ASSERT_TRUE(same_result(round_to<T>(x, Rounding::nearest_even).bits, testing::cuda_host::bf16_rn(x), ref)) << std::hex << b;
      ASSERT_TRUE(same_result(round_to<T>(x, Rounding::toward_zero).bits, testing::cuda_host::bf16_rz(x), ref)) << std::hex << b;
    } else {
      ASSERT_TRUE(same_result(round_to<T>(x, Rounding::nearest_even).bits, testing::cuda_host::fp16_rn(x), ref)) << std::hex << b;
      ASSERT_TRUE(same_result(round_to<T>(x, Rounding::toward_zero).bits, testing::cuda_host::fp16_rz(x), ref)) << std::hex << b;
    }
#endif
  }
}

TEST(RoundingReference, Bf16TenMillionRandomFloats) { check_random<bf16>(testing::reference_bf16(), -126, 127, 7, 1); }
TEST(RoundingReference, Fp16TenMillionRandomFloats) { check_random<fp16>(testing::reference_fp16(), -14, 15, 10, 2); }

TEST(RoundingReference, RandomDoublesNearMidpoints) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1'000'000; ++i) {
    // A random 16-bit value, a random offset of a few double places around the midpoint above it.
    const auto pick = [&](const ReferenceFormat& ref) {
      const auto bits = static_cast<std::uint16_t>(rng() % ref.inf_bits());
      const double lo = ref.value_of_positive(bits);
      const double hi = bits + 1 == ref.inf_bits() ? 2.0 * std::ldexp(1.0, std::ilogb(lo))
                                                   : ref.value_of_positive(static_cast<std::uint16_t>(bits + 1));
      double x = 0.5 * (lo + hi);
      for (int k = static_cast<int>(rng() % 7) - 3; k != 0; k += k > 0 ? -1 : 1) {
        x = std::nextafter(x, k > 0 ? INFINITY : 0.0);
      }
      return (rng() & 1) ? -x : x;
    };
    const double xb = pick(testing::reference_bf16());
    ASSERT_TRUE(matches_reference<bf16>(xb, testing::reference_bf16()));
    const double xh = pick(testing::reference_fp16());
    ASSERT_TRUE(matches_reference<fp16>(xh, testing::reference_fp16()));
#if FLASHCHECK_HAVE_CUDA_HEADERS
    ASSERT_TRUE(same_result(round_to<bf16>(xb, Rounding::nearest_even).bits, testing::cuda_host::bf16_from_double(xb),
                            testing::reference_bf16())) << std::hexfloat << xb;
    ASSERT_TRUE(same_result(round_to<fp16>(xh, Rounding::nearest_even).bits, testing::cuda_host::fp16_from_double(xh),
                            testing::reference_fp16())) << std::hexfloat << xh;
#endif
  }
}

// double -> float, against the hardware: RN is C++'s conversion (the FPU's default rounding), RZ is
// that result stepped back toward zero when it went away (so overflow gives FLT_MAX). On random bit
// patterns (every binade, NaN, subnormals) and on doubles next to float midpoints.
TEST(RoundingReference, DoubleToFloatMatchesTheHardware) {
  std::mt19937_64 rng(5);
  std::vector<double> xs;
  for (int i = 0; i < 1'000'000; ++i) {
    if (i % 2 == 0) {
      xs.push_back(double_from_bits(rng()));
    } else {  // a float's midpoint to its upper neighbour, a few double places either side
      const float f = float_from_bits(static_cast<std::uint32_t>(rng()) & 0x7f7fffffu);
      double x = 0.5 * (static_cast<double>(f) + static_cast<double>(std::nextafter(f, INFINITY)));
      for (int k = static_cast<int>(rng() % 7) - 3; k != 0; k += k > 0 ? -1 : 1) x = std::nextafter(x, k > 0 ? INFINITY : 0.0);
      xs.push_back((rng() & 1) ? -x : x);
    }
  }
  for (double x : xs) {
    const float rn = static_cast<float>(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(round_to<float>(x, Rounding::nearest_even)));
      ASSERT_TRUE(std::isnan(round_to<float>(x, Rounding::toward_zero)));
      continue;
    }
    const float rz = std::fabs(static_cast<double>(rn)) > std::fabs(x) ? std::nextafter(rn, 0.0f) : rn;
    ASSERT_EQ(bits_of(round_to<float>(x, Rounding::nearest_even)), bits_of(rn)) << std::hexfloat << x;
    ASSERT_EQ(bits_of(round_to<float>(x, Rounding::toward_zero)), bits_of(rz)) << std::hexfloat << x;
  }
  std::vector<float> out(xs.size());
  round_array(std::span<const double>(xs), std::span<float>(out), Rounding::toward_zero);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(bits_of(out[i]), bits_of(round_to<float>(xs[i], Rounding::toward_zero))) << i;
  }
}

// Stochastic rounding with more than 32 discarded bits (fp16 from double discards 42 in the normal
// range) compares the word with the top 32 discarded bits: it rounds up exactly when
// word >= 2^32 - top. Pinned at the boundary, with top computed from the value, not the encoding.
TEST(RoundingReference, StochasticRoundingBeyond32DiscardedBits) {
  for (double frac : {0.3, 1e-9, 0.999999, 0.5}) {
    const double x = 1.0 + frac * std::ldexp(1.0, -10);  // between fp16 1 and 1 + 2^-10
    const auto top = static_cast<std::uint64_t>(std::floor((x - 1.0) * std::ldexp(1.0, 42)));  // exact
    ASSERT_GT(top, 0u);
    const auto boundary = static_cast<std::uint32_t>((std::uint64_t{1} << 32) - top);
    EXPECT_EQ(round_to<fp16>(x, Rounding::stochastic, boundary).bits, 0x3c01) << frac;
    EXPECT_EQ(round_to<fp16>(x, Rounding::stochastic, boundary - 1).bits, 0x3c00) << frac;
    EXPECT_EQ(round_to<fp16>(-x, Rounding::stochastic, boundary).bits, 0xbc01) << frac;
  }
}

// The fast paths (float -> bf16 all modes, float -> fp16 RN) against the generic engine.
TEST(RoundingReference, FastPathsEqualTheGenericEngine) {
  std::mt19937_64 rng(4);
  for (int i = 0; i < 10'000'000; ++i) {
    const auto b = static_cast<std::uint32_t>(rng());
    const auto word = static_cast<std::uint32_t>(rng());
    const float x = float_from_bits(b);
    for (Rounding mode : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
      ASSERT_EQ(round_to<bf16>(x, mode, word).bits, (detail::round_encoding<bf16, float>(b, mode, word)))
          << std::hex << b << " " << name(mode);
    }
    ASSERT_EQ(round_to<fp16>(x, Rounding::nearest_even).bits,
              (detail::round_encoding<fp16, float>(b, Rounding::nearest_even, 0))) << std::hex << b;
  }
}

}  // namespace
}  // namespace fc
