// The checks on fixed cases: cpu.naive passes them all, with every figure in place; the verdict and
// each property check can fail.
#include "gradcheck/checks.hpp"

#include <gtest/gtest.h>

#include "gradcheck/registry.hpp"
#include "gradcheck/tests/broken_subjects.hpp"

namespace fc::gradcheck {
namespace {

const char* kCase = "B=2 Hq=4 Hkv=2 Nq=19 Nk=33 d=8 dv=6 mask=causal_br scale=0.3 inputs=normal:1 layout=bnhd policy=%s seed=5";

Case case_with(const char* policy) {
  char text[256];
  std::snprintf(text, sizeof text, kCase, policy);
  return Case::parse(text);
}

TEST(Checks, CpuNaivePassesEveryOpAndFormat) {
  const Registry registry = Registry::with_builtins();
  kernels::Subject* naive = registry.find("cpu.naive");
  ASSERT_NE(naive, nullptr);
  for (const char* policy : {"bf16", "fp16", "fp32", "fp64", "bf16,round=sr,seed=3"}) {
    for (kernels::Op op : {kernels::Op::fwd, kernels::Op::bwd, kernels::Op::bwdbwd}) {
      const CaseReport r = check_case(*naive, case_with(policy), op, {});
      EXPECT_TRUE(r.pass) << policy << " " << kernels::name(op) << "\n" << r.summary();
      EXPECT_EQ(r.tensors.size(), op == kernels::Op::fwd ? 2u : op == kernels::Op::bwd ? 3u : 4u);
      for (const auto& v : r.tensors) {
        EXPECT_GT(v.baseline.max_abs, 0.0) << v.tensor;
        EXPECT_LE(v.subject.max_abs, r.options.rho * v.baseline.max_abs + v.floor) << v.tensor;
      }
      const bool wide = std::string(policy) == "fp32" || std::string(policy) == "fp64";
      // determinism; and for bwd/bwdbwd zero, homogeneity, additivity (+ self-fd for fp32 and fp64)
      const std::size_t expected = op == kernels::Op::fwd ? 1 : (wide ? 5 : 4);
      EXPECT_EQ(r.properties.size(), expected) << policy << " " << kernels::name(op);
    }
  }
}

TEST(Checks, TheOracleIsAtTheLaddersPrecision) {
  const Registry registry = Registry::with_builtins();
  EXPECT_EQ(check_case(*registry.find("cpu.naive"), case_with("bf16"), kernels::Op::fwd, {}).oracle_type, oracle::OracleType::fp64);
  EXPECT_EQ(check_case(*registry.find("cpu.naive"), case_with("fp64"), kernels::Op::fwd, {}).oracle_type, oracle::OracleType::quad);
}

// A wrong softmax scale shifts O by far more than the baseline's error.
TEST(Checks, TheVerdictFailsAWrongResult) {
  auto broken = testing::make_broken_subject(testing::Bug::wrong_scale);
  const CaseReport r = check_case(*broken, case_with("bf16"), kernels::Op::fwd, {});
  EXPECT_FALSE(r.pass);
  EXPECT_GT(r.worst_ratio, 2.0);
}

TEST(Checks, NonDeterminismIsCaught) {
  auto broken = testing::make_broken_subject(testing::Bug::nondeterministic);
  const CaseReport r = check_case(*broken, case_with("fp32"), kernels::Op::fwd, {});
  ASSERT_FALSE(r.properties.empty());
  EXPECT_EQ(r.properties[0].name, "determinism");
  EXPECT_FALSE(r.properties[0].pass) << r.summary();
}

// A subject that refuses a case within its declared limits has failed it, with its message.
TEST(Checks, ASubjectErrorIsAFailureWithItsMessage) {
  const Registry registry = Registry::with_builtins();
  Case c = case_with("fp32");
  c.shape.head_dim = 300;  // beyond cpu.naive's 256
  const CaseReport r = check_case(*registry.find("cpu.naive"), c, kernels::Op::fwd, {});
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.error.find("unsupported head dim d = 300"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace fc::gradcheck
