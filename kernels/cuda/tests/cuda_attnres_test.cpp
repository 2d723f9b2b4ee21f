// cuda.attnres on the GPU (label `gpu`; without a device every test skips with the reason):
//   - the harness against the oracle, FLASHCHECK_GPU_CASES cases (default 2000) per op and policy (each
//     stochastic-rounding policy a quarter), from seed FLASHCHECK_GPU_SEED (default 2026);
//   - stochastic rounding bit-identical to cpu.attnres: with one source (p = 1) and fp32 values, o = v
//     exactly on both, so its rounding to bf16, or to fp16 with a per-row scale, must give the same bits
//     and the same scales;
//   - rows longer than the harness draws (D up to 8192: the lane kernels' groups of 2 to 8 warps, and the
//     block kernels where N x D is too large for a lane's registers) agree with cpu.attnres;
//   - bad input refused with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include "gradcheck/runner.hpp"
#include "kernels/cpu/attnres.hpp"
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"
#include "kernels/tests/attnres_run.hpp"

namespace fc::kernels::cuda {
namespace {

using testing::harness_cases;
using testing::harness_seed;
using kernels::testing::AttnResRun;
using kernels::testing::Buffer;

// The policies issue 10 names: fp32, bf16 and fp16 storage; mixed bf16 values with fp16 o and h (per-row
// scales); each 16-bit one also with stochastic rounding.
class CudaAttnResHarness : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaAttnResHarness, PassesTheHarnessInFwdAndBwd) {
  REQUIRE_GPU();
  auto subject = make_cuda_attnres();
  const PrecisionPolicy policy = PrecisionPolicy::parse(GetParam());
  for (Op op : {Op::fwd, Op::bwd}) {
    gradcheck::RunOptions o;
    o.op = op, o.policy = policy, o.seed = harness_seed();
    o.cases = policy.rounding == Rounding::stochastic ? std::max(1, harness_cases() / 4) : harness_cases();
    const gradcheck::RunSummary r = gradcheck::run_cases(*subject, o);
    std::cout << "cuda.attnres " << name(op) << " " << GetParam() << ": " << r.passed << " passed, " << r.discarded << " discarded, "
              << r.weak << " weak of " << r.cases << "; worst err/base " << r.worst_ratio << ", worst ULP " << r.worst_ulp << ", "
              << r.seconds << " s\n";
    EXPECT_EQ(r.passed + r.discarded, r.cases) << GetParam() << " " << name(op) << "\n"
                                               << (r.failure ? r.failure->minimal + "\n" + r.failure->report.summary() : "");
    EXPECT_LE(10 * r.discarded, r.cases);  // at most a tenth out of the format's range
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, CudaAttnResHarness,
                         ::testing::Values("fp32", "bf16", "fp16", "bf16,o=fp16", "bf16,round=sr,seed=5", "fp16,round=sr,seed=5",
                                           "bf16,o=fp16,round=sr,seed=5"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

bool same_bytes(const Buffer& a, const Buffer& b) { return a.bytes.size() == b.bytes.size() && std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0; }

TEST(CudaAttnRes, StochasticRoundingIsBitIdenticalToTheCpuBackend) {
  REQUIRE_GPU();
  auto gpu = make_cuda_attnres();
  auto cpu = cpu::make_cpu_attnres();
  // One source: p = exp(0) = 1 and l = 1, so o = 1 v / 1 = v exactly in fp32 on both; T = 67 tokens (a
  // tail of the 64-token chunks), D = 200 (not a multiple of the 128 threads), rows of sigma 1e3 (fp16
  // scales other than 1).
  // D = 256 and 4096 take the lane kernels (a group of 1 and of 2 warps), D = 200 the block kernels.
  for (const int D : {200, 256, 4096}) {
    for (const char* text : {"fp32,o=bf16,round=sr,seed=11", "fp32,o=fp16,round=sr,seed=11", "fp32,o=bf16", "fp32,o=fp16"}) {
      const PrecisionPolicy policy = PrecisionPolicy::parse(text);
      const AttnResShape shape{1, 2, D == 4096 ? 33 : 67, D, 3, 1e-6};
      AttnResRun on_gpu(shape, policy, 7, 1e3), on_cpu(shape, policy, 7, 1e3);
      on_gpu.forward(*gpu), on_cpu.forward(*cpu);
      EXPECT_TRUE(same_bytes(on_gpu.o, on_cpu.o)) << text << " D=" << D << ": o's stored bits differ";
      EXPECT_TRUE(same_bytes(on_gpu.o_scale, on_cpu.o_scale)) << text << " D=" << D << ": o's row scales differ";
    }
  }
  // Another seed gives other bits (the words are the seed's, not fixed ones).
  AttnResRun a({1, 1, 64, 256, 2, 1e-6}, PrecisionPolicy::parse("fp32,o=bf16,round=sr,seed=1"), 3),
      b({1, 1, 64, 256, 2, 1e-6}, PrecisionPolicy::parse("fp32,o=bf16,round=sr,seed=2"), 3);
  a.forward(*gpu), b.forward(*gpu);
  EXPECT_FALSE(same_bytes(a.o, b.o));
}

// The largest |a - b| over the largest |b|.
double normwise_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, size = 0;
  for (std::size_t k = 0; k < a.size(); ++k) diff = std::max(diff, std::abs(a[k] - b[k])), size = std::max(size, std::abs(b[k]));
  return size > 0 ? diff / size : diff;
}

// Every output of a forward and backward run on the GPU (g) within `bound` of the CPU's (c), normwise.
void expect_outputs_agree(const AttnResRun& g, const AttnResRun& c, double bound, const std::string& at) {
  EXPECT_LE(normwise_difference(g.values_of(g.o, g.o_scale), c.values_of(c.o, c.o_scale)), bound) << at << ": o";
  EXPECT_LE(normwise_difference(g.values_of(g.h, g.h_scale), c.values_of(c.h, c.h_scale)), bound) << at << ": h";
  EXPECT_LE(normwise_difference(g.values_of(g.lse, {}), c.values_of(c.lse, {})), bound) << at << ": lse";
  EXPECT_LE(normwise_difference(g.values_of(g.dv, {}), c.values_of(c.dv, {})), bound) << at << ": d_values";
  EXPECT_LE(normwise_difference(g.values_of(g.du, {}), c.values_of(c.du, {})), bound) << at << ": d_partial";
  EXPECT_LE(normwise_difference(g.values_of(g.dw, {}), c.values_of(c.dw, {})), bound) << at << ": d_queries";
}

TEST(CudaAttnRes, LongRowsAgreeWithTheCpuBackend) {
  REQUIRE_GPU();
  auto gpu = make_cuda_attnres();
  auto cpu = cpu::make_cpu_attnres();
  // Both compute in fp32 with the same rounding points and round the same way; they differ in the order of
  // the D-long dot products (fp32, a relative ~sqrt(D) u_fp32 = 5e-6 at D = 8192) and so, rarely, in the
  // last bit of a stored bf16 entry. Normwise per output, 2 u_bf16 (3.9e-3) of its largest entry covers
  // one flipped last bit plus the fp32 differences with room; a wrong chunk, warp or group would be off by
  // O(1). Shapes: the lane kernels with groups of 2, 4 and 8 warps (D = 1024 N = 4; D = 2048 N = 4;
  // D = 8192 N = 2), and the block kernels where N x D is too large for them (D = 8192 N = 4).
  const PrecisionPolicy policy = PrecisionPolicy::parse("bf16");
  const double bound = 2 * std::ldexp(1.0, -8);
  for (const AttnResShape shape : {AttnResShape{4, 1, 70, 1024, 3, 1e-6}, AttnResShape{4, 2, 35, 2048, 2, 1e-6},
                                   AttnResShape{2, 1, 66, 8192, 3, 1e-6}, AttnResShape{4, 1, 20, 8192, 2, 1e-6}}) {
    AttnResRun g(shape, policy, 5), c(shape, policy, 5);
    g.forward(*gpu), c.forward(*cpu);
    g.backward(*gpu), c.backward(*cpu);
    expect_outputs_agree(g, c, bound, "N=" + std::to_string(shape.sources) + " D=" + std::to_string(shape.dim));
  }
}

TEST(CudaAttnRes, ManyTokensPerWarpAgreeWithTheCpuBackend) {
  REQUIRE_GPU();
  auto gpu = make_cuda_attnres();
  auto cpu = cpu::make_cpu_attnres();
  // Phase 1's lane kernels run on a persistent grid (at most the blocks that fit at once), each group of
  // warps walking tokens with a ring of shared-memory slots filled ahead (version 6): these shapes give
  // every group 3 or more tokens on an H100 or H200, so the ring wraps and the prefetched slots are the
  // ones read (the harness's shapes give each group at most one). The bound and its reason are
  // LongRowsAgreeWithTheCpuBackend's. Layouts: D = 64 (K = 1, 8 groups a block), D = 512 (the
  // benchmark's K = 2, S = 8), D = 2048 (groups of 4 warps: the loops' block barriers); policies with
  // the typed stores (bf16), fp16 o with row scales (store_lane_row's barriers inside the loop), fp32
  // (two 16-byte pieces per chunk) and stochastic rounding.
  const double bound = 2 * std::ldexp(1.0, -8);
  for (const char* text : {"bf16", "bf16,o=fp16", "fp32", "fp16,round=sr,seed=5"}) {
    const PrecisionPolicy policy = PrecisionPolicy::parse(text);
    for (const AttnResShape shape : {AttnResShape{4, 3, 2400, 64, 3, 1e-6}, AttnResShape{4, 2, 4000, 512, 8, 1e-6},
                                     AttnResShape{4, 1, 3000, 2048, 2, 1e-6}}) {
      AttnResRun g(shape, policy, 7), c(shape, policy, 7);
      g.forward(*gpu), c.forward(*cpu);
      g.backward(*gpu), c.backward(*cpu);
      expect_outputs_agree(g, c, bound, std::string(text) + " B T=" + std::to_string(shape.batch * shape.tokens) + " D=" + std::to_string(shape.dim));
    }
  }
}

TEST(CudaAttnRes, BadInputIsRefusedWithAClearError) {
  REQUIRE_GPU();
  auto gpu = make_cuda_attnres();
  AttnResRun r({3, 1, 5, 16, 2, 1e-6}, PrecisionPolicy::parse("bf16"), 1);
  r.v[4] = std::numeric_limits<double>::quiet_NaN();
  r.bv.fill(r.v);
  try {
    r.forward(*gpu);
    ADD_FAILURE() << "a NaN in values was accepted";
  } catch (const SubjectError& e) {
    EXPECT_NE(std::string(e.what()).find("values"), std::string::npos) << e.what();
  }
  AttnResRun wide({1, 1, 2, 16, 1, 1e-6}, PrecisionPolicy::parse("fp64"), 1);
  EXPECT_THROW(wide.forward(*gpu), SubjectError);  // no fp64 on the GPU
}

}  // namespace
}  // namespace fc::kernels::cuda
