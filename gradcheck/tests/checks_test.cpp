// The checks on fixed cases: cpu.naive passes them all, with every figure in place; the verdict and
// each property check can fail.
#include "gradcheck/checks.hpp"

#include <gtest/gtest.h>

#include "gradcheck/registry.hpp"
#include "gradcheck/tests/broken_subjects.hpp"
#include "kernels/tensor_io.hpp"

#include <algorithm>
#include <cmath>

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


// --- each oracle-free property can fail ----------------------------------------------------------

// cpu.naive with its bwd outputs post-processed elementwise: x -> distort(x).
class Distorted final : public kernels::Subject {
 public:
  Distorted(kernels::Subject& inner, double (*distort)(double)) : inner_(inner), distort_(distort), info_(inner.info()) {
    info_.name = "test.distorted";
  }
  const kernels::SubjectInfo& info() const override { return info_; }
  void run(kernels::Op op, const kernels::AttentionCall& call) override {
    inner_.run(op, call);
    if (op != kernels::Op::bwd) return;
    for (const kernels::TensorView* t : {&call.dq, &call.dk, &call.dv}) {
      std::vector<double> x = kernels::read_as_double(*t);
      for (double& e : x) e = distort_(e);
      kernels::write_from(*t, x, Rounding::nearest_even);
    }
  }

 private:
  kernels::Subject& inner_;
  double (*distort_)(double);
  kernels::SubjectInfo info_;
};

const PropertyCheck* property(const CaseReport& r, const std::string& name) {
  for (const PropertyCheck& p : r.properties) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// An offset of 1e-30 is far below any verdict's floor; the zero property sees it all the same, since
// a zero cotangent must give exactly zero.
TEST(Checks, ZeroCatchesAnAffineGradient) {
  const Registry registry = Registry::with_builtins();
  Distorted subject(*registry.find("cpu.naive"), [](double x) { return x + 1e-30; });
  const CaseReport r = check_case(subject, case_with("fp32"), kernels::Op::bwd, {});
  const PropertyCheck* p = property(r, "zero");
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->pass) << p->detail;
  EXPECT_TRUE(std::all_of(r.tensors.begin(), r.tensors.end(), [](const TensorVerdict& v) { return v.pass; }))
      << "the offset is far below the verdict's floor: only the property sees it";
}

// g + 1e-3 g|g| is not homogeneous: doubling the cotangent quadruples the distortion.
TEST(Checks, HomogeneityCatchesANonlinearGradient) {
  const Registry registry = Registry::with_builtins();
  Distorted subject(*registry.find("cpu.naive"), [](double x) { return x + 1e-3 * x * std::fabs(x); });
  const CaseReport r = check_case(subject, case_with("fp32"), kernels::Op::bwd, {});
  const PropertyCheck* p = property(r, "homogeneity");
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->pass) << p->detail;
}

// g + 1e-2 |g| is positively homogeneous (homogeneity passes) but not additive.
TEST(Checks, AdditivityCatchesAHomogeneousNonlinearGradient) {
  const Registry registry = Registry::with_builtins();
  Distorted subject(*registry.find("cpu.naive"), [](double x) { return x + 1e-2 * std::fabs(x); });
  const CaseReport r = check_case(subject, case_with("fp32"), kernels::Op::bwd, {});
  const PropertyCheck* h = property(r, "homogeneity");
  const PropertyCheck* a = property(r, "additivity");
  ASSERT_NE(h, nullptr);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(h->pass) << h->detail;
  EXPECT_FALSE(a->pass) << a->detail;
}

// Outputs are poisoned before each call: a subject that leaves entries unwritten fails.
class SkipsLastRow final : public kernels::Subject {
 public:
  explicit SkipsLastRow(kernels::Subject& inner) : inner_(inner), info_(inner.info()) { info_.name = "test.skips_last_row"; }
  const kernels::SubjectInfo& info() const override { return info_; }
  void run(kernels::Op op, const kernels::AttentionCall& call) override {
    if (op != kernels::Op::fwd) return inner_.run(op, call);
    // keep the poisoned contents of O's last row of the last head: compute into a copy, write the rest
    std::vector<double> before = kernels::read_as_double(call.out_o);
    inner_.run(op, call);
    std::vector<double> after = kernels::read_as_double(call.out_o);
    const std::size_t row = static_cast<std::size_t>(call.shape.head_dim_v);
    std::copy(before.end() - static_cast<std::ptrdiff_t>(row), before.end(), after.end() - static_cast<std::ptrdiff_t>(row));
    kernels::write_from(call.out_o, after, Rounding::nearest_even);
  }

 private:
  kernels::Subject& inner_;
  kernels::SubjectInfo info_;
};

TEST(Checks, AnUnwrittenOutputIsCaught) {
  const Registry registry = Registry::with_builtins();
  SkipsLastRow subject(*registry.find("cpu.naive"));
  const CaseReport r = check_case(subject, case_with("fp32"), kernels::Op::fwd, {});
  EXPECT_FALSE(r.pass);
  ASSERT_FALSE(r.tensors.empty());
  EXPECT_EQ(r.tensors[0].tensor, "O");
  EXPECT_FALSE(r.tensors[0].pass);
  EXPECT_GT(r.tensors[0].subject.nonfinite_mismatch, 0u);
}
}  // namespace
}  // namespace fc::gradcheck
