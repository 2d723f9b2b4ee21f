// The persistent scheduler of cuda.fa3 and cuda.fa4 (fa3_forward.cuh, WorkTiles) changes which CTA computes a work
// tile and when, not what: it must give the grid's O and L bit for bit (and cuda.fa4's rescale counts), over shapes
// with several work tiles per CTA (more tiles than SMs), sections of several heads (causal) and of one (no mask),
// query and key tails, both causal alignments, head dims 64 and 128. And the option refuses what the kernel lacks.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <string>

#include "gradcheck/caller.hpp"
#include "gradcheck/inputs.hpp"
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"

namespace fc::kernels::cuda {
namespace {

using testing::counter_of;
using testing::registered_subject;

class PersistentScheduler : public ::testing::TestWithParam<const char*> {};

TEST_P(PersistentScheduler, GivesTheGridsBits) {
  REQUIRE_HOPPER();
  auto grid = registered_subject(GetParam()), persistent = registered_subject(GetParam());
  ASSERT_TRUE(grid && persistent) << GetParam() << " is registered on Hopper";
  grid->set_option("scheduler", "grid"), persistent->set_option("scheduler", "persistent");
  int compared = 0;
  for (const char* policy : {"bf16", "fp16"}) {
    for (int d : {64, 128}) {
      // (B = 3, Hq = 8: 24 (batch, head) pairs; 2000 rows: 16 query tiles, 384 work tiles for about 132 CTAs)
      for (int nq : {1, 300, 2000}) {
        for (int nk : {129, 2000}) {
          for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
            const gradcheck::Case c = testing::forward_case({3, 8, 2, nq, nk, d, d}, m, policy);
            testing::expect_forward_bits(*persistent, *grid, c, "the grid scheduler");
            EXPECT_EQ(counter_of(*persistent, "rescales"), counter_of(*grid, "rescales")) << c.to_string();
            ++compared;
          }
        }
      }
    }
  }
  std::cout << compared << " cases: " << GetParam() << "'s persistent scheduler gives the grid's bits and rescale counts\n";
}

INSTANTIATE_TEST_SUITE_P(Subjects, PersistentScheduler, ::testing::Values("cuda.fa3", "cuda.fa4"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param).substr(5); });

// cuda.fa3's persistent kernel is ws_overlap_pingpong's with 128-key tiles: the option refuses the other schedules
// and key tiles in either order of setting, and names its values.
TEST(PersistentScheduler, Fa3RefusesWhatItsKernelLacks) {
  REQUIRE_HOPPER();
  auto s = registered_subject("cuda.fa3");
  ASSERT_TRUE(s) << "cuda.fa3 is registered on Hopper";
  EXPECT_THROW(s->set_option("scheduler", "dynamic"), SubjectError);
  s->set_option("scheduler", "persistent");
  EXPECT_THROW(s->set_option("schedule", "one_group"), SubjectError);
  EXPECT_THROW(s->set_option("schedule", "ws_overlap_pingpong_3groups"), SubjectError);
  EXPECT_THROW(s->set_option("key_tile", "176"), SubjectError);
  EXPECT_NO_THROW(s->set_option("schedule", "ws_overlap_pingpong"));
  s->set_option("scheduler", "grid");
  s->set_option("schedule", "ws");
  EXPECT_THROW(s->set_option("scheduler", "persistent"), SubjectError);
  s->set_option("schedule", "auto");
  s->set_option("key_tile", "176");
  EXPECT_THROW(s->set_option("scheduler", "persistent"), SubjectError);
  EXPECT_NO_THROW(s->set_option("scheduler", "auto"));
}

}  // namespace
}  // namespace fc::kernels::cuda
