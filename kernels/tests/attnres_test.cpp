// cpu.attnres without the harness: in fp64 it is the oracle's two-phase AttnRes up to summation order;
// fp16 row scales keep bf16-sized rows finite; stochastic rounding draws the shared Philox bits (same
// seed, same bits; another seed, other bits; unbiased on average); dw does not depend on threads;
// bad input is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attnres_call.hpp"
#include "kernels/cpu/attnres.hpp"
#include "kernels/tensor_io.hpp"
#include "kernels/tests/attnres_run.hpp"
#include "oracle/attnres.hpp"

namespace fc::kernels {
namespace {

using testing::AttnResRun;
using testing::Buffer;

oracle::AttnResShape oracle_shape(const AttnResRun& r) {
  return {r.shape.sources, r.shape.batch, r.shape.tokens, r.shape.dim, r.shape.layers, r.shape.eps};
}

// max |a - b| / (1 + max |b|)
double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 1;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i])), scale = std::max(scale, std::fabs(b[i]));
  return diff / scale;
}

// fp64: every sum is over at most D + N + S + B T terms of size ~ the result; 1e-12 is ~5000 u_fp64,
// far above summation-order differences at these sizes and far below any real bug.
constexpr double kAgree = 1e-12;

TEST(CpuAttnRes, IsTheOracleInFp64) {
  auto subject = cpu::make_cpu_attnres();
  int compared = 0;
  for (AttnResShape s : {AttnResShape{1, 1, 1, 1, 1, 1e-6}, AttnResShape{3, 2, 5, 8, 2, 1e-6}, AttnResShape{5, 1, 130, 24, 3, 1e-3},
                         AttnResShape{2, 3, 67, 64, 1, 1e-6}}) {
    AttnResRun r(s, PrecisionPolicy::uniform(Format::fp64), 7);
    r.forward(*subject);
    r.backward(*subject);
    const oracle::AttnResShape os = oracle_shape(r);
    const auto p1 = oracle::attnres_phase1_forward<double>(os, r.v, r.w);
    const auto h = oracle::attnres_forward<double>(os, r.v, r.u, r.w);
    const auto g = oracle::attnres_backward<double>(os, r.v, r.u, r.w, r.dh);
    EXPECT_LE(relative_difference(r.values_of(r.o, r.o_scale), p1.o), kAgree);
    EXPECT_LE(relative_difference(read_as_double(r.lse.view()), p1.lse), kAgree);
    EXPECT_LE(relative_difference(r.values_of(r.h, r.h_scale), h), kAgree);
    EXPECT_LE(relative_difference(read_as_double(r.dv.view()), g.d_values), kAgree);
    EXPECT_LE(relative_difference(read_as_double(r.du.view()), g.d_partial), kAgree);
    EXPECT_LE(relative_difference(read_as_double(r.dw.view()), g.d_queries), kAgree);
    compared += 6;
  }
  EXPECT_EQ(compared, 24);
}

// Values of size 1e6 in bf16 (beyond fp16's 65504) with o and h in fp16: the per-row scales keep them
// finite and at fp16's relative precision, u = 2^-11, against the oracle on the bf16 inputs (error
// <= u of the row's largest value from the storage rounding, plus fp32 sums: 1.5 u allowed).
TEST(CpuAttnRes, Fp16RowScalesHoldRowsBeyondFp16sRange) {
  auto subject = cpu::make_cpu_attnres();
  AttnResRun r({3, 2, 9, 16, 2, 1e-6}, PrecisionPolicy::parse("bf16,o=fp16"), 3, 1e6);
  r.forward(*subject);
  const auto p1 = oracle::attnres_phase1_forward<double>(oracle_shape(r), r.v, r.w);
  const std::vector<double> o = r.values_of(r.o, r.o_scale);
  const std::size_t D = 16;
  double worst = 0;
  for (std::size_t row = 0; row < o.size() / D; ++row) {
    double row_max = 0;
    for (std::size_t c = 0; c < D; ++c) row_max = std::max(row_max, std::fabs(p1.o[row * D + c]));
    for (std::size_t c = 0; c < D; ++c) {
      ASSERT_TRUE(std::isfinite(o[row * D + c]));
      worst = std::max(worst, std::fabs(o[row * D + c] - p1.o[row * D + c]) / row_max);
    }
  }
  EXPECT_GT(worst, 0);  // it was rounded
  EXPECT_LE(worst, 1.5 * std::ldexp(1.0, -11));
  // scales are powers of two
  for (double s : read_as_double(r.o_scale.view())) {
    int e = 0;
    EXPECT_EQ(std::frexp(s, &e), 0.5) << s;
  }
  // without scales (bf16 storage would be needed) fp16 o would overflow: the scales are what keeps it finite
  double largest = 0;
  for (double x : o) largest = std::max(largest, std::fabs(x));
  EXPECT_GT(largest, 65504);
}

TEST(CpuAttnRes, StochasticRoundingDrawsTheSharedBits) {
  auto subject = cpu::make_cpu_attnres();
  const AttnResShape s{4, 1, 200, 32, 2, 1e-6};
  AttnResRun a(s, PrecisionPolicy::parse("bf16,round=sr,seed=5"), 1), b(s, PrecisionPolicy::parse("bf16,round=sr,seed=5"), 1),
      c(s, PrecisionPolicy::parse("bf16,round=sr,seed=6"), 1), exact(s, PrecisionPolicy::parse("bf16,o=fp64,grad=fp64,stats=fp64,acc=fp64"), 1);
  for (AttnResRun* r : {&a, &b, &c, &exact}) r->forward(*subject), r->backward(*subject);
  EXPECT_EQ(a.o.bytes, b.o.bytes);
  EXPECT_EQ(a.h.bytes, b.h.bytes);
  EXPECT_EQ(a.dv.bytes, b.dv.bytes);
  EXPECT_EQ(a.dw.bytes, b.dw.bytes);
  EXPECT_NE(a.o.bytes, c.o.bytes);
  EXPECT_NE(a.dv.bytes, c.dv.bytes);
  // unbiased: the mean signed error of SR-rounded o over 12800 entries is far below RN's worst
  // (half an ulp): |mean| < 4 sigma of the mean, sigma <= ulp / (2 sqrt(n)).
  const std::vector<double> got = read_as_double(a.o.view()), ref = read_as_double(exact.o.view());
  double sum = 0, ulp_sum = 0;
  for (std::size_t i = 0; i < got.size(); ++i) sum += got[i] - ref[i], ulp_sum += ulp(Format::bf16, ref[i]);
  const double n = static_cast<double>(got.size());
  EXPECT_LE(std::fabs(sum / n), 4 * (ulp_sum / n) / (2 * std::sqrt(n)));
}

TEST(CpuAttnRes, BadInputIsRefusedByName) {
  auto subject = cpu::make_cpu_attnres();
  AttnResRun r({2, 1, 3, 8, 1, 1e-6}, PrecisionPolicy::uniform(Format::fp32), 1);
  const auto refused = [&](AttnResCall c, Op op, const std::string& what) {
    try {
      subject->run_attnres(op, c);
      ADD_FAILURE() << "accepted a call with " << what;
    } catch (const SubjectError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  AttnResCall c = r.call();
  c.out_o = r.o.view(), c.out_lse = r.lse.view(), c.out_h = r.h.view();
  AttnResCall empty = c;
  empty.shape.tokens = 0;
  refused(empty, Op::fwd, "empty AttnRes problem");
  AttnResCall eps = c;
  eps.shape.eps = 0;
  refused(eps, Op::fwd, "eps");
  AttnResCall shape = c;
  shape.shape.dim = 16;
  refused(shape, Op::fwd, "values has shape");
  AttnResCall scaled = c;
  scaled.out_o_scale = r.lse.view();
  refused(scaled, Op::fwd, "scales only in fp16");
  refused(c, Op::bwdbwd, "does not implement bwdbwd");
  AttnResRun nan({2, 1, 3, 8, 1, 1e-6}, PrecisionPolicy::uniform(Format::fp32), 1);
  static_cast<float*>(const_cast<void*>(nan.bv.view().data))[5] = std::numeric_limits<float>::quiet_NaN();
  AttnResCall cn = nan.call();
  cn.out_o = nan.o.view(), cn.out_lse = nan.lse.view(), cn.out_h = nan.h.view();
  refused(cn, Op::fwd, "values contains a non-finite value");
  AttentionCall attention;
  try {
    subject->run(Op::fwd, attention);
    ADD_FAILURE() << "an attention call was accepted";
  } catch (const SubjectError& e) {
    EXPECT_NE(std::string(e.what()).find("attnres subject"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fc::kernels
