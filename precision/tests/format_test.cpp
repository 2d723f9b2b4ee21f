#include "precision/format.hpp"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

namespace fc {
namespace {

TEST(Format, UnitRoundoffsAreTwoToTheMinusPrecision) {
  EXPECT_EQ(unit_roundoff(Format::fp64), std::ldexp(1.0, -53));
  EXPECT_EQ(unit_roundoff(Format::fp32), std::ldexp(1.0, -24));
  EXPECT_EQ(unit_roundoff(Format::fp16), std::ldexp(1.0, -11));
  EXPECT_EQ(unit_roundoff(Format::bf16), std::ldexp(1.0, -8));
  EXPECT_EQ(format_info(Format::fp64).machine_epsilon(), DBL_EPSILON);
  EXPECT_EQ(format_info(Format::fp32).machine_epsilon(), FLT_EPSILON);
}

TEST(Format, RangesMatchTheStandardLimits) {
  EXPECT_EQ(format_info(Format::fp64).max_finite(), DBL_MAX);
  EXPECT_EQ(format_info(Format::fp32).max_finite(), FLT_MAX);
  EXPECT_EQ(format_info(Format::fp16).max_finite(), 65504.0);
  EXPECT_EQ(format_info(Format::bf16).max_finite(), 0x1.fep127);
  EXPECT_EQ(format_info(Format::fp32).min_normal(), FLT_MIN);
  EXPECT_EQ(format_info(Format::fp64).min_subnormal(), std::ldexp(1.0, -1074));
  EXPECT_EQ(format_info(Format::fp32).min_subnormal(), std::ldexp(1.0, -149));
  EXPECT_EQ(format_info(Format::fp16).min_subnormal(), std::ldexp(1.0, -24));
  EXPECT_EQ(format_info(Format::bf16).min_subnormal(), std::ldexp(1.0, -133));
}

TEST(Format, UlpIsTheSpacingAtTheValue) {
  EXPECT_EQ(ulp(Format::fp32, 1.0), FLT_EPSILON);
  EXPECT_EQ(ulp(Format::fp32, 1.9999), FLT_EPSILON);
  EXPECT_EQ(ulp(Format::fp32, 2.0), 2 * FLT_EPSILON);
  EXPECT_EQ(ulp(Format::fp32, -2.0), 2 * FLT_EPSILON);
  EXPECT_EQ(ulp(Format::bf16, 1.0), 1.0 / 128);
  EXPECT_EQ(ulp(Format::bf16, 0.75), 1.0 / 256);
  EXPECT_EQ(ulp(Format::fp16, 65504.0), 32.0);
  EXPECT_EQ(ulp(Format::fp16, 1e5), 64.0) << "beyond the range the spacing keeps growing";
  // Subnormal range and zero: the fixed subnormal spacing.
  EXPECT_EQ(ulp(Format::fp16, 1e-7), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp(Format::fp16, 0.0), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp(Format::fp64, 0.0), std::ldexp(1.0, -1074));
  EXPECT_TRUE(std::isnan(ulp(Format::fp32, INFINITY)));
  EXPECT_TRUE(std::isnan(ulp(Format::fp32, NAN)));
}

TEST(Format, ParsesNamesAndAliases) {
  EXPECT_EQ(parse_format("bf16"), Format::bf16);
  EXPECT_EQ(parse_format("BFloat16"), Format::bf16);
  EXPECT_EQ(parse_format("half"), Format::fp16);
  EXPECT_EQ(parse_format("float32"), Format::fp32);
  EXPECT_EQ(parse_format("double"), Format::fp64);
  EXPECT_FALSE(parse_format("fp4").has_value());
  EXPECT_EQ(parse_format("fp8"), Format::e4m3);
  EXPECT_FALSE(parse_format("").has_value());
  for (Format f : kAllFormats) EXPECT_EQ(parse_format(name(f)), f);
}

}  // namespace
}  // namespace fc
