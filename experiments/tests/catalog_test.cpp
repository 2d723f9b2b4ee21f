// The experiments' plans, without running them: attnres-error puts to a subject only the policies it
// accepts (a subject without stochastic rounding gets the RN ones, not failed SR items).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "experiments/experiment.hpp"
#include "gradcheck/registry.hpp"
#include "kernels/cpu/attnres.hpp"

namespace fc::experiments {
namespace {

// cpu.attnres's description, renamed and without stochastic rounding (a plugin could be like this).
class RnOnlyAttnRes final : public kernels::Subject {
 public:
  RnOnlyAttnRes() : inner_(kernels::cpu::make_cpu_attnres()), info_(inner_->info()) {
    info_.name = "test.attnres_rn", info_.stochastic_rounding = false;
  }
  const kernels::SubjectInfo& info() const override { return info_; }
  void run_attnres(kernels::Op op, const kernels::AttnResCall& c) override { inner_->run_attnres(op, c); }

 private:
  std::unique_ptr<kernels::Subject> inner_;
  kernels::SubjectInfo info_;
};

TEST(AttnResErrorPlan, LeavesOutThePoliciesASubjectRefuses) {
  gradcheck::Registry registry;
  registry.add(std::make_unique<RnOnlyAttnRes>());
  registry.add(kernels::cpu::make_cpu_attnres());
  ExperimentContext ctx;
  ctx.registry = &registry, ctx.scale = Scale::test;
  const Experiment* e = find_experiment("attnres-error");
  ASSERT_NE(e, nullptr);
  int rn_only = 0, rn_only_sr = 0, full_sr = 0;
  for (const WorkItem& item : e->plan(ctx)) {
    const bool sr = item.label.find("round=sr") != std::string::npos;
    if (item.label.rfind("test.attnres_rn ", 0) == 0) {
      ++rn_only, rn_only_sr += sr;
    } else {
      full_sr += sr;
    }
  }
  EXPECT_GT(rn_only, 0);
  EXPECT_EQ(rn_only_sr, 0);
  EXPECT_GT(full_sr, 0);  // cpu.attnres takes the SR policies
}

}  // namespace
}  // namespace fc::experiments
