// cuda.fa3's fused backward converts dQ from its fp32 accumulator either after the key-tiled pass (dq_convert=after)
// or overlapped with it (the default: a dependent launch whose blocks wait for each kv head's count, fa3_backward.cu).
// Both must give the same bits where the accumulator's sum is itself deterministic: with one key tile per kv head
// (Nk <= 128) each dQ entry receives one partial per CTA (d = 128), or two that commute exactly (d = 64: one per
// warpgroup, 0 + a + b = 0 + b + a in IEEE arithmetic), so no order of additions is left to vary. A conversion that
// read a head before its partials were in would differ there by whole partials. With more key tiles the order of the
// fp32 additions varies from run to run in either form, and cancellation makes the difference unbounded in units of
// the result's last place; the harness grades those shapes against the oracle (cuda_attention_test.cpp).
// The shapes: 48 and 64 CTAs in the pass (fewer than the 132 SMs, so the conversion's blocks start beside it at once: with
// the wait removed, these fail) and 300 (more than two waves); GQA, both masks, one query row (a conversion block spans
// several kv heads), query tails, bf16 and fp16, SR, head dims 64 and 128. A wait that is merely short (a target one
// count low) slips through that race window; the second test widens it on purpose.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "gradcheck/caller.hpp"
#include "gradcheck/inputs.hpp"
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/device_fill.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/fa3_kernels.hpp"
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

// Straight on the entry points (the subject keeps its workspaces to itself): every kv head's count reaches
// fa3_dq_ready_count, which is 2 per key tile of 128 (CTAs that visit no query count too: top-left causal with Nq < Nk),
// and, with the second warpgroup of every CTA held back 200 us before its last dQ product (its last reads of K, then
// its last dQ reduction: the tests-only delay), the overlapped conversion still gives the bits of the one after the pass
// where those are deterministic (one key tile); dK and dV, sums in registers, give the same bits at every shape. A
// target below the full count, or a count before the reductions it stands for, converts rows without that warpgroup's
// last partial. With dK and dV by TMA (the default) the first group stages its dK in its K tile, which the second
// group's last dQ product reads at d = 128: staged before that read (without the kv_read wait), it corrupts the
// partial, and dQ differs. Both epilogues run delayed (bwd_epilogue=stores: the first group's K/V release comes before
// the delay, and with walkers the producer may load the CTA's next tile meanwhile).
TEST(Fa3Backward, TheConversionWaitsForEveryWarpgroupsLastPartial) {
  REQUIRE_HOPPER();
  struct Shape {
    int batch, heads_q, heads_kv, nq, nk;
    CausalMask mask;
  };
  // (the last: 192 key tiles, more than the SMs, so the persistent walk takes two tiles on some CTAs)
  const Shape shapes[] = {{2, 8, 4, 300, 100, CausalMask::none},
                          {2, 4, 4, 200, 128, CausalMask::bottom_right},
                          {2, 4, 2, 100, 400, CausalMask::top_left},
                          {1, 4, 4, 700, 700, CausalMask::none},
                          {2, 96, 96, 130, 128, CausalMask::none}};
  const std::string who = "Fa3Backward";
  int compared = 0;
  // The overlapped pass with a CTA per key tile, 3 walkers and a CTA per SM (key_pass_ctas 0, 3, -1), each epilogue
  // (the reference: TMA, no delay, a CTA per tile).
  for (bool by_stores : {false, true}) {
  for (int walkers : {0, 3, -1}) {
    for (int d : {64, 128}) {
      for (const Shape& sh : shapes) {
        AttentionShapeParams s;
        s.batch = sh.batch, s.heads_q = sh.heads_q, s.heads_kv = sh.heads_kv, s.seq_q = sh.nq, s.seq_k = sh.nk, s.head_dim = d;
        s.mask = sh.mask, s.scale = static_cast<float>(1 / std::sqrt(static_cast<double>(d)));
        const std::size_t nq = static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.nq * d, nk = static_cast<std::size_t>(sh.batch) * sh.heads_kv * sh.nk * d;
        const std::size_t rows = static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.nq, heads_kv = static_cast<std::size_t>(sh.batch) * sh.heads_kv;
        DeviceBuffer q(nq * 2, who, "Q"), k(nk * 2, who, "K"), v(nk * 2, who, "V"), o(nq * 2, who, "O"), g(nq * 2, who, "dO");
        DeviceBuffer lse(rows * 4, who, "L"), delta(rows * 4, who, "D"), accum(nq * 4, who, "dQ's accumulator"), ready(heads_kv * 4, who, "counts");
        DeviceBuffer dq_after(nq * 2, who, "dQ after"), dq_overlapped(nq * 2, who, "dQ overlapped"), dk(nk * 2, who, "dK"), dv(nk * 2, who, "dV");
        DeviceBuffer dk_delayed(nk * 2, who, "dK delayed"), dv_delayed(nk * 2, who, "dV delayed");
        const std::uint64_t seed = static_cast<std::uint64_t>(d * 1000 + sh.nk);
        fill_normal(q.get(), nq, StorageType::bf16, seed, 1), fill_normal(k.get(), nk, StorageType::bf16, seed, 2);
        fill_normal(v.get(), nk, StorageType::bf16, seed, 3), fill_normal(g.get(), nq, StorageType::bf16, seed, 4);
        const auto in = [&](const DeviceBuffer& b, int heads, int n) {
          return Strided{b.get(), static_cast<std::int64_t>(heads) * n * d, static_cast<std::int64_t>(n) * d, d};
        };
        const auto out = [&](const DeviceBuffer& b, int heads, int n) {
          return StridedOut{b.get(), static_cast<std::int64_t>(heads) * n * d, static_cast<std::int64_t>(n) * d, d};
        };
        ForwardParams f;
        f.shape = s, f.type = StorageType::bf16, f.q = in(q, sh.heads_q, sh.nq), f.k = in(k, sh.heads_kv, sh.nk), f.v = in(v, sh.heads_kv, sh.nk);
        f.o = out(o, sh.heads_q, sh.nq), f.lse = static_cast<float*>(lse.get());
        fa3_forward(f, Fa3Schedule::automatic, nullptr);
        BackwardParams b;
        b.shape = s, b.type = StorageType::bf16, b.q = f.q, b.k = f.k, b.v = f.v, b.o = in(o, sh.heads_q, sh.nq), b.dout = in(g, sh.heads_q, sh.nq);
        b.lse = static_cast<const float*>(lse.get()), b.delta = static_cast<float*>(delta.get()), b.dq_accum = static_cast<float*>(accum.get());
        b.dk = out(dk, sh.heads_kv, sh.nk), b.dv = out(dv, sh.heads_kv, sh.nk), b.deterministic = false;
        b.dq = out(dq_after, sh.heads_q, sh.nq);
        fa3_backward(b, nullptr);
        b.dq = out(dq_overlapped, sh.heads_q, sh.nq), b.dq_ready = static_cast<std::uint32_t*>(ready.get()), b.dq_ready_test_delay_ns = 200000;
        b.key_pass_ctas = walkers, b.dk_dv_by_stores = by_stores;
        b.dk = out(dk_delayed, sh.heads_kv, sh.nk), b.dv = out(dv_delayed, sh.heads_kv, sh.nk);
        fa3_backward(b, nullptr);
        check_cuda(cudaDeviceSynchronize(), who, "the backwards");
        std::vector<std::uint16_t> after(nq), overlapped(nq);
        std::vector<std::uint32_t> counts(heads_kv);
        check_cuda(cudaMemcpy(after.data(), dq_after.get(), nq * 2, cudaMemcpyDeviceToHost), who, "dQ after");
        check_cuda(cudaMemcpy(overlapped.data(), dq_overlapped.get(), nq * 2, cudaMemcpyDeviceToHost), who, "dQ overlapped");
        check_cuda(cudaMemcpy(counts.data(), ready.get(), heads_kv * 4, cudaMemcpyDeviceToHost), who, "counts");
        std::vector<std::uint16_t> kv_want(2 * nk), kv_got(2 * nk);
        check_cuda(cudaMemcpy(kv_want.data(), dk.get(), nk * 2, cudaMemcpyDeviceToHost), who, "dK");
        check_cuda(cudaMemcpy(kv_want.data() + nk, dv.get(), nk * 2, cudaMemcpyDeviceToHost), who, "dV");
        check_cuda(cudaMemcpy(kv_got.data(), dk_delayed.get(), nk * 2, cudaMemcpyDeviceToHost), who, "dK delayed");
        check_cuda(cudaMemcpy(kv_got.data() + nk, dv_delayed.get(), nk * 2, cudaMemcpyDeviceToHost), who, "dV delayed");
        const std::string what = std::string(by_stores ? "dK and dV by stores, " : "dK and dV by TMA, ") + "key_pass_ctas " + std::to_string(walkers) + ", d " + std::to_string(d) + ", B " + std::to_string(sh.batch) + ", Hq " + std::to_string(sh.heads_q) + ", Hkv " +
                                 std::to_string(sh.heads_kv) + ", Nq " + std::to_string(sh.nq) + ", Nk " + std::to_string(sh.nk);
        const unsigned tiles = static_cast<unsigned>((sh.nk + 127) / 128);
        EXPECT_EQ(fa3_dq_ready_count(s), 2 * tiles) << what;
        for (std::size_t i = 0; i < heads_kv; ++i) EXPECT_EQ(counts[i], 2 * tiles) << "kv head " << i << ": " << what;
        std::size_t kv_differing = 0;
        for (std::size_t i = 0; i < 2 * nk; ++i) kv_differing += kv_want[i] != kv_got[i];
        EXPECT_EQ(kv_differing, 0u) << "dK and dV entries differing: " << what;
        if (sh.nk <= 128) {
          std::size_t differing = 0;
          for (std::size_t i = 0; i < nq; ++i) differing += after[i] != overlapped[i];
          EXPECT_EQ(differing, 0u) << "dQ entries differing: " << what;
          ++compared;
        }
      }
    }
  }
  }
  std::cout << compared << " shapes with dQ compared bit for bit under the delay; counts, dK and dV checked on all\n";
}

// A shape of the key-tiled pass's bit-for-bit tests.
struct PassShape {
  int batch, heads_q, heads_kv, nq, nk;
};

// `subject`'s backward against `reference`'s, both given bwd=`form`, over head dims 64 and 128, each shape and three
// masks, the policy alternating over four (two with SR): dK and dV must be the same bits (sums in registers), and dQ
// wherever its fp32 sum is deterministic (two_pass; Nk <= 128, one key tile per kv head). The forward is the
// reference's. `seed_nq` weighs Nq in the cases' seeds; `what` names the pair in a failure. Returns the cases run.
int expect_same_gradient_bits(Subject& reference, Subject& subject, const std::string& form, const std::vector<PassShape>& shapes, int seed_nq,
                              const std::string& what) {
  const char* policies[] = {"bf16", "fp16,round=sr,seed=5", "fp16", "bf16,round=sr,seed=7"};
  int compared = 0;
  for (int d : {64, 128}) {
    for (const PassShape& sh : shapes) {
      for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
        gradcheck::Case c;
        c.shape = {sh.batch, sh.heads_q, sh.heads_kv, sh.nq, sh.nk, d, d};
        c.mask = m, c.scale = 1 / std::sqrt(static_cast<double>(d));
        c.policy = PrecisionPolicy::parse(policies[compared % 4]);
        c.seed = static_cast<std::uint64_t>(d * 100000 + seed_nq * sh.nq + 7 * sh.heads_kv + sh.nk);
        const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
        const gradcheck::Outputs f = gradcheck::Caller(reference, c).fwd(in.q, in.k, in.v);
        const gradcheck::Outputs want = gradcheck::Caller(reference, c).bwd(in.q, in.k, in.v, f, in.dout);
        const gradcheck::Outputs got = gradcheck::Caller(subject, c).bwd(in.q, in.k, in.v, f, in.dout);
        const bool dq_deterministic = form == "two_pass" || sh.nk <= 128;
        for (const char* t : {"dQ", "dK", "dV"}) {
          if (std::string(t) == "dQ" && !dq_deterministic) continue;
          const testing::Difference diff = testing::differing(got.at(t).values(), want.at(t).values());
          EXPECT_EQ(diff.count, 0u) << t << " differs in " << diff.count << " entries (first at " << diff.first << ") for " << what << " " << c.to_string();
        }
        ++compared;
      }
    }
  }
  return compared;
}

// The key-tiled pass walked by fewer CTAs than tiles (bwd_grid=N, or persistent: a CTA per SM), or launched in
// another order (bwd_tail: the last head pairs key tile slowest), must give the bits of a CTA per tile head by head:
// each tile's arithmetic is the same, only the CTA that runs it and when change, and the steps' ring stages, dS^T
// buffers and barrier parities run on across a CTA's tiles (fa3_backward.cu). dK and dV are sums in registers, so bit
// for bit at every shape; dQ too wherever its fp32 sum is deterministic (Nk <= 128: one key tile per kv head, the
// file's comment above) and with bwd=two_pass everywhere. Walkers 1, 3 and a CTA per SM on shapes of 3 to 256
// tiles: a CTA walks up to 256 tiles, with tiles of zero steps (top-left causal, Nq < Nk) among them, and tiles of an
// odd number of steps (the ring's stage and dS^T's buffer carried across tiles). The orders: a tail of 3 head pairs
// (all of them on some shapes, one key tile each on others), of 2 with 3 walkers, and of every pair (1000 or more),
// with a grid and with a CTA per SM. The policy alternates from case to case. One test per (form, walkers, tail), so
// that gtest's shards spread them (all ten in one test: about 184 s).
struct KeyPassRun {
  std::string form, walkers, tail;
};
const KeyPassRun kKeyPassRuns[] = {{"fused", "1", "0"},          {"fused", "3", "2"},    {"fused", "persistent", "0"},
                                   {"fused", "persistent", "1000"}, {"fused", "tiles", "3"}, {"fused", "tiles", "1000"},
                                   {"two_pass", "1", "0"},       {"two_pass", "3", "2"}, {"two_pass", "persistent", "1000"},
                                   {"two_pass", "tiles", "3"}};

void PrintTo(const KeyPassRun& r, std::ostream* os) { *os << "bwd=" << r.form << " bwd_grid=" << r.walkers << " bwd_tail=" << r.tail; }

class KeyPass : public ::testing::TestWithParam<KeyPassRun> {};

TEST_P(KeyPass, WalkersAndOrdersGiveTheBitsOfACtaPerTileHeadByHead) {
  REQUIRE_HOPPER();
  const KeyPassRun& run = GetParam();
  // (steps per tile, none / causal top-left: 2 / 2; 20 / 0-20; 4 / 0-4; 36 / 28-36; 3, 3, 3 / 3, 1, 0; 3 / 3; 9 / 9;
  // 1 / 1 on 256 tiles, more than the SMs, so the persistent walk takes two tiles on some CTAs. Odd counts start the
  // next tile on the other stage and dS^T buffer.)
  const std::vector<PassShape> shapes = {{4, 16, 16, 100, 128}, {3, 8, 2, 300, 1000}, {1, 4, 4, 70, 600}, {1, 2, 1, 1100, 257},
                                         {2, 3, 3, 130, 384},   {5, 6, 6, 130, 128},  {4, 12, 4, 130, 100}, {8, 32, 32, 64, 128}};
  auto tiled = testing::registered_subject("cuda.fa3"), walked = testing::registered_subject("cuda.fa3");
  ASSERT_TRUE(tiled && walked) << "cuda.fa3 is not registered on this Hopper GPU";
  tiled->set_option("bwd", run.form), tiled->set_option("bwd_grid", "tiles"), tiled->set_option("bwd_tail", "0");
  walked->set_option("bwd", run.form), walked->set_option("bwd_grid", run.walkers), walked->set_option("bwd_tail", run.tail);
  const std::string what = "bwd=" + run.form + " bwd_grid=" + run.walkers + " bwd_tail=" + run.tail;
  const int compared = expect_same_gradient_bits(*tiled, *walked, run.form, shapes, 1, what);
  std::cout << compared << " cases: " << what << " gives the bits of a CTA per tile head by head\n";
}

std::string key_pass_run_name(const ::testing::TestParamInfo<KeyPassRun>& info) {
  return info.param.form + "_walkers_" + info.param.walkers + "_tail_" + info.param.tail;
}
INSTANTIATE_TEST_SUITE_P(Fa3Backward, KeyPass, ::testing::ValuesIn(kKeyPassRuns), key_pass_run_name);

TEST(Fa3Backward, KeyPassWalkersAndTailAreOptionsWithTheirRanges) {
  REQUIRE_HOPPER();
  auto s = testing::registered_subject("cuda.fa3");
  ASSERT_TRUE(s);
  for (const char* bad : {"0", "-1", "two", "3x", "", " 3", "+3", "2000000", "99999999999"}) EXPECT_THROW(s->set_option("bwd_grid", bad), SubjectError) << bad;
  for (const char* good : {"tiles", "persistent", "1", "132"}) EXPECT_NO_THROW(s->set_option("bwd_grid", good)) << good;
  for (const char* bad : {"-1", "two", "3x", "", " 3", "+3", "2000000", "99999999999", "auto"}) EXPECT_THROW(s->set_option("bwd_tail", bad), SubjectError) << bad;
  for (const char* good : {"0", "1", "1048576"}) EXPECT_NO_THROW(s->set_option("bwd_tail", good)) << good;
}

// The key-tiled pass's two ways of storing dK and dV (bwd_epilogue): staged in the tile's K and V buffers and stored by
// TMA (automatic), or by 4-byte global stores (stores). Both round with pack_pair, the same word for each pair of
// elements (stochastic rounding by each element's Philox word as well), so dK and dV must be the same bits, and dQ
// wherever its sum is deterministic (two_pass; Nk <= 128). Run on both forms, with a CTA per tile and with 3 walkers
// (their next tile's K and V load waits until the stores have read the staging), over key tails (rows past Nk clipped
// by the maps), GQA, masks, both formats, SR and head dims 64 and 128. One test per (form, walkers) for the shards.
struct EpilogueRun {
  std::string form, walkers;
};
const EpilogueRun kEpilogueRuns[] = {{"fused", "tiles"}, {"fused", "3"}, {"two_pass", "tiles"}, {"two_pass", "3"}};

void PrintTo(const EpilogueRun& r, std::ostream* os) { *os << "bwd=" << r.form << " bwd_grid=" << r.walkers; }

class KeyPassEpilogue : public ::testing::TestWithParam<EpilogueRun> {};

TEST_P(KeyPassEpilogue, TmaGivesTheGlobalStoresBits) {
  REQUIRE_HOPPER();
  const EpilogueRun& run = GetParam();
  // (key tails of 1, 65 and 127 rows past a whole tile; one key tile per kv head in the first two: dQ compared there)
  const std::vector<PassShape> shapes = {{2, 8, 2, 200, 65}, {3, 4, 4, 130, 128}, {2, 6, 3, 300, 641}, {1, 4, 2, 1000, 383}, {2, 2, 2, 64, 129}};
  auto tma = testing::registered_subject("cuda.fa3"), stores = testing::registered_subject("cuda.fa3");
  ASSERT_TRUE(tma && stores) << "cuda.fa3 is not registered on this Hopper GPU";
  for (auto* s : {tma.get(), stores.get()}) s->set_option("bwd", run.form), s->set_option("bwd_grid", run.walkers);
  stores->set_option("bwd_epilogue", "stores");
  const std::string what = "bwd=" + run.form + " bwd_grid=" + run.walkers;
  const int compared = expect_same_gradient_bits(*stores, *tma, run.form, shapes, 3, what);
  std::cout << compared << " cases: " << what << ": dK and dV by TMA give the global stores' bits\n";
}

std::string epilogue_run_name(const ::testing::TestParamInfo<EpilogueRun>& info) { return info.param.form + "_walkers_" + info.param.walkers; }
INSTANTIATE_TEST_SUITE_P(Fa3Backward, KeyPassEpilogue, ::testing::ValuesIn(kEpilogueRuns), epilogue_run_name);

TEST(Fa3Backward, KeyPassEpilogueIsAnOptionWithTwoValues) {
  REQUIRE_HOPPER();
  auto s = testing::registered_subject("cuda.fa3");
  ASSERT_TRUE(s);
  EXPECT_NO_THROW(s->set_option("bwd_epilogue", "stores"));
  EXPECT_NO_THROW(s->set_option("bwd_epilogue", "automatic"));
  try {
    s->set_option("bwd_epilogue", "tma");
    ADD_FAILURE() << "cuda.fa3 took bwd_epilogue=tma";
  } catch (const SubjectError& e) {
    EXPECT_NE(std::string(e.what()).find("automatic or stores"), std::string::npos) << e.what();
  }
}

// Which way dK and dV leave is the launcher's choice (fa3_dk_dv_by_tma): TMA for layouts a tensor map can describe,
// the 4-byte stores otherwise or when asked. Outputs with rows 2 elements longer than d (4-byte aligned pairs, not
// 16-byte aligned rows) take the stores, and must hold the same dK and dV as contiguous ones written by TMA, over key
// tails, GQA and both head dims.
TEST(Fa3Backward, DkDvLayoutsTmaCannotWriteTakeTheStores) {
  REQUIRE_HOPPER();
  const std::string who = "Fa3Backward";
  for (int d : {64, 128}) {
    AttentionShapeParams s;
    s.batch = 2, s.heads_q = 4, s.heads_kv = 2, s.seq_q = 200, s.seq_k = 300, s.head_dim = d, s.mask = CausalMask::none;
    s.scale = static_cast<float>(1 / std::sqrt(static_cast<double>(d)));
    const int padded = d + 2;
    const std::size_t nq = static_cast<std::size_t>(s.batch) * s.heads_q * s.seq_q * d, nk = static_cast<std::size_t>(s.batch) * s.heads_kv * s.seq_k * d;
    const std::size_t nk_padded = nk / d * padded, rows = static_cast<std::size_t>(s.batch) * s.heads_q * s.seq_q;
    DeviceBuffer q(nq * 2, who, "Q"), k(nk * 2, who, "K"), v(nk * 2, who, "V"), o(nq * 2, who, "O"), g(nq * 2, who, "dO"), dq(nq * 2, who, "dQ");
    DeviceBuffer lse(rows * 4, who, "L"), delta(rows * 4, who, "D"), accum(nq * 4, who, "dQ's accumulator");
    DeviceBuffer dk(nk * 2, who, "dK"), dv(nk * 2, who, "dV"), dk_padded(nk_padded * 2, who, "dK padded"), dv_padded(nk_padded * 2, who, "dV padded");
    const std::uint64_t seed = static_cast<std::uint64_t>(d) * 77;
    fill_normal(q.get(), nq, StorageType::bf16, seed, 1), fill_normal(k.get(), nk, StorageType::bf16, seed, 2);
    fill_normal(v.get(), nk, StorageType::bf16, seed, 3), fill_normal(g.get(), nq, StorageType::bf16, seed, 4);
    const auto in = [&](const DeviceBuffer& b, int heads, int n) {
      return Strided{b.get(), static_cast<std::int64_t>(heads) * n * d, static_cast<std::int64_t>(n) * d, d};
    };
    const auto out = [&](const DeviceBuffer& b, int heads, int n, int row) {
      return StridedOut{b.get(), static_cast<std::int64_t>(heads) * n * row, static_cast<std::int64_t>(n) * row, row};
    };
    ForwardParams f;
    f.shape = s, f.type = StorageType::bf16, f.q = in(q, s.heads_q, s.seq_q), f.k = in(k, s.heads_kv, s.seq_k), f.v = in(v, s.heads_kv, s.seq_k);
    f.o = out(o, s.heads_q, s.seq_q, d), f.lse = static_cast<float*>(lse.get());
    fa3_forward(f, Fa3Schedule::automatic, nullptr);
    BackwardParams b;
    b.shape = s, b.type = StorageType::bf16, b.q = f.q, b.k = f.k, b.v = f.v, b.o = in(o, s.heads_q, s.seq_q), b.dout = in(g, s.heads_q, s.seq_q);
    b.lse = static_cast<const float*>(lse.get()), b.delta = static_cast<float*>(delta.get()), b.dq_accum = static_cast<float*>(accum.get());
    b.dq = out(dq, s.heads_q, s.seq_q, d), b.deterministic = false;
    b.dk = out(dk, s.heads_kv, s.seq_k, d), b.dv = out(dv, s.heads_kv, s.seq_k, d);
    EXPECT_TRUE(fa3_dk_dv_by_tma(b)) << "contiguous dK and dV, d " << d;
    fa3_backward(b, nullptr);
    BackwardParams asked = b;
    asked.dk_dv_by_stores = true;
    EXPECT_FALSE(fa3_dk_dv_by_tma(asked)) << "dk_dv_by_stores, d " << d;
    b.dk = out(dk_padded, s.heads_kv, s.seq_k, padded), b.dv = out(dv_padded, s.heads_kv, s.seq_k, padded);
    EXPECT_FALSE(fa3_dk_dv_by_tma(b)) << "rows of " << padded << " elements, d " << d;
    fa3_backward(b, nullptr);
    check_cuda(cudaDeviceSynchronize(), who, "the backwards");
    for (const auto& [dense, wide, name] : {std::tuple{&dk, &dk_padded, "dK"}, std::tuple{&dv, &dv_padded, "dV"}}) {
      std::vector<std::uint16_t> want(nk), got(nk_padded);
      check_cuda(cudaMemcpy(want.data(), dense->get(), nk * 2, cudaMemcpyDeviceToHost), who, name);
      check_cuda(cudaMemcpy(got.data(), wide->get(), nk_padded * 2, cudaMemcpyDeviceToHost), who, name);
      std::size_t differing = 0;
      for (std::size_t r = 0; r < nk / d; ++r) {
        for (int c = 0; c < d; ++c) differing += want[r * d + c] != got[r * padded + c];
      }
      EXPECT_EQ(differing, 0u) << name << ": entries differing between TMA (contiguous) and the stores (rows of " << padded << "), d " << d;
    }
  }
}

}  // namespace
}  // namespace fc::kernels::cuda
