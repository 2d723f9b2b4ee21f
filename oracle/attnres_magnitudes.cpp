#include <cmath>

#include "oracle/attnres_impl.hpp"

namespace fc::oracle {

// The formulas of attnres_impl.hpp on absolute values, subtractions made additions; p, lse, r_u and
// beta are the true (non-negative) ones, and each logit s is replaced by r |w| . |x|.
AttnResMagnitudes attnres_magnitudes(const AttnResShape& sh, std::span<const double> values,
                                     std::span<const double> partial, std::span<const double> queries,
                                     std::span<const double> dh) {
  detail::check_attnres(sh, values, queries);
  check_array("partial sums", partial, sh.outputs_size());
  check_array("dh", dh, sh.outputs_size());
  const auto absolute = [](std::span<const double> in) {
    std::vector<double> out(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = std::fabs(in[i]);
    return out;
  };
  const auto av = absolute(values), au = absolute(partial), aw = absolute(queries), ag = absolute(dh);
  const std::size_t N = static_cast<std::size_t>(sh.sources), D = static_cast<std::size_t>(sh.dim);
  const std::size_t tokens = static_cast<std::size_t>(sh.batch) * static_cast<std::size_t>(sh.tokens);
  AttnResMagnitudes m;
  m.h.resize(sh.outputs_size());
  m.d_values.assign(sh.values_size(), 0.0);
  m.d_partial.resize(sh.outputs_size());
  m.d_queries.assign(sh.queries_size(), 0.0);
  detail::Phase1Token<double> t;
  std::vector<double> o(D), d_o(D);
  for (int layer = 0; layer < sh.layers; ++layer) {
    const double* w = queries.data() + static_cast<std::size_t>(layer) * D;
    const double* w_abs = aw.data() + static_cast<std::size_t>(layer) * D;
    double* dw = m.d_queries.data() + static_cast<std::size_t>(layer) * D;
    for (std::size_t token = 0; token < tokens; ++token) {
      const std::size_t row = static_cast<std::size_t>(layer) * tokens + token;
      detail::phase1_token(sh, values.data(), w, token, t);  // true r, s, p, lse
      for (std::size_t i = 0; i < N; ++i) {
        t.s[i] = t.r[i] * detail::dot(w_abs, av.data() + (i * tokens + token) * D, D);
        m.logit_max = std::max(m.logit_max, t.s[i]);
      }
      std::fill(o.begin(), o.end(), 0.0);
      for (std::size_t i = 0; i < N; ++i) {
        for (std::size_t c = 0; c < D; ++c) o[c] += t.p[i] * av[(i * tokens + token) * D + c];
      }
      const double* u = partial.data() + row * D;
      const double* u_abs = au.data() + row * D;
      const double r_u = detail::rms_inverse(u, D, sh.eps);
      const double s_u = r_u * detail::dot(w, u, D);
      const double s_u_abs = r_u * detail::dot(w_abs, u_abs, D);
      m.logit_max = std::max(m.logit_max, s_u_abs);
      const detail::Gate<double> gate = detail::gate(s_u, t.lse);
      for (std::size_t c = 0; c < D; ++c) m.h[row * D + c] = gate.one_minus_beta * o[c] + gate.beta * u_abs[c];
      double d_lse = 0;
      detail::phase2_backward_token<true>(D, o.data(), u_abs, w_abs, ag.data() + row * D, gate, r_u, s_u_abs, d_o.data(),
                                          d_lse, m.d_partial.data() + row * D, dw);
      detail::phase1_backward_token<true>(sh, av.data(), w_abs, token, t, d_o.data(), d_lse, m.d_values.data(), dw);
    }
  }
  return m;
}

}  // namespace fc::oracle
