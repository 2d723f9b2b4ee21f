// The harness's power (issue 4 item 7): every deliberately broken subject is caught within 200
// cases, and correct subjects raise no false alarm over 1000 cases.
#include "gradcheck/tests/power.hpp"

#include <gtest/gtest.h>

#include "gradcheck/registry.hpp"

namespace fc::gradcheck::testing {
namespace {

GeneratorLimits limits() {
  GeneratorLimits l;
  l.max_seq = 64;
  return l;
}

class EveryBugIsCaught : public ::testing::TestWithParam<Bug> {};

TEST_P(EveryBugIsCaught, Within200CasesInFp32) {
  auto subject = make_broken_subject(GetParam());
  const Power p = measure_power(*subject, PrecisionPolicy::uniform(Format::fp32), 200, 1, limits());
  EXPECT_TRUE(p.detected) << name(GetParam()) << " survived 200 cases";
  // Caught by a check, not by the subject throwing (which would say nothing of the checks' power).
  EXPECT_EQ(p.caught_by.find("subject error"), std::string::npos) << p.caught_by;
  RecordProperty("cases_to_detection", p.cases);
  std::printf("%-22s caught after %3d cases by %s\n", std::string(name(GetParam())).c_str(), p.cases, p.caught_by.c_str());
}

INSTANTIATE_TEST_SUITE_P(Power, EveryBugIsCaught, ::testing::ValuesIn(all_bugs()),
                         [](const ::testing::TestParamInfo<Bug>& info) { return std::string(name(info.param)); });

// 1000 cases, 250 in each format, each checked under fwd, bwd and bwdbwd.
TEST(Power, CpuNaiveRaisesNoFalseAlarmIn1000Cases) {
  const Registry registry = Registry::with_builtins();
  int cases = 0;
  for (Format f : {Format::bf16, Format::fp16, Format::fp32, Format::fp64}) {
    const Power p = measure_power(*registry.find("cpu.naive"), PrecisionPolicy::uniform(f), 250, 1000 + static_cast<int>(f), GeneratorLimits{});
    EXPECT_FALSE(p.detected) << name(f) << ": false alarm at case " << p.cases << " (" << p.caught_by << ")";
    cases += p.cases;
  }
  EXPECT_EQ(cases, 1000);
}

TEST(Power, TheCorrectTiledControlRaisesNoFalseAlarm) {
  auto control = make_broken_subject(Bug::none);
  for (Format f : {Format::bf16, Format::fp16, Format::fp32}) {
    const Power p = measure_power(*control, PrecisionPolicy::uniform(f), 100, 7, limits());
    EXPECT_FALSE(p.detected) << name(f) << ": " << p.caught_by;
  }
}

}  // namespace
}  // namespace fc::gradcheck::testing
