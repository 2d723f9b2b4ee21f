// cuda.fa3's fused backward converts dQ from its fp32 accumulator either after the key-tiled pass (dq_convert=after)
// or overlapped with it (the default: a dependent launch whose blocks wait for each kv head's count, fa3_backward.cu).
// The two must agree: dK and dV bit for bit (the conversion does not touch them), and dQ within one unit in the last
// place of the gradient's format, the only difference fp32 sums of the same partials in another order can make once
// rounded (the fused pass's order of additions varies from run to run in either form; a conversion that read a head
// before all its partials were in would be off by whole partials). The shapes take more than one wave of the pass on
// an H100 or H200 (132 SMs), so the conversion's blocks start while the pass still runs; with a query tail, GQA, both
// masks, one query row (a conversion block spans several kv heads), bf16 and fp16, SR, head dims 64 and 128.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "gradcheck/caller.hpp"
#include "gradcheck/inputs.hpp"
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"
#include "precision/format.hpp"

namespace fc::kernels::cuda {
namespace {

std::unique_ptr<Subject> fa3_converting(const std::string& when) {
  auto s = testing::registered_subject("cuda.fa3");
  if (s) s->set_option("dq_convert", when);
  return s;
}

TEST(Fa3Backward, OverlappedDqConversionAgreesWithTheOneAfter) {
  REQUIRE_HOPPER();
  auto after = fa3_converting("after"), overlapped = fa3_converting("overlapped");
  ASSERT_TRUE(after && overlapped) << "cuda.fa3 is not registered on this Hopper GPU";
  struct Shape {
    int batch, heads_q, heads_kv, nq, nk;
  };
  const Shape shapes[] = {{2, 8, 8, 2100, 2100}, {2, 8, 4, 2100, 2100}, {3, 8, 2, 1, 300}, {1, 16, 16, 1000, 4100}};
  int compared = 0;
  for (const char* policy : {"bf16", "fp16", "bf16,round=sr,seed=11"}) {
    for (int d : {64, 128}) {
      for (const Shape& sh : shapes) {
        for (Mask m : {Mask::none, Mask::causal_bottom_right}) {
          gradcheck::Case c;
          c.shape = {sh.batch, sh.heads_q, sh.heads_kv, sh.nq, sh.nk, d, d};
          c.mask = m, c.scale = 1 / std::sqrt(static_cast<double>(d));
          c.policy = PrecisionPolicy::parse(policy);
          c.seed = static_cast<std::uint64_t>(d * 100000 + sh.nq + 7 * sh.heads_kv);
          const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
          const gradcheck::Outputs f = gradcheck::Caller(*after, c).fwd(in.q, in.k, in.v);
          const gradcheck::Outputs want = gradcheck::Caller(*after, c).bwd(in.q, in.k, in.v, f, in.dout);
          const gradcheck::Outputs got = gradcheck::Caller(*overlapped, c).bwd(in.q, in.k, in.v, f, in.dout);
          for (const char* t : {"dK", "dV"}) {
            const testing::Difference diff = testing::differing(got.at(t).values(), want.at(t).values());
            EXPECT_EQ(diff.count, 0u) << t << " differs in " << diff.count << " entries (first at " << diff.first << ") for " << c.to_string();
          }
          const Format grad = c.policy.format(Role::grad);
          const std::vector<double>&a = got.at("dQ").values(), &b = want.at("dQ").values();
          ASSERT_EQ(a.size(), b.size());
          std::size_t beyond = 0, first = a.size();
          for (std::size_t i = 0; i < a.size(); ++i) {
            const double spacing = ulp(grad, std::max(std::fabs(a[i]), std::fabs(b[i])));
            if (!(std::fabs(a[i] - b[i]) <= spacing)) ++beyond, first = std::min(first, i);
          }
          EXPECT_EQ(beyond, 0u) << "dQ: " << beyond << " entries more than one ulp apart (first at " << first << ": " << (first < a.size() ? a[first] : 0)
                                << " against " << (first < b.size() ? b[first] : 0) << ") for " << c.to_string();
          ++compared;
        }
      }
    }
  }
  std::cout << compared << " cases: dK, dV bit for bit and dQ within one ulp, overlapped against after\n";
}

}  // namespace
}  // namespace fc::kernels::cuda
