// FA4's emulated 2^x (precision/exp2_emulated.hpp): its relative error is the documented 7.49e-5 on
// [-125, 126]; the bit trick (n from x + 1.5 * 2^23, 2^n added to the exponent field) equals ldexp of
// the same cubic at n = nearbyint(x); below -125 the value is that of -125.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "precision/exp2_emulated.hpp"

namespace fc {
namespace {

// The same cubic, with n and f found by the C library instead of the bit trick.
float by_ldexp(float x) {
  const float n = std::nearbyint(std::max(x, -125.0f));  // (round half to even, as the trick rounds)
  const float f = std::max(x, -125.0f) - n;
  float p = std::fma(0.0551716685295105f, f, 0.2426111251115799f);
  p = std::fma(p, f, 0.6932609677314758f);
  p = std::fma(p, f, 0.9999280571937561f);
  return std::ldexp(p, static_cast<int>(n));
}

double relative_error(float x) { return std::fabs(static_cast<double>(exp2_emulated(x)) - std::exp2(static_cast<double>(x))) / std::exp2(static_cast<double>(x)); }

// Ties of the rounding (n + 1/2), both sides of them, the clamp, integers, the domain's ends.
const std::vector<float> kEdges = {-125.0f, -124.5f, -0.5f, 0.5f, -1.5f, 1.5f, -2.5f, 0.0f, -0.0f, -1.0f, 1.0f, 126.0f, 125.5f,
                                   std::nextafter(-0.5f, 0.0f), std::nextafter(-0.5f, -1.0f), std::nextafter(0.5f, 0.0f),
                                   std::nextafter(0.5f, 1.0f), std::nextafter(-124.5f, 0.0f), 1e-30f, -1e-30f, -3.0e-4f};

TEST(Exp2Emulated, ErrorIsAsDocumentedOnAFineGrid) {
  double worst = 0;
  for (double x = -125; x <= 126; x += 1.0 / 4096) worst = std::max(worst, relative_error(static_cast<float>(x)));
  EXPECT_LE(worst, 7.5e-5);
  EXPECT_GE(worst, 7.0e-5) << "the documented error is the polynomial's, not an overestimate";
}

TEST(Exp2Emulated, TheBitTrickIsLdexpOfTheCubic) {
  for (double x = -125; x <= 126; x += 1.0 / 1024) {
    const float xf = static_cast<float>(x);
    ASSERT_EQ(exp2_emulated(xf), by_ldexp(xf)) << "x = " << xf;
  }
  for (float x : kEdges) {
    EXPECT_EQ(exp2_emulated(x), by_ldexp(x)) << "x = " << x;
    EXPECT_LE(relative_error(x), 7.5e-5) << "x = " << x;
  }
}

TEST(Exp2Emulated, BelowMinus125ItIsTheValueAtMinus125) {
  const float at = exp2_emulated(-125.0f);
  EXPECT_GT(at, 0.0f);
  EXPECT_TRUE(std::isnormal(at));
  for (float x : {-125.25f, -126.0f, -200.0f, -1e30f, -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::max()}) {
    EXPECT_EQ(exp2_emulated(x), at) << "x = " << x;
  }
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
