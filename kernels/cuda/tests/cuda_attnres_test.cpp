// cuda.attnres on the GPU (label `gpu`; without a device every test skips with the reason):
//   - the harness against the oracle, FLASHCHECK_GPU_CASES cases (default 2000) per op and policy (each
//     stochastic-rounding policy a quarter), from seed FLASHCHECK_GPU_SEED (default 2026);
//   - stochastic rounding bit-identical to cpu.attnres: with one source (p = 1) and fp32 values, o = v
//     exactly on both, so its rounding to bf16, or to fp16 with a per-row scale, must give the same bits
//     and the same scales;
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
#include "kernels/tests/attnres_run.hpp"

namespace fc::kernels::cuda {
namespace {

using testing::AttnResRun;
using testing::Buffer;

#define REQUIRE_GPU()                                                                           \
  do {                                                                                          \
    if (const std::string why = device_unavailable_reason(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

int harness_cases() {
  const char* env = std::getenv("FLASHCHECK_GPU_CASES");
  return env ? std::max(1, std::atoi(env)) : 2000;
}
std::uint64_t harness_seed() {
  const char* env = std::getenv("FLASHCHECK_GPU_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 2026;
}

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
  for (const char* text : {"fp32,o=bf16,round=sr,seed=11", "fp32,o=fp16,round=sr,seed=11", "fp32,o=bf16", "fp32,o=fp16"}) {
    const PrecisionPolicy policy = PrecisionPolicy::parse(text);
    const AttnResShape shape{1, 2, 67, 200, 3, 1e-6};
    AttnResRun on_gpu(shape, policy, 7, 1e3), on_cpu(shape, policy, 7, 1e3);
    on_gpu.forward(*gpu), on_cpu.forward(*cpu);
    EXPECT_TRUE(same_bytes(on_gpu.o, on_cpu.o)) << text << ": o's stored bits differ";
    EXPECT_TRUE(same_bytes(on_gpu.o_scale, on_cpu.o_scale)) << text << ": o's row scales differ";
  }
  // Another seed gives other bits (the words are the seed's, not fixed ones).
  AttnResRun a({1, 1, 64, 256, 2, 1e-6}, PrecisionPolicy::parse("fp32,o=bf16,round=sr,seed=1"), 3),
      b({1, 1, 64, 256, 2, 1e-6}, PrecisionPolicy::parse("fp32,o=bf16,round=sr,seed=2"), 3);
  a.forward(*gpu), b.forward(*gpu);
  EXPECT_FALSE(same_bytes(a.o, b.o));
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
