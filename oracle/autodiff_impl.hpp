// Implementation of autodiff.hpp, included by one .cpp file per scalar type.
#pragma once

#include <boost/math/differentiation/autodiff.hpp>

#include <tuple>

#include "oracle/autodiff.hpp"
#include "oracle/naive_attention.hpp"

namespace fc::oracle {

namespace detail {

// x + s a (+ t b): each element a polynomial in the differentiation variables.
template <class F, class T, class... Vars>
std::vector<F> lift(std::span<const T> x, const std::tuple<std::span<const T>, Vars>&... directions) {
  std::vector<F> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    out[i] = F(x[i]);
    ((out[i] += std::get<1>(directions) * std::get<0>(directions)[i]), ...);
  }
  return out;
}

template <class T>
void check_inputs(const AttentionProblem& p, AttentionInputs<T> x, const char* direction_name, AttentionInputs<T> a) {
  p.validate();
  check_qkv(p, x);
  check_qkv(p, a, std::string(direction_name) + ".");
}

}  // namespace detail

template <class T>
AttentionJvp<T> attention_jvp(const AttentionProblem& p, AttentionInputs<T> x, AttentionInputs<T> a) {
  detail::check_inputs(p, x, "direction", a);
  using boost::math::differentiation::make_fvar;
  using F = boost::math::differentiation::autodiff_fvar<T, 1>;
  const F t = make_fvar<T, 1>(T(0));
  const auto q = detail::lift<F>(x.q, std::tuple{a.q, t});
  const auto k = detail::lift<F>(x.k, std::tuple{a.k, t});
  const auto v = detail::lift<F>(x.v, std::tuple{a.v, t});
  std::vector<F> o(p.shape.o_size()), lse(p.shape.row_size());
  naive_attention_forward(p, q.data(), k.data(), v.data(), o.data(), lse.data());
  AttentionJvp<T> r;
  for (const F& e : o) r.o.push_back(e.derivative(0)), r.o_dot.push_back(e.derivative(1));
  for (const F& e : lse) r.lse.push_back(e.derivative(0)), r.lse_dot.push_back(e.derivative(1));
  return r;
}

template <class T>
AttentionSecondDirectional<T> attention_second_directional(const AttentionProblem& p, AttentionInputs<T> x,
                                                           AttentionInputs<T> a, AttentionInputs<T> b) {
  detail::check_inputs(p, x, "direction a", a);
  detail::check_inputs(p, x, "direction b", b);
  using boost::math::differentiation::make_ftuple;
  using F = boost::math::differentiation::autodiff_fvar<T, 1, 1>;
  const auto vars = make_ftuple<T, 1, 1>(T(0), T(0));
  const F s = std::get<0>(vars), t = std::get<1>(vars);
  const auto q = detail::lift<F>(x.q, std::tuple{a.q, s}, std::tuple{b.q, t});
  const auto k = detail::lift<F>(x.k, std::tuple{a.k, s}, std::tuple{b.k, t});
  const auto v = detail::lift<F>(x.v, std::tuple{a.v, s}, std::tuple{b.v, t});
  std::vector<F> o(p.shape.o_size()), lse(p.shape.row_size());
  naive_attention_forward(p, q.data(), k.data(), v.data(), o.data(), lse.data());
  AttentionSecondDirectional<T> r;
  for (const F& e : o) r.o_ab.push_back(e.derivative(1, 1));
  for (const F& e : lse) r.lse_ab.push_back(e.derivative(1, 1));
  return r;
}

template <class T>
std::vector<T> attention_hvp(const AttentionProblem& p, AttentionInputs<T> x, std::span<const T> dout,
                             AttentionInputs<T> v, std::span<const std::size_t> coordinates) {
  detail::check_inputs(p, x, "direction", v);
  check_array("dO", dout, p.shape.o_size());
  const std::size_t nq = p.shape.q_size(), nk = p.shape.k_size(), nv = p.shape.v_size();
  std::vector<T> zq(nq, T(0)), zk(nk, T(0)), zv(nv, T(0)), out;
  for (const std::size_t j : coordinates) {
    if (j >= nq + nk + nv) {
      throw std::invalid_argument("attention_hvp: coordinate " + std::to_string(j) + " is beyond Q, K, V (" +
                                  std::to_string(nq + nk + nv) + " elements)");
    }
    std::vector<T>& unit = j < nq ? zq : j < nq + nk ? zk : zv;
    const std::size_t local = j < nq ? j : j < nq + nk ? j - nq : j - nq - nk;
    unit[local] = T(1);
    const auto second = attention_second_directional<T>(p, x, v, {zq, zk, zv});
    unit[local] = T(0);
    T sum = 0;
    for (std::size_t i = 0; i < dout.size(); ++i) sum += dout[i] * second.o_ab[i];
    out.push_back(sum);
  }
  return out;
}

template <class T>
AttnResJvp<T> attnres_jvp(const AttnResShape& sh, std::span<const T> values, std::span<const T> partial,
                          std::span<const T> queries, std::span<const T> a_values, std::span<const T> a_partial,
                          std::span<const T> a_queries) {
  sh.validate();
  check_array("values", values, sh.values_size());
  check_array("partial sums", partial, sh.outputs_size());
  check_array("pseudo-queries", queries, sh.queries_size());
  check_array("direction.values", a_values, sh.values_size());
  check_array("direction.partial", a_partial, sh.outputs_size());
  check_array("direction.queries", a_queries, sh.queries_size());
  using boost::math::differentiation::make_fvar;
  using F = boost::math::differentiation::autodiff_fvar<T, 1>;
  const F t = make_fvar<T, 1>(T(0));
  const auto v = detail::lift<F>(values, std::tuple{a_values, t});
  const auto u = detail::lift<F>(partial, std::tuple{a_partial, t});
  const auto w = detail::lift<F>(queries, std::tuple{a_queries, t});
  std::vector<F> h(sh.outputs_size());
  attnres_one_softmax_forward(sh, v.data(), u.data(), w.data(), h.data());
  AttnResJvp<T> r;
  for (const F& e : h) r.h.push_back(e.derivative(0)), r.h_dot.push_back(e.derivative(1));
  return r;
}

}  // namespace fc::oracle
