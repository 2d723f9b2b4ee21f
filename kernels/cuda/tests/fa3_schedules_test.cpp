// cuda.fa3's schedules (fa3_kernels.hpp) change when each step of the forward runs, not what it computes:
// every schedule must give one_group's O and L bit for bit. The shapes reach each schedule's edges: one key
// tile and several (the overlapped loop's last step is its own code; 1, 2, 3 and 5 tiles), key and query tails,
// a CTA whose second warpgroup has no rows (Nq <= 64; with three groups, Nq <= 128 leaves the third without),
// P held in registers and (3groups_p_shared) in shared memory, three groups with and without turns (without, P in
// shared memory is handed to P V by each group's own barrier),
// both causal alignments (the lower warpgroups walk fully masked tiles, and with Nq > Nk rows see no key), GQA,
// stochastic rounding (the same words), bf16 and fp16, head dims 64 and 128.
#include <gtest/gtest.h>

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

std::unique_ptr<Subject> fa3_with(const std::string& schedule) {
  auto s = testing::registered_subject("cuda.fa3");
  if (s) s->set_option("schedule", schedule);
  return s;
}

TEST(Fa3Schedules, EveryScheduleGivesOneGroupsBits) {
  REQUIRE_HOPPER();
  auto reference = fa3_with("one_group");
  ASSERT_TRUE(reference) << "cuda.fa3 is not registered on this Hopper GPU";
  const char* schedules[] = {"ws", "ws_overlap", "ws_overlap_pingpong", "ws_overlap_pingpong_3stage", "ws_overlap_pingpong_3groups",
                             "ws_overlap_pingpong_3groups_p_shared", "ws_overlap_3groups", "ws_overlap_3groups_p_shared", "auto"};
  std::vector<gradcheck::Case> cases;
  for (const char* policy : {"bf16", "bf16,round=sr,seed=5", "fp16"}) {
    for (int d : {64, 128}) {
      for (int nq : {1, 65, 129, 300}) {
        for (int nk : {1, 128, 129, 383, 640}) {
          for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
            cases.push_back(testing::forward_case({2, 4, 2, nq, nk, d, d}, m, policy));
          }
        }
      }
    }
  }
  int compared = 0;
  for (const gradcheck::Case& c : cases) {
    const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
    const gradcheck::Outputs want = gradcheck::Caller(*reference, c).fwd(in.q, in.k, in.v);
    for (const char* schedule : schedules) {
      auto subject = fa3_with(schedule);
      if (!subject->info().supports_head_dim(c.shape.head_dim)) continue;  // (3groups: d = 64 only; 3groups_p_shared: d = 128 only)
      testing::expect_output_bits(gradcheck::Caller(*subject, c).fwd(in.q, in.k, in.v), want, schedule, "one_group", c);
      ++compared;
    }
  }
  std::cout << compared << " (case, schedule) pairs compared with one_group bit for bit\n";
}

}  // namespace
}  // namespace fc::kernels::cuda
