#include <cmath>

#include "oracle/attention_impl.hpp"

namespace fc::oracle {

AttentionMagnitudes attention_magnitudes(const AttentionProblem& p, AttentionInputs<double> x,
                                         std::span<const double> dout, AttentionInputs<double> c) {
  p.validate();
  check_qkv(p, x);
  check_array("dO", dout, p.shape.o_size());
  check_qkv(p, c, "dd");
  const auto absolute = [](std::span<const double> in) {
    std::vector<double> out(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = std::fabs(in[i]);
    return out;
  };
  const auto q = absolute(x.q), k = absolute(x.k), v = absolute(x.v), g = absolute(dout);
  const auto ddq = absolute(c.q), ddk = absolute(c.k), ddv = absolute(c.v);
  AttentionMagnitudes m;
  m.o.resize(p.shape.o_size()), m.delta.resize(p.shape.row_size());
  m.dq.resize(p.shape.q_size()), m.dk.resize(p.shape.k_size()), m.dv.resize(p.shape.v_size());
  m.dq2.resize(p.shape.q_size()), m.dk2.resize(p.shape.k_size()), m.dv2.resize(p.shape.v_size());
  m.ddo.resize(p.shape.o_size());
  std::vector<double> dd(p.shape.row_size()), b(p.shape.row_size());
  detail::Arrays<double> a;
  a.q = q.data(), a.k = k.data(), a.v = v.data(), a.dout = g.data();
  a.ddq = ddq.data(), a.ddk = ddk.data(), a.ddv = ddv.data();
  a.o = m.o.data(), a.delta = m.delta.data(), a.dq = m.dq.data(), a.dk = m.dk.data(), a.dv = m.dv.data();
  a.dq2 = m.dq2.data(), a.dk2 = m.dk2.data(), a.dv2 = m.dv2.data(), a.ddo = m.ddo.data();
  a.dd = dd.data(), a.b = b.data();
  detail::run_heads<true>(p, detail::Level::double_backward, x.q.data(), x.k.data(), a, &m.logit_max);
  return m;
}

double attention_logit_rate(const AttentionProblem& p, std::span<const double> q, std::span<const double> k,
                            std::span<const double> aq, std::span<const double> ak) {
  p.validate();
  check_array("Q", q, p.shape.q_size());
  check_array("K", k, p.shape.k_size());
  check_array("direction.Q", aq, p.shape.q_size());
  check_array("direction.K", ak, p.shape.k_size());
  const AttentionShape& sh = p.shape;
  const int d = sh.head_dim;
  double rate = 0;
  for (int b = 0; b < sh.batch; ++b) {
    for (int h = 0; h < sh.heads_q; ++h) {
      const std::size_t kv = static_cast<std::size_t>(b) * sh.heads_kv + h / sh.group();
      for (int i = 0; i < sh.seq_q; ++i) {
        const std::size_t qrow = ((static_cast<std::size_t>(b) * sh.heads_q + h) * sh.seq_q + i) * d;
        for (int j = 0; j < sh.seq_k; ++j) {
          const std::size_t krow = (kv * sh.seq_k + j) * d;
          double r = 0;
          for (int c = 0; c < d; ++c) r += std::fabs(aq[qrow + c] * k[krow + c]) + std::fabs(q[qrow + c] * ak[krow + c]);
          rate = std::max(rate, std::fabs(p.scale) * r);
        }
      }
    }
  }
  return rate;
}

}  // namespace fc::oracle
