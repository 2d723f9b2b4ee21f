#include "gradcheck/inputs.hpp"

#include <cmath>
#include <numbers>

#include "precision/philox.hpp"

namespace fc::gradcheck {
namespace {

constexpr std::uint32_t kStreamQ = 256, kStreamK = 257, kStreamV = 258, kStreamDout = 259, kStreamDdq = 260,
                        kStreamDdk = 261, kStreamDdv = 262;
constexpr double kTwoTo32 = 4294967296.0;

double normal_at(const RandomStream& s, std::uint64_t i, std::uint32_t draw) {
  const double u1 = (static_cast<double>(s.word(i, draw)) + 0.5) / kTwoTo32;  // in (0, 1)
  const double u2 = static_cast<double>(s.word(i, draw + 1)) / kTwoTo32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::vector<double> draw(std::uint64_t seed, const InputDistribution& inputs, std::uint32_t stream, std::size_t n, double sigma,
                         bool with_outliers) {
  const RandomStream s{seed, stream};
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = sigma * normal_at(s, i, 0);
    if (inputs.kind == Distribution::outliers && with_outliers) {
      // + N(0, outlier_sigma^2) with probability outlier_rate (the default mix: N(0, 100) with probability 0.001)
      if (static_cast<double>(s.word(i, 2)) < inputs.outlier_rate * kTwoTo32) x[i] += inputs.outlier_sigma * normal_at(s, i, 3);
    }
  }
  return x;
}

std::vector<double> draw(const Case& c, std::uint32_t stream, std::size_t n, double sigma) {
  return draw(c.seed, c.inputs, stream, n, sigma, stream == kStreamQ || stream == kStreamK || stream == kStreamV);
}

constexpr std::uint32_t kStreamValues = 280, kStreamPartial = 281, kStreamQueries = 282, kStreamDh = 283;

std::size_t elements(const std::array<std::int64_t, 4>& sh) { return static_cast<std::size_t>(sh[0] * sh[1] * sh[2] * sh[3]); }

}  // namespace

std::array<std::int64_t, 4> attnres_values_shape(const kernels::AttnResShape& s) { return {s.sources, s.batch, s.tokens, s.dim}; }
std::array<std::int64_t, 4> attnres_rows_shape(const kernels::AttnResShape& s) { return {s.layers, s.batch, s.tokens, s.dim}; }
std::array<std::int64_t, 4> attnres_stats_shape(const kernels::AttnResShape& s) { return {s.layers, s.batch, s.tokens, 1}; }
std::array<std::int64_t, 4> attnres_queries_shape(const kernels::AttnResShape& s) { return {1, 1, s.layers, s.dim}; }

AttnResInputs make_attnres_inputs(const AttnResCase& c) {
  const PrecisionPolicy& p = c.policy;
  const kernels::AttnResShape& s = c.shape;
  AttnResInputs in{Tensor(p.format(Role::v), attnres_values_shape(s), Layout::bhnd), Tensor(p.format(Role::v), attnres_rows_shape(s), Layout::bhnd),
                   Tensor(p.format(Role::q), attnres_queries_shape(s), Layout::bhnd), Tensor(p.format(Role::dout), attnres_rows_shape(s), Layout::bhnd)};
  const double sigma = c.inputs.kind == Distribution::normal ? c.inputs.sigma : 1.0;
  const double logit_sigma = c.inputs.logit_sigma() > 0 ? c.inputs.logit_sigma() : 1.0;
  in.values.assign(draw(c.seed, c.inputs, kStreamValues, elements(attnres_values_shape(s)), sigma, true));
  in.partial.assign(draw(c.seed, c.inputs, kStreamPartial, elements(attnres_rows_shape(s)), sigma, true));
  in.queries.assign(draw(c.seed, c.inputs, kStreamQueries, elements(attnres_queries_shape(s)), logit_sigma / std::sqrt(static_cast<double>(s.dim)), false));
  in.dh.assign(draw(c.seed, c.inputs, kStreamDh, elements(attnres_rows_shape(s)), 1.0, false));
  return in;
}

std::vector<double> standard_normal(std::uint64_t seed, std::uint32_t stream, std::size_t n) {
  const RandomStream s{seed, stream};
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = normal_at(s, i, 0);
  return x;
}

std::array<std::int64_t, 4> q_shape(const kernels::AttentionShape& s) { return {s.batch, s.heads_q, s.seq_q, s.head_dim}; }
std::array<std::int64_t, 4> k_shape(const kernels::AttentionShape& s) { return {s.batch, s.heads_kv, s.seq_k, s.head_dim}; }
std::array<std::int64_t, 4> v_shape(const kernels::AttentionShape& s) { return {s.batch, s.heads_kv, s.seq_k, s.head_dim_v}; }
std::array<std::int64_t, 4> o_shape(const kernels::AttentionShape& s) { return {s.batch, s.heads_q, s.seq_q, s.head_dim_v}; }
std::array<std::int64_t, 4> lse_shape(const kernels::AttentionShape& s) { return {s.batch, s.heads_q, s.seq_q, 1}; }

CaseInputs make_inputs(const Case& c) {
  const PrecisionPolicy& p = c.policy;
  const kernels::AttentionShape& s = c.shape;
  CaseInputs in{Tensor(p.format(Role::q), q_shape(s), c.layout),     Tensor(p.format(Role::k), k_shape(s), c.layout),
                Tensor(p.format(Role::v), v_shape(s), c.layout),     Tensor(p.format(Role::dout), o_shape(s), c.layout),
                Tensor(p.format(Role::dout), q_shape(s), c.layout),  Tensor(p.format(Role::dout), k_shape(s), c.layout),
                Tensor(p.format(Role::dout), v_shape(s), c.layout)};
  // onehot / uniform / logits:T: scale Q and K by g so the logits s q.k have standard deviation |s| g^2 sqrt(d) = target
  double qk_sigma = c.inputs.kind == Distribution::normal ? c.inputs.sigma : 1.0;
  if (const double target = c.inputs.logit_sigma(); target > 0) {
    const double per_unit = std::fabs(c.scale) * std::sqrt(static_cast<double>(s.head_dim));
    qk_sigma = per_unit > 0 ? std::sqrt(target / per_unit) : 1.0;
  }
  const auto size = [](const std::array<std::int64_t, 4>& sh) { return static_cast<std::size_t>(sh[0] * sh[1] * sh[2] * sh[3]); };
  in.q.assign(draw(c, kStreamQ, size(q_shape(s)), qk_sigma));
  in.k.assign(draw(c, kStreamK, size(k_shape(s)), qk_sigma));
  in.v.assign(draw(c, kStreamV, size(v_shape(s)), c.inputs.kind == Distribution::normal ? c.inputs.sigma : 1.0));
  in.dout.assign(draw(c, kStreamDout, size(o_shape(s)), 1.0));
  in.ddq.assign(draw(c, kStreamDdq, size(q_shape(s)), 1.0));
  in.ddk.assign(draw(c, kStreamDdk, size(k_shape(s)), 1.0));
  in.ddv.assign(draw(c, kStreamDdv, size(v_shape(s)), 1.0));
  return in;
}

}  // namespace fc::gradcheck
