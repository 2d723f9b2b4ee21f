// FP8 E4M3 (precision/fp8.hpp): every one of the 256 patterns decodes to the value its fields say;
// rounding to nearest agrees with a brute-force nearest-value search over the 253 finite magnitudes
// and (where the CUDA headers are present) with CUDA's host-side __nv_cvt_float_to_fp8 / _double_to_fp8
// with __NV_SATFINITE, on random and near-midpoint inputs; saturation; toward zero; stochastic
// rounding's rule at the word boundaries.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "precision/format.hpp"
#include "precision/fp8.hpp"

#if FLASHCHECK_HAVE_CUDA_HEADERS
#include <cuda_fp8.h>
#endif

namespace fc {
namespace {

// The value of a pattern from its fields (an independent decoding).
double field_value(unsigned bits) {
  const double sign = (bits & 0x80u) ? -1.0 : 1.0;
  const unsigned exp = (bits >> 3) & 0xfu, mant = bits & 0x7u;
  if (exp == 0xfu && mant == 0x7u) return std::numeric_limits<double>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -9);
  return sign * std::ldexp(8.0 + mant, static_cast<int>(exp) - 7 - 3);
}

// The nonnegative finite values in increasing order (pattern = index).
const std::vector<double>& magnitudes() {
  static const std::vector<double> m = [] {
    std::vector<double> v;
    for (unsigned b = 0; b < 0x7fu; ++b) v.push_back(field_value(b));
    return v;
  }();
  return m;
}

// Round to nearest, ties to the even pattern, saturating at 448: by search.
unsigned nearest_by_search(double x) {
  const unsigned sign = std::signbit(x) ? 0x80u : 0u;
  const double a = std::fabs(x);
  const auto& m = magnitudes();
  if (a >= m.back()) return sign | 0x7eu;
  unsigned lo = 0;
  while (lo + 1 < m.size() && m[lo + 1] <= a) ++lo;
  if (m[lo] == a) return sign | lo;
  const double d_lo = a - m[lo], d_hi = m[lo + 1] - a;
  if (d_lo < d_hi) return sign | lo;
  if (d_hi < d_lo) return sign | (lo + 1);
  return sign | ((lo % 2 == 0) ? lo : lo + 1);
}

TEST(E4m3, EveryPatternDecodesToItsFieldValue) {
  for (unsigned b = 0; b < 256; ++b) {
    const e4m3 x{static_cast<std::uint8_t>(b)};
    const double expected = field_value(b);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(to_float(x))) << b;
      EXPECT_TRUE(is_nan(x));
      continue;
    }
    EXPECT_EQ(to_float(x), expected) << b;
    EXPECT_EQ(std::signbit(to_float(x)), (b & 0x80u) != 0) << b;
    // Every finite pattern survives a round trip in every mode (an exact value has nothing to round).
    for (Rounding mode : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
      EXPECT_EQ(round_to_e4m3(to_float(x), mode, 0xdeadbeefu).bits, b) << b;
      EXPECT_EQ(round_to_e4m3(to_double(x), mode, 0xdeadbeefu).bits, b) << b;
    }
  }
  EXPECT_EQ(to_float(e4m3{0x7e}), 448.0f);
  EXPECT_EQ(to_float(e4m3{0x38}), 1.0f);
  EXPECT_EQ(to_float(e4m3{0x08}), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_EQ(to_float(e4m3{0x01}), std::ldexp(1.0f, -9));  // the smallest subnormal
}

TEST(E4m3, FormatInfoMatchesTheEncoding) {
  const FormatInfo i = format_info(Format::e4m3);
  EXPECT_EQ(i.bits, 8);
  EXPECT_EQ(i.unit_roundoff(), 1.0 / 16);
  EXPECT_EQ(i.max_finite(), 448.0);
  EXPECT_EQ(i.min_normal(), std::ldexp(1.0, -6));
  EXPECT_EQ(i.min_subnormal(), std::ldexp(1.0, -9));
  EXPECT_EQ(parse_format("fp8"), Format::e4m3);
  EXPECT_EQ(parse_format("float8_e4m3fn"), Format::e4m3);
  EXPECT_EQ(ulp(Format::e4m3, 1.0), 0.125);
}

TEST(E4m3, SaturatesAndKeepsNan) {
  for (double x : {448.0, 449.0, 463.99, 464.0, 480.0, 1e6, 1e300}) {
    EXPECT_EQ(round_to_e4m3(x, Rounding::nearest_even).bits, 0x7eu) << x;
    EXPECT_EQ(round_to_e4m3(-x, Rounding::nearest_even).bits, 0xfeu) << x;
    EXPECT_EQ(round_to_e4m3(static_cast<float>(x), Rounding::toward_zero).bits, 0x7eu) << x;
  }
  EXPECT_EQ(round_to_e4m3(std::numeric_limits<float>::infinity(), Rounding::nearest_even).bits, 0x7eu);
  EXPECT_EQ(round_to_e4m3(-std::numeric_limits<double>::infinity(), Rounding::stochastic, 5).bits, 0xfeu);
  EXPECT_TRUE(is_nan(round_to_e4m3(std::numeric_limits<float>::quiet_NaN(), Rounding::nearest_even)));
  EXPECT_EQ(round_to_e4m3(-0.0f, Rounding::nearest_even).bits, 0x80u);
  EXPECT_EQ(round_to_e4m3(std::ldexp(1.0f, -11), Rounding::nearest_even).bits, 0x00u);  // a quarter of the smallest subnormal
  EXPECT_EQ(round_to_e4m3(std::ldexp(3.0f, -11), Rounding::nearest_even).bits, 0x01u);  // three quarters
  EXPECT_EQ(round_to_e4m3(std::ldexp(1.0f, -10), Rounding::nearest_even).bits, 0x00u);  // a tie: to the even 0
}

rc::Gen<float> near_values() {
  // Values around every finite magnitude and midpoint, both signs, plus plain random floats over E4M3's range.
  return rc::gen::oneOf(
      rc::gen::map(rc::gen::tuple(rc::gen::inRange<int>(0, 0x7f), rc::gen::inRange(-2, 3), rc::gen::arbitrary<bool>(), rc::gen::arbitrary<bool>()),
                   [](const auto& t) {
                     const auto [i, step, mid, neg] = t;
                     const auto& m = magnitudes();
                     double x = m[static_cast<std::size_t>(i)];
                     if (mid && static_cast<std::size_t>(i) + 1 < m.size()) x = (x + m[static_cast<std::size_t>(i) + 1]) / 2;
                     float f = static_cast<float>(x);
                     for (int k = 0; k < std::abs(step); ++k) f = std::nextafter(f, step > 0 ? 1e30f : -1e30f);
                     return neg ? -f : f;
                   }),
      rc::gen::map(rc::gen::tuple(rc::gen::inRange(-14, 10), rc::gen::inRange(0, 1 << 23), rc::gen::arbitrary<bool>()), [](const auto& t) {
        const auto [e, m, neg] = t;
        const float f = std::ldexp(1.0f + static_cast<float>(m) / static_cast<float>(1 << 23), e);
        return neg ? -f : f;
      }));
}

RC_GTEST_PROP(E4m3, RoundsToNearestEvenLikeASearchAndLikeCuda, ()) {
  const float x = *near_values();
  const unsigned expected = nearest_by_search(x);
  RC_ASSERT(round_to_e4m3(x, Rounding::nearest_even).bits == expected);
  RC_ASSERT(round_to_e4m3(static_cast<double>(x), Rounding::nearest_even).bits == expected);
#if FLASHCHECK_HAVE_CUDA_HEADERS
  RC_ASSERT(static_cast<unsigned>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)) == expected);
  RC_ASSERT(static_cast<unsigned>(__nv_cvt_double_to_fp8(static_cast<double>(x), __NV_SATFINITE, __NV_E4M3)) == expected);
#endif
}

RC_GTEST_PROP(E4m3, TowardZeroAndStochasticPickANeighbourByTheRule, ()) {
  const float x = *near_values();
  const float a = std::fabs(x);
  RC_PRE(a < 448.0f);
  const auto& m = magnitudes();
  std::size_t lo = 0;
  while (lo + 1 < m.size() && m[lo + 1] <= a) ++lo;
  const unsigned sign = std::signbit(x) ? 0x80u : 0u;
  RC_ASSERT(round_to_e4m3(x, Rounding::toward_zero).bits == (sign | lo));
  if (m[lo] == a) return;
  // Stochastic: with k discarded bits and rem their value, k <= 32: the word's low k bits w round up iff
  // rem + w >= 2^k, so exactly the words from 2^k - rem up round away from zero; k > 32 (float
  // subnormals): the same with the top 32 discarded bits in place of rem and 2^32 in place of 2^k.
  const double place = m[lo + 1] - m[lo];
  const int E = std::max(std::ilogb(a), -126) - 23;               // a = M 2^E, M the float's integer significand
  const int shift = static_cast<int>(std::log2(place)) - E;        // discarded bits
  const double rem = std::ldexp(static_cast<double>(a) - m[lo], -E);  // an integer below 2^shift
  const double top = shift <= 32 ? rem : std::floor(std::ldexp(rem, 32 - shift));
  const double first_up = std::ldexp(1.0, std::min(shift, 32)) - top;  // the smallest word that rounds up
  if (first_up >= 1) {
    RC_ASSERT(round_to_e4m3(x, Rounding::stochastic, static_cast<std::uint32_t>(first_up - 1)).bits == (sign | lo));
  }
  if (first_up <= 4294967295.0) {
    RC_ASSERT(round_to_e4m3(x, Rounding::stochastic, static_cast<std::uint32_t>(first_up)).bits == (sign | (lo + 1)));
  }
}

// The quantizer's block exponent from a float's bits (what the CUDA quantizer runs) against the double
// rule with log2: equal for every finite positive float, at the powers of two, at 448's neighbours, and for
// subnormals; both give the smallest e with amax 2^-e <= 448.
RC_GTEST_PROP(E4m3, BlockExponentFromBitsEqualsTheLog2Rule, ()) {
  const std::uint32_t bits = *rc::gen::inRange<std::uint32_t>(1, 0x7f800000u);
  const float amax = float_from_bits(bits);
  const int e = e4m3_block_exponent_of_float(amax);
  RC_ASSERT(e == e4m3_block_exponent(static_cast<double>(amax)));
  RC_ASSERT(std::ldexp(static_cast<double>(amax), -e) <= 448.0);
  RC_ASSERT(std::ldexp(static_cast<double>(amax), 1 - e) > 448.0);
}
TEST(E4m3, BlockExponentFromBitsAtTheEdges) {
  for (const float amax : {448.0f, std::nextafter(448.0f, 0.0f), std::nextafter(448.0f, 1e9f), 224.0f, 896.0f, 1.0f, 1.75f,
                           std::nextafter(1.75f, 2.0f), std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::max()}) {
    EXPECT_EQ(e4m3_block_exponent_of_float(amax), e4m3_block_exponent(static_cast<double>(amax))) << amax;
  }
  EXPECT_EQ(e4m3_block_exponent_of_float(448.0f), 0);
  EXPECT_EQ(e4m3_block_exponent_of_float(0.0f), 0);
}

}  // namespace
}  // namespace fc
