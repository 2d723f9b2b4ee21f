// cuda.fa4 against the rules it shares: at tau = 0 without emulation its softmax is FA2's (raise the max whenever
// it grows), so it must give cuda.fa3's O and L bit for bit; its rescale counter must count what cpu.fa4 counts
// on the same inputs (both raise a row's max when a tile's max exceeds it by tau or more). Its persistent scheduler
// is persistent_scheduler_test.cpp's. The harness, the CPU twins and the small-shape sweep run it through the
// CudaAttention suite (kGpuSubjects).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "gradcheck/caller.hpp"
#include "gradcheck/inputs.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/fa3_kernels.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"

namespace fc::kernels::cuda {
namespace {

using testing::counter_of;
using testing::registered_subject;

TEST(Fa4, AtTauZeroWithoutEmulationGivesFa3sBits) {
  REQUIRE_HOPPER();
  auto fa3 = registered_subject("cuda.fa3"), fa4 = registered_subject("cuda.fa4");
  ASSERT_TRUE(fa3 && fa4) << "cuda.fa3 and cuda.fa4 are registered on Hopper";
  fa4->set_option("tau", "0");
  int compared = 0;
  for (const char* policy : {"bf16", "fp16,round=sr,seed=3"}) {
    for (int d : {64, 128}) {
      for (int nq : {1, 129, 300}) {
        for (int nk : {1, 129, 640}) {
          for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
            gradcheck::Case c = testing::forward_case({2, 4, 2, nq, nk, d, d}, m, policy);
            c.inputs = {gradcheck::Distribution::logits, 8.0};  // (a max that moves: many rescales)
            testing::expect_forward_bits(*fa4, *fa3, c, "cuda.fa3");
            ++compared;
          }
        }
      }
    }
  }
  std::cout << compared << " cases: cuda.fa4 at tau = 0 gives cuda.fa3's bits\n";
}

TEST(Fa4, CountsTheRescalesCpuFa4Counts) {
  REQUIRE_HOPPER();
  auto gpu = registered_subject("cuda.fa4");
  auto cpu = cpu::make_cpu_fa4();
  ASSERT_TRUE(gpu) << "cuda.fa4 is registered on Hopper";
  // (d = 256: both tile the keys by 64, cuda.fa4's tile there, cpu.fa4's block_k_large_d)
  for (const int d : {128, 256}) {
    for (const char* tau : {"0", "2", "8"}) {
      gpu->set_option("tau", tau), cpu->set_option("tau", tau);
      for (double logit_scale : {1.0, 8.0}) {
        gradcheck::Case c;
        c.shape = {1, 4, 4, 256, 1024, d, d};
        c.scale = 1 / std::sqrt(static_cast<double>(d));
        c.policy = PrecisionPolicy::parse("bf16");
        c.inputs = {gradcheck::Distribution::logits, logit_scale};
        c.seed = 17;
        const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
        gradcheck::Caller(*gpu, c).fwd(in.q, in.k, in.v);
        gradcheck::Caller(*cpu, c).fwd(in.q, in.k, in.v);
        const double g = counter_of(*gpu, "rescales"), w = counter_of(*cpu, "rescales");
        ASSERT_GE(g, 0) << "cuda.fa4 reports no rescales counter";
        // The two compute a tile's max from S summed in different orders (tensor-core trees against increasing
        // order): a decision can flip only where tile_max - m lies within a few fp32 ulps of tau, so the counts
        // agree but for a handful of (row, tile) pairs out of 1024 rows x 7 tiles (15 at d = 256).
        EXPECT_LE(std::fabs(g - w), 2 + 0.002 * w) << "d " << d << ", tau " << tau << ", logits:" << logit_scale << ": cuda.fa4 " << g << ", cpu.fa4 " << w;
        const int tile = d > 128 ? kFa4KeyTileD256 : 128;
        std::cout << "d " << d << ", tau " << tau << ", logits:" << logit_scale << ": rescales cuda.fa4 " << g << ", cpu.fa4 " << w << " (of "
                  << c.shape.heads_q * c.shape.seq_q * (c.shape.seq_k / tile - 1) << " row-tiles after the first)\n";
      }
    }
  }
}

// (host only) fa4_forward's own refusal of the persistent scheduler at d = 256, before any map or launch: a caller of the
// launcher, not only the subject, gets the reason.
TEST(Fa4, LauncherRefusesThePersistentSchedulerAtHeadDim256) {
  ForwardParams p;
  p.shape = {1, 2, 2, 300, 300, 256, CausalMask::top_left, 0.0625f};
  Fa4Options options;
  options.persistent = true;
  try {
    fa4_forward(p, options, nullptr);
    ADD_FAILURE() << "fa4_forward accepted the persistent scheduler at d = 256";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("persistent scheduler at head dim 64 or 128 only (got 256)"), std::string::npos) << e.what();
  }
}

// d = 256 runs the grid scheduler with 64-key tiles: under scheduler=persistent the subject declares d = 64 and 128
// only and refuses 256 with a message; cuda.fa3 (forward and backward) has no d = 256 and refuses it too.
TEST(Fa4, HeadDim256RunsTheGridSchedulerOnly) {
  REQUIRE_HOPPER();
  auto fa4 = registered_subject("cuda.fa4"), fa3 = registered_subject("cuda.fa3");
  ASSERT_TRUE(fa4 && fa3);
  EXPECT_TRUE(fa4->info().supports_head_dim(256));
  EXPECT_FALSE(fa3->info().supports_head_dim(256));
  gradcheck::Case c = testing::forward_case({1, 2, 1, 70, 130, 256, 256}, Mask::causal_bottom_right, "bf16");
  const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
  EXPECT_NO_THROW(gradcheck::Caller(*fa4, c).fwd(in.q, in.k, in.v));
  fa4->set_option("scheduler", "persistent");
  EXPECT_FALSE(fa4->info().supports_head_dim(256));
  for (Subject* s : {fa4.get(), fa3.get()}) {
    try {
      gradcheck::Caller(*s, c).fwd(in.q, in.k, in.v);
      ADD_FAILURE() << s->info().name << " accepted d = 256";
    } catch (const SubjectError& e) {
      EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fc::kernels::cuda
