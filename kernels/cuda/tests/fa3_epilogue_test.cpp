// The forwards' two ways of storing O (Fa3Epilogue): through shared memory and a TMA store per box, or by 4-byte
// global stores. Both round O / l to nearest with cvt.rn, so they must give the same O and L bits: the grid kernels
// that stage O (two consumer groups, three at d = 64 under auto, three with P in shared memory at d = 128 with and
// without turns (the group's barrier then also hands P to P V), the non-overlapped ws, cuda.fa3's and cuda.fa4's
// grid scheduler, and their persistent one, whose CTAs walk several work tiles here and stage O in the Q buffer that
// the producer reloads two tiles on), over tails (rows past Nq clipped by the map), masks, GQA and both formats. Stochastic
// rounding always takes the global stores (each element's Philox word); the harness's cases cover those.
// cuda.fa3.fp8's O by TMA (its block exponents, e4m3 operands) is tested with its own inputs in fa3_fp8_test.cpp
// (OByTmaGivesTheGlobalStoresBits).
#include <gtest/gtest.h>

#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"

namespace fc::kernels::cuda {
namespace {

using testing::registered_subject;

// (subject, option, value): each run with epilogue=automatic against the same with epilogue=stores. One test per
// variant, so that gtest's shards spread them (all eight in one test took 306 s of a 16-shard gpu run at 2000 cases).
struct EpilogueVariant {
  std::string subject, option, value;
};
const EpilogueVariant kEpilogueVariants[] = {
    {"cuda.fa3", "schedule", "auto"},
    {"cuda.fa3", "schedule", "ws"},
    {"cuda.fa3", "schedule", "ws_overlap_pingpong_3groups_p_shared"},
    {"cuda.fa3", "schedule", "ws_overlap_3groups_p_shared"},
    {"cuda.fa3", "scheduler", "grid"},  // (auto above is persistent under causal masks at d = 128)
    {"cuda.fa3", "scheduler", "persistent"},
    {"cuda.fa4", "scheduler", "grid"},
    {"cuda.fa4", "scheduler", "persistent"}};

void PrintTo(const EpilogueVariant& v, std::ostream* os) { *os << v.subject << " " << v.option << "=" << v.value; }

class TmaStore : public ::testing::TestWithParam<EpilogueVariant> {};

TEST_P(TmaStore, GivesTheGlobalStoresBits) {
  REQUIRE_HOPPER();
  const EpilogueVariant& v = GetParam();
  auto tma = registered_subject(v.subject), stores = registered_subject(v.subject);
  ASSERT_TRUE(tma && stores) << v.subject << " is registered on Hopper";
  tma->set_option(v.option, v.value), stores->set_option(v.option, v.value);
  stores->set_option("epilogue", "stores");
  const std::string label = v.subject + " " + v.option + "=" + v.value + " epilogue=stores";
  int compared = 0;
  for (const char* policy : {"bf16", "fp16"}) {
    for (int d : {64, 128}) {
      if (!tma->info().supports_head_dim(d)) continue;  // (3groups_p_shared: d = 128)
      // (tails of 1, 65 and 2000 rows; 3 x 8 query heads over 2 kv heads)
      for (int nq : {1, 65, 2000}) {
        for (int nk : {129, 640}) {
          for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
            testing::expect_forward_bits(*tma, *stores, testing::forward_case({3, 8, 2, nq, nk, d, d}, m, policy), label);
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 0) << label << ": no head dim supported";
  std::cout << compared << " cases (" << v.subject << " " << v.option << "=" << v.value << "): O by TMA gives the global stores' bits\n";
}

std::string variant_name(const ::testing::TestParamInfo<EpilogueVariant>& info) {
  std::string name = info.param.subject.substr(5) + "_" + info.param.option + "_" + info.param.value;  // (cuda.fa3 -> fa3)
  for (char& c : name) {
    if (c == '.' || c == '=') c = '_';
  }
  return name;
}
INSTANTIATE_TEST_SUITE_P(Fa3Epilogue, TmaStore, ::testing::ValuesIn(kEpilogueVariants), variant_name);

TEST(Fa3Epilogue, IsAnOptionWithTwoValues) {
  REQUIRE_HOPPER();
  for (const char* name : {"cuda.fa3", "cuda.fa4", "cuda.fa3.fp8"}) {
    auto s = registered_subject(name);
    ASSERT_TRUE(s) << name << " is registered on Hopper";
    s->set_option("epilogue", "stores");
    s->set_option("epilogue", "automatic");
    try {
      s->set_option("epilogue", "tma");
      ADD_FAILURE() << name << " took epilogue=tma";
    } catch (const SubjectError& e) {
      EXPECT_NE(std::string(e.what()).find("automatic or stores"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fc::kernels::cuda
