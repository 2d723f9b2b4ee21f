// The attention oracle against values known in closed form, the mask conventions, fully masked
// rows, GQA and batching by equivalence, determinism, and its input validation.
#include "oracle/attention.hpp"
#include "oracle/tests/test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

namespace fc::oracle {
namespace {

using testing::normal;

AttentionProblem problem(int nq, int nk, int d, int dv, Mask mask = Mask::none, int hq = 1, int hkv = 1, int b = 1) {
  AttentionProblem p;
  p.shape = {b, hq, hkv, nq, nk, d, dv};
  p.mask = mask;
  p.scale = default_scale(d);
  return p;
}

constexpr double kU = 0x1p-53;

// One key: every visible row's softmax is 1, so O = V, L = s q . k, and dQ = dK = 0 (dS = s (dP - D)
// with dP = D): up to rounding of two equal dot products.
TEST(AttentionOracle, OneKeyGivesTheValueAndNoLogitGradient) {
  const AttentionProblem p = problem(3, 1, 4, 2);
  const auto q = normal(12, 1), k = normal(4, 2), v = normal(2, 3), dout = normal(6, 4);
  const auto f = attention_forward<double>(p, {q, k, v});
  const auto g = attention_backward<double>(p, {q, k, v}, dout);
  for (int i = 0; i < 3; ++i) {
    double qk = 0;
    for (int c = 0; c < 4; ++c) qk += q[i * 4 + c] * k[c];
    EXPECT_NEAR(f.lse[i], p.scale * qk, 8 * kU * (1 + std::fabs(p.scale * qk)));
    for (int c = 0; c < 2; ++c) EXPECT_EQ(f.o[i * 2 + c], v[c]);
    for (int c = 0; c < 4; ++c) EXPECT_LE(std::fabs(g.dq[i * 4 + c]), 16 * kU * 10);
  }
  // dV = P^T dO = the column sums of dO
  EXPECT_NEAR(g.dv[0], dout[0] + dout[2] + dout[4], 4 * kU * 10);
}

// Zero queries: all visible logits equal, so O_i is the mean of the visible values and
// L_i = log(number visible). Also fixes the two causal conventions for Nq != Nk.
TEST(AttentionOracle, UniformLogitsAverageTheVisibleValues) {
  const int nq = 3, nk = 5, dv = 2;
  const std::vector<double> q(nq * 2, 0.0), k = normal(nk * 2, 5), v = normal(nk * dv, 6);
  const auto mean_of_first = [&](int count, int c) {
    double s = 0;
    for (int j = 0; j < count; ++j) s += v[j * dv + c];
    return s / count;
  };
  // top-left: row i sees keys 0..i; bottom-right: row i sees keys 0..i + (Nk - Nq) = 0..i + 2
  for (auto [mask, first_visible] : {std::pair{Mask::causal_top_left, 1}, std::pair{Mask::causal_bottom_right, 3},
                                     std::pair{Mask::none, 5}}) {
    const auto f = attention_forward<double>(problem(nq, nk, 2, dv, mask), {q, k, v});
    for (int i = 0; i < nq; ++i) {
      const int visible = mask == Mask::none ? nk : first_visible + i;
      EXPECT_NEAR(f.lse[i], std::log(static_cast<double>(visible)), 4 * kU);
      for (int c = 0; c < dv; ++c) EXPECT_NEAR(f.o[i * dv + c], mean_of_first(visible, c), 16 * kU) << name(mask) << " row " << i;
    }
  }
}

// Bottom-right with Nq > Nk leaves the first Nq - Nk rows without a visible key: O = 0, L = -inf,
// and they change no gradient: the result equals the problem without those rows.
TEST(AttentionOracle, FullyMaskedRowsAreZeroAndInert) {
  const int nq = 5, nk = 2, d = 3, dv = 2, dead = nq - nk;
  const AttentionProblem p = problem(nq, nk, d, dv, Mask::causal_bottom_right);
  const auto q = normal(nq * d, 7), k = normal(nk * d, 8), v = normal(nk * dv, 9), dout = normal(nq * dv, 10);
  const auto ddq = normal(nq * d, 11), ddk = normal(nk * d, 12), ddv = normal(nk * dv, 13);
  const auto f = attention_forward<double>(p, {q, k, v});
  const auto g = attention_backward<double>(p, {q, k, v}, dout);
  const auto h = attention_double_backward<double>(p, {q, k, v}, dout, {ddq, ddk, ddv});
  for (int i = 0; i < dead; ++i) {
    EXPECT_EQ(f.lse[i], -std::numeric_limits<double>::infinity());
    EXPECT_EQ(g.delta[i], 0.0);
    for (int c = 0; c < dv; ++c) {
      EXPECT_EQ(f.o[i * dv + c], 0.0);
      EXPECT_EQ(h.ddo[i * dv + c], 0.0);
    }
    for (int c = 0; c < d; ++c) {
      EXPECT_EQ(g.dq[i * d + c], 0.0);
      EXPECT_EQ(h.dq2[i * d + c], 0.0);
    }
  }
  // The live rows alone (Nq = Nk = 2, bottom-right = top-left) give the same dK, dV, dK', dV'.
  const AttentionProblem live = problem(nk, nk, d, dv, Mask::causal_bottom_right);
  const auto tail = [&](const std::vector<double>& x, int width) {
    return std::vector<double>(x.begin() + dead * width, x.end());
  };
  const auto g2 = attention_backward<double>(live, {tail(q, d), k, v}, tail(dout, dv));
  const auto h2 = attention_double_backward<double>(live, {tail(q, d), k, v}, tail(dout, dv), {tail(ddq, d), ddk, ddv});
  for (std::size_t i = 0; i < g.dk.size(); ++i) {
    EXPECT_EQ(g.dk[i], g2.dk[i]);
    EXPECT_EQ(h.dk2[i], h2.dk2[i]);
  }
  for (std::size_t i = 0; i < g.dv.size(); ++i) {
    EXPECT_EQ(g.dv[i], g2.dv[i]);
    EXPECT_EQ(h.dv2[i], h2.dv2[i]);
  }
}

// GQA equals multi-head attention with each kv head repeated for its query heads, with dK, dV (and
// dK', dV') summed over the group.
TEST(AttentionOracle, GroupedQueryAttentionEqualsRepeatedHeads) {
  const int hq = 4, hkv = 2, n = 3, d = 2, dv = 3, group = hq / hkv;
  const AttentionProblem gqa = problem(n, n, d, dv, Mask::causal_top_left, hq, hkv);
  const AttentionProblem mha = problem(n, n, d, dv, Mask::causal_top_left, hq, hq);
  const auto q = normal(hq * n * d, 14), k = normal(hkv * n * d, 15), v = normal(hkv * n * dv, 16);
  const auto dout = normal(hq * n * dv, 17), ddq = normal(hq * n * d, 18), ddk = normal(hkv * n * d, 19),
             ddv = normal(hkv * n * dv, 20);
  const auto repeat = [&](const std::vector<double>& x, int width) {
    std::vector<double> out;
    for (int h = 0; h < hq; ++h) out.insert(out.end(), x.begin() + (h / group) * n * width, x.begin() + (h / group + 1) * n * width);
    return out;
  };
  const auto g = attention_double_backward<double>(gqa, {q, k, v}, dout, {ddq, ddk, ddv});
  const auto m = attention_double_backward<double>(mha, {q, repeat(k, d), repeat(v, dv)}, dout,
                                                   {ddq, repeat(ddk, d), repeat(ddv, dv)});
  for (std::size_t i = 0; i < g.dq2.size(); ++i) EXPECT_EQ(g.dq2[i], m.dq2[i]);
  for (std::size_t i = 0; i < g.ddo.size(); ++i) EXPECT_EQ(g.ddo[i], m.ddo[i]);
  for (int h = 0; h < hkv; ++h) {
    for (int e = 0; e < n * d; ++e) {
      double sum = 0;
      for (int g2 = 0; g2 < group; ++g2) sum += m.dk2[(h * group + g2) * n * d + e];
      EXPECT_NEAR(g.dk2[h * n * d + e], sum, 8 * kU * (1 + std::fabs(sum)));
    }
  }
  const auto gb = attention_backward<double>(gqa, {q, k, v}, dout);
  const auto mb = attention_backward<double>(mha, {q, repeat(k, d), repeat(v, dv)}, dout);
  for (int h = 0; h < hkv; ++h) {
    for (int e = 0; e < n * dv; ++e) {
      double sum = 0;
      for (int g2 = 0; g2 < group; ++g2) sum += mb.dv[(h * group + g2) * n * dv + e];
      EXPECT_NEAR(gb.dv[h * n * dv + e], sum, 8 * kU * (1 + std::fabs(sum)));
    }
  }
}

TEST(AttentionOracle, BatchEntriesAreIndependent) {
  const AttentionProblem two = problem(4, 3, 2, 2, Mask::none, 1, 1, 2), one = problem(4, 3, 2, 2);
  const auto q = normal(16, 21), k = normal(12, 22), v = normal(12, 23);
  const auto f = attention_forward<double>(two, {q, k, v});
  const auto half = [](const std::vector<double>& x, int i) {
    return std::vector<double>(x.begin() + i * x.size() / 2, x.begin() + (i + 1) * x.size() / 2);
  };
  for (int b = 0; b < 2; ++b) {
    const auto f1 = attention_forward<double>(one, {half(q, b), half(k, b), half(v, b)});
    for (std::size_t i = 0; i < f1.o.size(); ++i) EXPECT_EQ(f.o[b * f1.o.size() + i], f1.o[i]);
  }
}

// The result does not depend on how many threads compute it (each kv head's group is summed in
// head order by one thread).
TEST(AttentionOracle, ResultsAreIndependentOfTheThreadCount) {
  const AttentionProblem p = problem(6, 7, 3, 2, Mask::causal_bottom_right, 6, 2, 2);
  const auto q = normal(p.shape.q_size(), 24), k = normal(p.shape.k_size(), 25), v = normal(p.shape.v_size(), 26);
  const auto dout = normal(p.shape.o_size(), 27);
  setenv("FLASHCHECK_THREADS", "1", 1);
  const auto one = attention_backward<double>(p, {q, k, v}, dout);
  setenv("FLASHCHECK_THREADS", "3", 1);
  const auto three = attention_backward<double>(p, {q, k, v}, dout);
  unsetenv("FLASHCHECK_THREADS");
  EXPECT_EQ(one.dq, three.dq);
  EXPECT_EQ(one.dk, three.dk);
  EXPECT_EQ(one.dv, three.dv);
}

TEST(AttentionOracle, InvalidInputIsRejectedWithTheReason) {
  const auto message = [](auto&& call) { return testing::rejection_message(call); };
  const std::vector<double> q(4, 0.5), k(4, 0.5), v(4, 0.5);
  AttentionProblem empty = problem(2, 2, 2, 2);
  empty.shape.seq_k = 0;
  EXPECT_NE(message([&] { attention_forward<double>(empty, {q, k, v}); }).find("empty sequence"), std::string::npos);
  const AttentionProblem groups = problem(2, 2, 2, 2, Mask::none, 3, 2);
  EXPECT_NE(message([&] { attention_forward<double>(groups, {q, k, v}); }).find("not a multiple"), std::string::npos);
  const AttentionProblem p = problem(2, 2, 2, 2);
  EXPECT_NE(message([&] { attention_forward<double>(p, {q, k, std::vector<double>(3)}); }).find("V has 3 elements"),
            std::string::npos);
  std::vector<double> bad = q;
  bad[2] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(message([&] { attention_forward<double>(p, {bad, k, v}); }).find("Q[2] is not finite"), std::string::npos);
  AttentionProblem nan_scale = p;
  nan_scale.scale = std::numeric_limits<double>::infinity();
  EXPECT_NE(message([&] { attention_forward<double>(nan_scale, {q, k, v}); }).find("scale"), std::string::npos);
}

}  // namespace
}  // namespace fc::oracle
