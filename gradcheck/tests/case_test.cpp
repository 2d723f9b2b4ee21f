#include "gradcheck/case.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "gradcheck/generators.hpp"
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
  EXPECT_NE(message("policy=fp8").find("unknown format"), std::string::npos);
  EXPECT_NE(message("").find("empty"), std::string::npos);
}

}  // namespace
}  // namespace fc::gradcheck
