#include "gradcheck/case.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "gradcheck/generators.hpp"
#include "gradcheck/inputs.hpp"
#include "kernels/builtin_subjects.hpp"

namespace fc::gradcheck {
namespace {

RC_GTEST_PROP(Case, TextFormRoundTrips, ()) {
  auto subjects = kernels::make_builtin_subjects();
  const Case c = *case_generator(subjects.front()->info(), PrecisionPolicy::parse("bf16,o=fp32,round=sr,seed=9"));
  const Case back = Case::parse(c.to_string());
  RC_ASSERT(back.to_string() == c.to_string());
  RC_ASSERT(back.scale == c.scale);
  RC_ASSERT(back.policy == c.policy);
}

TEST(Case, BadTextIsRejectedWithTheField) {
  const auto message = [](const char* text) {
    try {
      Case::parse(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("B=1 Nq=0").find("'Nq=0'"), std::string::npos);
  EXPECT_NE(message("mask=sideways").find("unknown mask"), std::string::npos);
  EXPECT_NE(message("inputs=cauchy").find("unknown inputs"), std::string::npos);
  EXPECT_NE(message("Hq=3 Hkv=2").find("not a multiple"), std::string::npos);
  EXPECT_NE(message("policy=fp4").find("unknown format"), std::string::npos);
  EXPECT_NE(message("").find("empty"), std::string::npos);
  EXPECT_NE(message("inputs=outliers:2:10").find("rate must be in [0, 1]"), std::string::npos);
  EXPECT_NE(message("inputs=outliers:0.1").find("needs both"), std::string::npos);
  EXPECT_NE(message("inputs=logits:0").find("must be > 0"), std::string::npos);
}

TEST(Case, SweptDistributionsRoundTripAndKeepTheirNames) {
  for (const char* text : {"normal:0.5", "outliers", "outliers:0.01:30", "onehot", "uniform", "logits:4", "logits:0.125"}) {
    EXPECT_EQ(InputDistribution::parse(text).to_string(), text);
  }
  EXPECT_EQ(InputDistribution::parse("outliers:0.001:10").to_string(), "outliers");  // the default mix
  EXPECT_EQ(InputDistribution::parse("onehot").logit_sigma(), 16.0);
  EXPECT_EQ(InputDistribution::parse("logits:16").logit_sigma(), 16.0);
  EXPECT_EQ(InputDistribution::parse("normal:2").logit_sigma(), 0.0);
}

// logits:T draws Q and K so that the logits s q.k have standard deviation T: measured over a large case.
TEST(Case, LogitsDistributionHitsItsStandardDeviation) {
  for (double target : {0.01, 1.0, 16.0}) {
    Case c = Case::parse("B=1 Hq=1 Hkv=1 Nq=64 Nk=64 d=64 dv=64 mask=none scale=0.125 inputs=normal:1 layout=bhnd policy=fp64 seed=3");
    c.inputs = {Distribution::logits, target};
    const CaseInputs in = make_inputs(c);
    const auto q = in.q.values(), k = in.k.values();
    double sum2 = 0;
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 64; ++j) {
        double s = 0;
        for (int e = 0; e < 64; ++e) s += q[i * 64 + e] * k[j * 64 + e];
        sum2 += (c.scale * s) * (c.scale * s);
      }
    // 4096 logits: the sample standard deviation is within a few percent of the target
    EXPECT_NEAR(std::sqrt(sum2 / 4096) / target, 1.0, 0.1) << target;
  }
}

}  // namespace
}  // namespace fc::gradcheck
