// Error metrics against values computed by hand.
#include "precision/metrics.hpp"

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "precision/rounding.hpp"

namespace fc {
namespace {

using quad = boost::multiprecision::cpp_bin_float_quad;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Metrics, HandComputedDoubleExample) {
  // diffs (0, -0.5, 1)
  const std::vector<double> a{1.0, 2.0, 3.0}, r{1.0, 2.5, 2.0};
  const ErrorMetrics m = compare_arrays(a, r, {Format::fp32, 0.0});
  EXPECT_EQ(m.count, 3u);
  EXPECT_EQ(m.max_abs, 1.0);
  EXPECT_EQ(m.max_abs_index, 2u);
  EXPECT_DOUBLE_EQ(m.rms, std::sqrt(1.25 / 3.0));
  EXPECT_DOUBLE_EQ(m.mean_signed, 0.5 / 3.0);
  EXPECT_EQ(m.max_rel, 0.5);               // max(0, 0.5 / 2.5, 1 / 2)
  EXPECT_EQ(m.max_ulp, std::ldexp(1, 22));  // 1 / ulp_fp32(2) = 1 / 2^-22
  EXPECT_DOUBLE_EQ(m.cosine, 12.0 / std::sqrt(14.0 * 11.25));
  EXPECT_EQ(m.reference_max_abs, 2.5);
  EXPECT_DOUBLE_EQ(m.reference_rms, std::sqrt(11.25 / 3.0));  // 1 + 6.25 + 4
  EXPECT_EQ(m.nonfinite_actual + m.nonfinite_reference + m.nonfinite_mismatch, 0u);
}

TEST(Metrics, RelativeErrorUsesTheExplicitFloor) {
  const std::vector<double> a{1e-3, 0.0}, r{0.0, 1e-10};
  EXPECT_DOUBLE_EQ(compare_arrays(a, r, {Format::fp32, 1e-2}).max_rel, 0.1);  // max(1e-3/1e-2, 1e-10/1e-2)
  EXPECT_EQ(compare_arrays(a, r, {Format::fp32, 0.0}).max_rel, kInf) << "nonzero error at a zero reference";
  const std::vector<double> zeros{0.0, 0.0};
  EXPECT_EQ(compare_arrays(zeros, zeros, {Format::fp32, 0.0}).max_rel, 0.0);
  EXPECT_THROW(compare_arrays(a, r, {Format::fp32, -1.0}), std::invalid_argument);
  EXPECT_THROW(compare_arrays(a, r, {Format::fp32, kInf}), std::invalid_argument) << "would make every relative error 0";
  EXPECT_THROW(compare_arrays(a, r, {Format::fp32, kNaN}), std::invalid_argument);
}

// bf16(1/3) = 171/512, so against the exact 1/3 the error is 1/1536 exactly, a third of bf16's
// spacing 2^-9 at 1/3. A quad reference keeps that exact; the metric carries it to double.
TEST(Metrics, Bf16AgainstAQuadReference) {
  const std::vector<bf16> a{round_to<bf16>(1.0 / 3.0, Rounding::nearest_even)};
  ASSERT_EQ(to_double(a[0]), 171.0 / 512.0);
  const std::vector<quad> r{quad(1) / 3};
  const ErrorMetrics m = compare_arrays(a, r, {Format::bf16, 0.0});
  EXPECT_DOUBLE_EQ(m.max_abs, 1.0 / 1536.0);
  EXPECT_DOUBLE_EQ(m.max_ulp, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.max_rel, 3.0 / 1536.0);
  EXPECT_DOUBLE_EQ(m.mean_signed, 1.0 / 1536.0);
}

TEST(Metrics, Fp16AgainstFloatAndUlpsInTheSubnormalRange) {
  const std::vector<fp16> a{fp16{0x7bff}};  // 65504
  const std::vector<float> r{65519.0f};
  EXPECT_EQ(compare_arrays(a, r, {Format::fp16, 0.0}).max_ulp, 15.0 / 32.0);
  // 2^-24 (the smallest subnormal) against 1e-8: ULPs count in the subnormal spacing 2^-24.
  const std::vector<fp16> s{fp16{0x0001}};
  const std::vector<double> rs{1e-8};
  EXPECT_DOUBLE_EQ(compare_arrays(s, rs, {Format::fp16, 0.0}).max_ulp, (std::ldexp(1, -24) - 1e-8) / std::ldexp(1, -24));
}

TEST(Metrics, NonFiniteValuesAreCountedNeverSkipped) {
  {  // NaN in the result where the reference is finite: unbounded error
    const std::vector<double> a{1.0, kNaN, 2.0}, r{1.0, 5.0, 2.0};
    const ErrorMetrics m = compare_arrays(a, r, {Format::fp32, 0.0});
    EXPECT_EQ(m.nonfinite_actual, 1u);
    EXPECT_EQ(m.nonfinite_mismatch, 1u);
    EXPECT_EQ(m.max_abs, kInf);
    EXPECT_EQ(m.max_abs_index, 1u);
    EXPECT_EQ(m.rms, kInf);
    EXPECT_EQ(m.max_rel, kInf);
    EXPECT_EQ(m.max_ulp, kInf);
    EXPECT_TRUE(std::isnan(m.cosine));
    EXPECT_TRUE(std::isnan(m.mean_signed));
  }
  {  // agreeing non-finite values (both NaN, the same Inf) are exact
    const std::vector<double> a{kNaN, kInf, -kInf, 1.0}, r{kNaN, kInf, -kInf, 1.5};
    const ErrorMetrics m = compare_arrays(a, r, {Format::fp32, 0.0});
    EXPECT_EQ(m.nonfinite_actual, 3u);
    EXPECT_EQ(m.nonfinite_reference, 3u);
    EXPECT_EQ(m.nonfinite_mismatch, 0u);
    EXPECT_EQ(m.max_abs, 0.5);
    EXPECT_EQ(m.max_abs_index, 3u);
  }
  {  // +Inf against -Inf, and Inf in the reference only
    const std::vector<double> a{kInf, 1.0}, r{-kInf, kInf};
    const ErrorMetrics m = compare_arrays(a, r, {Format::fp32, 0.0});
    EXPECT_EQ(m.nonfinite_mismatch, 2u);
    EXPECT_EQ(m.nonfinite_reference, 2u);
    EXPECT_EQ(m.max_abs, kInf);
  }
  {  // bf16 NaN against a quad reference
    const std::vector<bf16> a{bf16{0x7fc0}};
    const std::vector<quad> r{quad(1)};
    EXPECT_EQ(compare_arrays(a, r, {Format::bf16, 0.0}).nonfinite_mismatch, 1u);
  }
}

TEST(Metrics, RmsNeitherOverflowsNorUnderflows) {
  const std::vector<double> a{1e200, 1e-200}, zero{0.0, 0.0};
  EXPECT_DOUBLE_EQ(compare_arrays(a, zero, {Format::fp64, 0.0}).rms, 1e200 / std::sqrt(2.0));
  const std::vector<double> tiny{1e-300, 1e-300, 1e-300};
  const std::vector<double> zero3{0.0, 0.0, 0.0};
  EXPECT_DOUBLE_EQ(compare_arrays(tiny, zero3, {Format::fp64, 0.0}).rms, 1e-300);
}

// Found in review: a finite pair whose difference overflows double made rms NaN (Inf/Inf in the
// scaled sum of squares), which a check like !(rms > tol) would pass.
TEST(Metrics, AnOverflowingDifferenceIsInfiniteNeverNan) {
  const std::vector<double> a{1e308, 1e308, 1.0}, r{-1e308, -1e308, 1.0};
  const ErrorMetrics m = compare_arrays(a, r, {Format::fp64, 0.0});
  EXPECT_EQ(m.max_abs, kInf);
  EXPECT_EQ(m.rms, kInf);
  EXPECT_EQ(m.max_rel, kInf);
  EXPECT_EQ(m.nonfinite_mismatch, 0u) << "both values of each pair are finite";
}

// Found in review: a quad reference beyond double's range made the relative error and ULP distance
// NaN, which std::fmax then dropped (reporting 0).
TEST(Metrics, AReferenceBeyondDoubleRangeKeepsItsRatios) {
  const std::vector<double> a{1e308};
  const std::vector<quad> r{quad("1e400")};
  const ErrorMetrics m = compare_arrays(a, r, {Format::fp64, 0.0});
  EXPECT_NEAR(m.max_rel, 1.0, 1e-15);  // (1e400 - 1e308) / 1e400
  EXPECT_GT(m.max_ulp, 1e15);
  EXPECT_FALSE(std::isnan(m.max_ulp));
  EXPECT_EQ(m.max_abs, kInf);
}

// Found in review: the ULP spacing was taken from the reference after rounding it to double, so a
// quad reference just below a power of two got the next binade's spacing (half the true ULPs).
TEST(Metrics, UlpSpacingComesFromTheWideReference) {
  const std::vector<float> a{0x1.fffffep0f};  // 2 - 2^-23
  const std::vector<quad> r{quad(2) - boost::multiprecision::ldexp(quad(1), -60)};
  // |diff| = 2^-23 - 2^-60 against fp32's spacing 2^-23 in [1, 2): 1 - 2^-37 ULP
  EXPECT_NEAR(compare_arrays(a, r, {Format::fp32, 0.0}).max_ulp, 1.0, 1e-10);
}

TEST(Metrics, AgreeingNonFiniteValuesDoNotDiluteTheAverages) {
  const std::vector<double> a{kNaN, kNaN, kNaN, 1.0}, r{kNaN, kNaN, kNaN, 0.0};
  const ErrorMetrics m = compare_arrays(a, r, {Format::fp32, 0.0});
  EXPECT_EQ(m.finite_pairs, 1u);
  EXPECT_EQ(m.rms, 1.0);
  EXPECT_EQ(m.mean_signed, 1.0);
}

TEST(Metrics, CosineOfZeroVectors) {
  const std::vector<double> z{0.0, 0.0}, v{1.0, 0.0};
  EXPECT_EQ(compare_arrays(z, z, {Format::fp32, 0.0}).cosine, 1.0);
  EXPECT_EQ(compare_arrays(z, v, {Format::fp32, 0.0}).cosine, 0.0);
  EXPECT_EQ(compare_arrays(v, v, {Format::fp32, 0.0}).cosine, 1.0);
}

// Near a zero reference every error is a huge number of ULPs of the reference itself (the spacing
// there is the smallest subnormal); with a floor the spacing is taken at the floor instead.
TEST(Metrics, UlpsNearZeroAreCountedAtTheFloor) {
  const std::vector<double> a{1e-7, 1.0}, r{0.0, 1.0};
  EXPECT_EQ(compare_arrays(a, r, {Format::bf16, 0.0}).max_ulp, 1e-7 / std::ldexp(1.0, -133));
  EXPECT_DOUBLE_EQ(compare_arrays(a, r, {Format::bf16, 0.5}).max_ulp, 1e-7 / std::ldexp(1.0, -8));  // bf16 spacing in [0.5, 1): 2^(-1-7)
}

TEST(Metrics, EmptyAndMismatchedArrays) {
  const std::vector<double> empty;
  const ErrorMetrics m = compare_arrays(empty, empty, {Format::fp32, 0.0});
  EXPECT_EQ(m.count, 0u);
  EXPECT_EQ(m.max_abs, 0.0);
  const std::vector<double> one{1.0}, two{1.0, 2.0};
  EXPECT_THROW(compare_arrays(one, two, {Format::fp32, 0.0}), std::invalid_argument);
}

}  // namespace
}  // namespace fc
