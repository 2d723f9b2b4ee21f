// FA4's emulated 2^x (precision/exp2_emulated.hpp): its relative error is the documented 7.484e-5 on
// [-125, 126]; the bit trick (n from x + 1.5 * 2^23, 2^n added to the exponent field) equals ldexp of
// the same cubic at n = nearbyint(x); outside the domain the value is that of its nearer end; NaN stays NaN.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "precision/exp2_emulated.hpp"

namespace fc {
namespace {

// The same cubic, with n and f found by the C library instead of the bit trick (the polynomial itself is
// checked against std::exp2 by the error bounds).
float by_ldexp(float x) {
  const float y = std::min(std::max(x, -125.0f), 126.0f);
  const float n = std::nearbyint(y);  // (round half to even, as the trick rounds; at the ties either gives the same bits)
  const float f = y - n;
  float p = std::fma(0.0551716685295105f, f, 0.2426111251115799f);
  p = std::fma(p, f, 0.6932609677314758f);
  p = std::fma(p, f, 0.9999280571937561f);
  return std::ldexp(p, static_cast<int>(n));
}

double relative_error(float x) { return std::fabs(static_cast<double>(exp2_emulated(x)) - std::exp2(static_cast<double>(x))) / std::exp2(static_cast<double>(x)); }

// The ends of f's interval (n + 1/2) and both sides of them, the clamp, integers, the domain's ends, and the
// positive arguments selective rescaling passes (up to tau <= 30).
const std::vector<float> kEdges = {-125.0f, -124.5f, -0.5f, 0.5f, -1.5f, 1.5f, -2.5f, 0.0f, -0.0f, -1.0f, 1.0f, 126.0f, 125.5f,
                                   std::nextafter(-0.5f, 0.0f), std::nextafter(-0.5f, -1.0f), std::nextafter(0.5f, 0.0f),
                                   std::nextafter(0.5f, 1.0f), std::nextafter(-124.5f, 0.0f), 1e-30f, -1e-30f, -3.0e-4f, 8.0f, 7.5f, 29.99f, 30.0f};

TEST(Exp2Emulated, ErrorIsAsDocumentedOnAFineGrid) {
  double worst = 0;
  for (double x = -125; x <= 126; x += 1.0 / 4096) worst = std::max(worst, relative_error(static_cast<float>(x)));
  EXPECT_LE(worst, 7.5e-5);
  EXPECT_GE(worst, 7.0e-5) << "the documented error is the polynomial's, not an overestimate";
}

TEST(Exp2Emulated, TheBitTrickIsLdexpOfTheCubic) {
  for (double x = -125; x <= 126; x += 1.0 / 1024) {
    const float xf = static_cast<float>(x);
    ASSERT_EQ(bits_of(exp2_emulated(xf)), bits_of(by_ldexp(xf))) << "x = " << xf;
  }
  for (float x : kEdges) {
    EXPECT_EQ(bits_of(exp2_emulated(x)), bits_of(by_ldexp(x))) << "x = " << x;
    EXPECT_LE(relative_error(x), 7.5e-5) << "x = " << x;
  }
}

TEST(Exp2Emulated, OutsideTheDomainItIsTheValueAtTheNearerEnd) {
  const float low = exp2_emulated(-125.0f), high = exp2_emulated(126.0f);
  EXPECT_GT(low, 0.0f);
  EXPECT_TRUE(std::isnormal(low));
  EXPECT_TRUE(std::isfinite(high));
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (float x : {-125.25f, -126.0f, -200.0f, -1e30f, -kInf, -std::numeric_limits<float>::max()}) EXPECT_EQ(bits_of(exp2_emulated(x)), bits_of(low)) << "x = " << x;
  for (float x : {126.25f, 127.6f, 128.2f, 1e30f, kInf}) EXPECT_EQ(bits_of(exp2_emulated(x)), bits_of(high)) << "x = " << x;
}

// (an argument made of inf - inf, a score past fp32's range, must not come back as a small weight)
TEST(Exp2Emulated, NanStaysNan) {
  EXPECT_TRUE(std::isnan(exp2_emulated(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp2_emulated(-std::numeric_limits<float>::quiet_NaN())));
}

RC_GTEST_PROP(Exp2Emulated, AnyArgumentInTheDomainIsWithinTheBound, ()) {
  const float x = *rc::gen::map(rc::gen::inRange(-125 * 65536, 126 * 65536), [](int i) { return static_cast<float>(i) / 65536.0f; });
  const float tiny = *rc::gen::element(0.0f, 1e-7f, -1e-7f, 3e-39f);  // (bits below the grid, subnormal offsets)
  const float arg = x + tiny;
  RC_ASSERT(relative_error(arg) <= 7.5e-5);
  RC_ASSERT(exp2_emulated(arg) == by_ldexp(arg));
}

}  // namespace
}  // namespace fc
