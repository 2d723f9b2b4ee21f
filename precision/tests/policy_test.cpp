#include "precision/policy.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <stdexcept>

namespace fc {
namespace {

TEST(Policy, UniformStoresEverythingInTheFormatAndAccumulatesWider) {
  const PrecisionPolicy p = PrecisionPolicy::uniform(Format::bf16);
  for (Role r : {Role::q, Role::k, Role::v, Role::o, Role::dout, Role::grad}) EXPECT_EQ(p.format(r), Format::bf16);
  EXPECT_EQ(p.format(Role::stats), Format::fp32);
  EXPECT_EQ(p.accumulate, Format::fp32);
  EXPECT_EQ(p.rounding, Rounding::nearest_even);
  const PrecisionPolicy d = PrecisionPolicy::uniform(Format::fp64);
  EXPECT_EQ(d.format(Role::stats), Format::fp64);
  EXPECT_EQ(d.accumulate, Format::fp64);
}

TEST(Policy, TextFormIsShortAndCanonical) {
  EXPECT_EQ(PrecisionPolicy::uniform(Format::fp16).to_string(), "fp16");
  PrecisionPolicy p = PrecisionPolicy::uniform(Format::bf16);
  p.set(Role::o, Format::fp32);
  p.rounding = Rounding::stochastic;
  p.seed = 7;
  EXPECT_EQ(p.to_string(), "bf16,o=fp32,round=sr,seed=7");
  EXPECT_EQ(PrecisionPolicy::parse("bf16,o=fp32,round=sr,seed=7"), p);
  EXPECT_EQ(PrecisionPolicy::parse("BF16,round=stochastic,o=float,seed=7"), p);
  EXPECT_EQ(PrecisionPolicy::parse("acc=fp64"), [] {
    PrecisionPolicy q = PrecisionPolicy::uniform(Format::fp32);
    q.accumulate = Format::fp64;
    return q;
  }());
}

TEST(Policy, StreamsAreDistinctPerRole) {
  PrecisionPolicy p = PrecisionPolicy::uniform(Format::bf16);
  p.seed = 99;
  for (Role a : kAllRoles) {
    EXPECT_EQ(p.stream(a).seed, 99u);
    for (Role b : kAllRoles) {
      if (a != b) {
        EXPECT_NE(p.stream(a).stream, p.stream(b).stream) << name(a) << " " << name(b);
      }
    }
  }
}

TEST(Policy, DefaultIsUniformFp32) { EXPECT_EQ(PrecisionPolicy{}, PrecisionPolicy::uniform(Format::fp32)); }

TEST(Policy, BadTextIsRejectedWithTheReason) {
  const auto message = [](const char* text) {
    try {
      PrecisionPolicy::parse(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("").find("empty"), std::string::npos);
  EXPECT_NE(message("fp4").find("unknown format 'fp4'"), std::string::npos);
  EXPECT_NE(message("bf16,x=fp32").find("unknown key 'x'"), std::string::npos);
  EXPECT_NE(message("bf16,o").find("not key=value"), std::string::npos);
  EXPECT_NE(message("bf16,round=up").find("unknown rounding 'up'"), std::string::npos);
  EXPECT_NE(message("bf16,round=sr,seed=-1").find("not an unsigned"), std::string::npos);
  EXPECT_NE(message("bf16,seed=3").find("not stochastic"), std::string::npos);
  EXPECT_NE(message("bf16,o=fp32,O=fp16").find("given twice"), std::string::npos);
  EXPECT_EQ(message("bf16,O=fp32,ROUND=rn"), "accepted") << "keys are case-insensitive, like formats";
}

rc::Gen<Format> any_format() { return rc::gen::element(Format::fp64, Format::fp32, Format::fp16, Format::bf16); }

RC_GTEST_PROP(Policy, ParseInvertsToString, ()) {
  PrecisionPolicy p;
  for (Role r : kAllRoles) p.set(r, *any_format());
  p.accumulate = *any_format();
  p.rounding = *rc::gen::element(Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic);
  p.seed = *rc::gen::arbitrary<std::uint64_t>();
  RC_ASSERT(PrecisionPolicy::parse(p.to_string()) == p);
}

}  // namespace
}  // namespace fc
