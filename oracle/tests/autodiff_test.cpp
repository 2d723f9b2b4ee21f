// Properties of the forward-mode derivatives themselves.
#include "oracle/autodiff.hpp"
#include "oracle/tests/test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace fc::oracle {
namespace {

using testing::normal;

AttentionProblem small_problem() {
  AttentionProblem p;
  p.shape = {1, 2, 1, 3, 4, 2, 3};
  p.mask = Mask::causal_bottom_right;
  p.scale = 0.7;
  return p;
}

// The JVP's value part is the forward itself, and it is linear in the direction.
TEST(Autodiff, JvpCarriesTheForwardAndIsLinear) {
  const AttentionProblem p = small_problem();
  const auto q = normal(p.shape.q_size(), 1), k = normal(p.shape.k_size(), 2), v = normal(p.shape.v_size(), 3);
  auto aq = normal(p.shape.q_size(), 4), ak = normal(p.shape.k_size(), 5), av = normal(p.shape.v_size(), 6);
  const auto j1 = attention_jvp<double>(p, {q, k, v}, {aq, ak, av});
  const auto f = attention_forward<double>(p, {q, k, v});
  for (std::size_t i = 0; i < f.o.size(); ++i) EXPECT_NEAR(j1.o[i], f.o[i], 1e-14);
  for (auto* x : {&aq, &ak, &av}) {
    for (double& e : *x) e *= 2;  // exact
  }
  const auto j2 = attention_jvp<double>(p, {q, k, v}, {aq, ak, av});
  for (std::size_t i = 0; i < j1.o_dot.size(); ++i) EXPECT_EQ(j2.o_dot[i], 2 * j1.o_dot[i]);
}

// Mixed second derivatives are symmetric: D^2 O[a, b] = D^2 O[b, a] (up to rounding).
TEST(Autodiff, SecondDirectionalDerivativeIsSymmetric) {
  const AttentionProblem p = small_problem();
  const auto q = normal(p.shape.q_size(), 7), k = normal(p.shape.k_size(), 8), v = normal(p.shape.v_size(), 9);
  const auto aq = normal(p.shape.q_size(), 10), ak = normal(p.shape.k_size(), 11), av = normal(p.shape.v_size(), 12);
  const auto bq = normal(p.shape.q_size(), 13), bk = normal(p.shape.k_size(), 14), bv = normal(p.shape.v_size(), 15);
  const auto ab = attention_second_directional<quad>(p, {std::vector<quad>(q.begin(), q.end()), std::vector<quad>(k.begin(), k.end()), std::vector<quad>(v.begin(), v.end())},
                                                     {std::vector<quad>(aq.begin(), aq.end()), std::vector<quad>(ak.begin(), ak.end()), std::vector<quad>(av.begin(), av.end())},
                                                     {std::vector<quad>(bq.begin(), bq.end()), std::vector<quad>(bk.begin(), bk.end()), std::vector<quad>(bv.begin(), bv.end())});
  const auto ba = attention_second_directional<quad>(p, {std::vector<quad>(q.begin(), q.end()), std::vector<quad>(k.begin(), k.end()), std::vector<quad>(v.begin(), v.end())},
                                                     {std::vector<quad>(bq.begin(), bq.end()), std::vector<quad>(bk.begin(), bk.end()), std::vector<quad>(bv.begin(), bv.end())},
                                                     {std::vector<quad>(aq.begin(), aq.end()), std::vector<quad>(ak.begin(), ak.end()), std::vector<quad>(av.begin(), av.end())});
  for (std::size_t i = 0; i < ab.o_ab.size(); ++i) {
    EXPECT_LT(static_cast<double>(abs(ab.o_ab[i] - ba.o_ab[i])), 1e-28 * (1 + std::fabs(static_cast<double>(ab.o_ab[i]))));
  }
}

// The HVP's entries are the double backward's dQ', dK', dV' (checked in oracle-check); here its
// argument checking.
TEST(Autodiff, HvpRejectsCoordinatesBeyondTheInputs) {
  const AttentionProblem p = small_problem();
  const auto q = normal(p.shape.q_size(), 16), k = normal(p.shape.k_size(), 17), v = normal(p.shape.v_size(), 18);
  const auto dout = normal(p.shape.o_size(), 19);
  const std::size_t n = p.shape.q_size() + p.shape.k_size() + p.shape.v_size();
  const std::vector<std::size_t> inside{0, n - 1}, outside{n};
  EXPECT_EQ(attention_hvp<double>(p, {q, k, v}, dout, {q, k, v}, inside).size(), 2u);
  EXPECT_THROW(attention_hvp<double>(p, {q, k, v}, dout, {q, k, v}, outside), std::invalid_argument);
}

}  // namespace
}  // namespace fc::oracle
