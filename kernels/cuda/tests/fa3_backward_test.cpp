// cuda.fa3's fused backward converts dQ from its fp32 accumulator either after the key-tiled pass (dq_convert=after)
// or overlapped with it (the default: a dependent launch whose blocks wait for each kv head's count, fa3_backward.cu).
// Both must give the same bits where the accumulator's sum is itself deterministic: with one key tile per kv head
// (Nk <= 128) each dQ entry receives one partial per CTA (d = 128), or two that commute exactly (d = 64: one per
// warpgroup, 0 + a + b = 0 + b + a in IEEE arithmetic), so no order of additions is left to vary. A conversion that
// read a head before its partials were in would differ there by whole partials. With more key tiles the order of the
// fp32 additions varies from run to run in either form, and cancellation makes the difference unbounded in units of
// the result's last place; the harness grades those shapes against the oracle (cuda_attention_test.cpp).
// The shapes put 48 and 64 CTAs (fewer than the 132 SMs: the conversion's blocks start beside the pass at once) and 300 (more
// than two waves) in the pass; GQA, both masks, one query row (a conversion block spans several kv heads), query
// tails, bf16 and fp16, SR, head dims 64 and 128.
#include <gtest/gtest.h>

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
  const Shape shapes[] = {{2, 150, 150, 200, 128}, {2, 300, 150, 70, 100}, {4, 16, 16, 1000, 128}, {3, 64, 16, 1, 100}};
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
          for (const char* t : {"dQ", "dK", "dV"}) {
            const testing::Difference diff = testing::differing(got.at(t).values(), want.at(t).values());
            EXPECT_EQ(diff.count, 0u) << t << " differs in " << diff.count << " entries (first at " << diff.first << ") for " << c.to_string();
          }
          ++compared;
        }
      }
    }
  }
  std::cout << compared << " cases: dQ, dK and dV bit for bit, overlapped against after\n";
}

}  // namespace
}  // namespace fc::kernels::cuda
