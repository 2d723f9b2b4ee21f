// The Attention Residuals oracle against closed forms, the phase structure, determinism and its
// input validation.
#include "oracle/attnres.hpp"
#include "oracle/tests/test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

namespace fc::oracle {
namespace {

using testing::normal;

constexpr double kU = 0x1p-53;

double logit(const double* x, const double* w, int D, double eps) {
  double ss = 0, dot = 0;
  for (int c = 0; c < D; ++c) ss += x[c] * x[c], dot += w[c] * x[c];
  return dot / std::sqrt(ss / D + eps);
}

// Two sources and a partial sum, by hand: softmax over the three logits weights the raw vectors.
TEST(AttnResOracle, MatchesTheSoftmaxOverAllSourcesByHand) {
  AttnResShape s;
  s.sources = 2, s.dim = 3, s.eps = 1e-3;
  const auto values = normal(6, 1), partial = normal(3, 2), w = normal(3, 3);
  const double l0 = logit(&values[0], w.data(), 3, s.eps), l1 = logit(&values[3], w.data(), 3, s.eps),
               lu = logit(partial.data(), w.data(), 3, s.eps);
  const double m = std::max({l0, l1, lu});
  const double e0 = std::exp(l0 - m), e1 = std::exp(l1 - m), eu = std::exp(lu - m), z = e0 + e1 + eu;
  const auto h = attnres_forward<double>(s, values, partial, w);
  const auto p1 = attnres_phase1_forward<double>(s, values, w);
  EXPECT_NEAR(p1.lse[0], m + std::log(std::exp(l0 - m) + std::exp(l1 - m)), 16 * kU * (1 + std::fabs(m)));
  for (int c = 0; c < 3; ++c) {
    const double want = (e0 * values[c] + e1 * values[3 + c] + eu * partial[c]) / z;
    EXPECT_NEAR(h[c], want, 64 * kU * (std::fabs(values[c]) + std::fabs(values[3 + c]) + std::fabs(partial[c])));
    // phase 1 alone: the softmax over the two sources
    const double want_o = (e0 * values[c] + e1 * values[3 + c]) / (e0 + e1);
    EXPECT_NEAR(p1.o[c], want_o, 64 * kU * (std::fabs(values[c]) + std::fabs(values[3 + c])));
  }
}

// Phase 1's output is a convex combination of the sources (each coordinate within their range),
// whatever the logits: the property the seed project relies on for bf16 storage.
TEST(AttnResOracle, PhaseOneOutputIsBoundedByTheSources) {
  AttnResShape s;
  s.sources = 4, s.batch = 2, s.tokens = 3, s.dim = 5, s.layers = 2;
  const auto values = normal(s.values_size(), 4);
  auto w = normal(s.queries_size(), 5);
  for (double& e : w) e *= 30;  // sharp softmax
  const auto p1 = attnres_phase1_forward<double>(s, values, w);
  const std::size_t tokens = 6, D = 5;
  for (int layer = 0; layer < 2; ++layer) {
    for (std::size_t t = 0; t < tokens; ++t) {
      for (std::size_t c = 0; c < D; ++c) {
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < 4; ++i) lo = std::min(lo, values[(i * tokens + t) * D + c]), hi = std::max(hi, values[(i * tokens + t) * D + c]);
        const double o = p1.o[(layer * tokens + t) * D + c];
        EXPECT_GE(o, lo - 4 * kU * std::fabs(lo));
        EXPECT_LE(o, hi + 4 * kU * std::fabs(hi));
      }
    }
  }
}

// The backward of both phases equals the composition of the phase backwards (dw summed).
TEST(AttnResOracle, BackwardComposesThePhases) {
  AttnResShape s;
  s.sources = 3, s.tokens = 2, s.dim = 4, s.layers = 2;
  const auto values = normal(s.values_size(), 6), partial = normal(s.outputs_size(), 7), w = normal(s.queries_size(), 8),
             dh = normal(s.outputs_size(), 9);
  const auto all = attnres_backward<double>(s, values, partial, w, dh);
  const auto p1 = attnres_phase1_forward<double>(s, values, w);
  const auto g2 = attnres_phase2_backward<double>(s, p1.o, p1.lse, partial, w, dh);
  const auto g1 = attnres_phase1_backward<double>(s, values, w, g2.d_o, g2.d_lse);
  EXPECT_EQ(all.d_values, g1.d_values);
  EXPECT_EQ(all.d_partial, g2.d_partial);
  for (std::size_t i = 0; i < all.d_queries.size(); ++i) EXPECT_EQ(all.d_queries[i], g1.d_queries[i] + g2.d_queries[i]);
}

// beta = sigmoid(s_u - lse) near 1: 1 - beta must come from its own sigmoid, not from 1 - beta,
// which would be right only to u / (1 - beta) relatively (about 1e-5 here, seen as 230 u in dw).
TEST(AttnResOracle, GateComplementIsAccurateWhenBetaIsNearOne) {
  AttnResShape s;
  s.sources = 1, s.dim = 1, s.eps = 1e-6;
  const std::vector<double> values{-1.0}, partial{1.0}, w{12.5}, dh{1.0};  // s_u - lse ~ 25
  const auto g64 = attnres_backward<double>(s, values, partial, w, dh);
  const std::vector<mp50> v50{-1}, u50{1}, w50{mp50(12.5)}, g50{1};
  const auto p1 = attnres_phase1_forward<mp50>(s, v50, w50);
  const auto ref = attnres_phase2_backward<mp50>(s, p1.o, p1.lse, u50, w50, g50);
  const auto p1d = attnres_phase1_forward<double>(s, values, w);
  const auto d64 = attnres_phase2_backward<double>(s, p1d.o, p1d.lse, partial, w, dh);
  // d_o = (1 - beta) g ~ 1.4e-11: relative error a few u
  const double want = static_cast<double>(ref.d_o[0]);
  ASSERT_GT(want, 0.0);
  ASSERT_LT(want, 1e-9);
  EXPECT_LE(std::fabs(d64.d_o[0] - want), 8 * kU * want);
  EXPECT_LE(std::fabs(d64.d_lse[0] - static_cast<double>(ref.d_lse[0])), 16 * kU * std::fabs(static_cast<double>(ref.d_lse[0])));
  EXPECT_TRUE(std::isfinite(g64.d_queries[0]));
}

TEST(AttnResOracle, ResultsAreIndependentOfTheThreadCount) {
  AttnResShape s;
  s.sources = 3, s.batch = 4, s.tokens = 50, s.dim = 6, s.layers = 3;  // 200 tokens: more than 64 chunks' worth
  const auto values = normal(s.values_size(), 10), partial = normal(s.outputs_size(), 11), w = normal(s.queries_size(), 12),
             dh = normal(s.outputs_size(), 13);
  setenv("FLASHCHECK_THREADS", "1", 1);
  const auto one = attnres_backward<double>(s, values, partial, w, dh);
  setenv("FLASHCHECK_THREADS", "2", 1);
  const auto two = attnres_backward<double>(s, values, partial, w, dh);
  unsetenv("FLASHCHECK_THREADS");
  EXPECT_EQ(one.d_values, two.d_values);
  EXPECT_EQ(one.d_queries, two.d_queries);
}

TEST(AttnResOracle, InvalidInputIsRejectedWithTheReason) {
  const auto message = [](auto&& call) { return testing::rejection_message(call); };
  AttnResShape s;
  s.dim = 2;
  const std::vector<double> values(2, 1.0), w(2, 1.0);
  AttnResShape no_tokens = s;
  no_tokens.tokens = 0;
  EXPECT_NE(message([&] { attnres_phase1_forward<double>(no_tokens, values, w); }).find("empty sequence"), std::string::npos);
  AttnResShape bad_eps = s;
  bad_eps.eps = 0;
  EXPECT_NE(message([&] { attnres_phase1_forward<double>(bad_eps, values, w); }).find("eps"), std::string::npos);
  EXPECT_NE(message([&] { attnres_phase1_forward<double>(s, values, std::vector<double>(3)); }).find("pseudo-queries has 3"),
            std::string::npos);
  EXPECT_NE(message([&] { attnres_phase1_forward<double>(s, std::vector<double>{1.0, INFINITY}, w); }).find("values[1] is not finite"),
            std::string::npos);
}

}  // namespace
}  // namespace fc::oracle
