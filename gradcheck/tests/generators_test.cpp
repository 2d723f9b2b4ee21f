// The generator stays within a subject's declared limits and reaches the cases that matter.
#include "gradcheck/generators.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <set>

namespace fc::gradcheck {
namespace {

kernels::SubjectInfo restricted() {
  kernels::SubjectInfo info;
  info.name = "test.restricted";
  info.ops = {kernels::Op::fwd};
  info.formats = {Format::bf16};
  info.head_dims = {64, 128};
  info.masks = {kernels::Mask::causal_bottom_right};
  info.gqa = false;
  info.separate_dv = false;
  info.max_seq = 100;
  return info;
}

RC_GTEST_PROP(Generators, CasesStayWithinTheSubjectsLimits, ()) {
  const Case c = *case_generator(restricted(), PrecisionPolicy::uniform(Format::bf16));
  RC_ASSERT(c.shape.head_dim == 64 || c.shape.head_dim == 128);
  RC_ASSERT(c.shape.head_dim_v == c.shape.head_dim);
  RC_ASSERT(c.shape.heads_q == c.shape.heads_kv);
  RC_ASSERT(c.mask == kernels::Mask::causal_bottom_right);
  RC_ASSERT(c.shape.seq_q >= 1 && c.shape.seq_q <= 100 && c.shape.seq_k >= 1 && c.shape.seq_k <= 100);
  RC_ASSERT(c.policy == PrecisionPolicy::uniform(Format::bf16));
}

// Over a run: N = 1, primes, non-multiples of 16 beyond 16, GQA, d != dv, every mask and distribution.
TEST(Generators, ReachTheCasesThatMatter) {
  kernels::SubjectInfo info = restricted();
  info.head_dims.clear();
  info.max_head_dim = 128;
  info.gqa = info.separate_dv = true;
  info.masks = {kernels::Mask::none, kernels::Mask::causal_top_left, kernels::Mask::causal_bottom_right};
  info.max_seq = 0;
  const rc::Gen<Case> gen = case_generator(info, PrecisionPolicy::uniform(Format::fp32));
  rc::Random random(3);
  std::set<int> lengths;
  std::set<kernels::Mask> masks;
  std::set<Distribution> inputs;
  bool gqa = false, separate_dv = false, bnhd = false;
  for (int i = 0; i < 500; ++i) {
    const Case c = gen(random.split(), i * 100 / 499).value();
    lengths.insert(c.shape.seq_q), lengths.insert(c.shape.seq_k);
    masks.insert(c.mask), inputs.insert(c.inputs.kind);
    gqa |= c.shape.heads_q > c.shape.heads_kv && c.shape.heads_kv > 1;
    separate_dv |= c.shape.head_dim_v != c.shape.head_dim;
    bnhd |= c.layout == Layout::bnhd;
  }
  for (int n : {1, 2, 17, 31, 33, 63, 65, 127, 129}) EXPECT_TRUE(lengths.count(n)) << "never drew N = " << n;
  EXPECT_EQ(masks.size(), 3u);
  EXPECT_EQ(inputs.size(), 4u);
  EXPECT_TRUE(gqa && separate_dv && bnhd);
}

}  // namespace
}  // namespace fc::gradcheck
