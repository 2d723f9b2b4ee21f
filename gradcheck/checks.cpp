#include "gradcheck/checks.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include "gradcheck/baseline.hpp"
#include "gradcheck/caller.hpp"
#include "gradcheck/inputs.hpp"
#include "oracle/attention.hpp"
#include "oracle/ladder.hpp"

namespace fc::gradcheck {

// How far rounding logits of magnitude up to A - 1 to a format of unit roundoff u can move a softmax
// weight, as a factor: e^(2 u A) (the weight's own logit and its normaliser), capped where it would
// overflow.
double weight_perturbation(double u, double amp) { return std::exp(std::min(2 * u * amp, 700.0)); }

std::optional<PropertyCheck> additivity_undetermined(double u, double amp, const std::string& format) {
  // Past e^10 the property is skipped, with the reason, rather than held to a vacuous bound: logits this
  // large rounded to the format (as the baseline does) leave the softmax weights undetermined.
  if (2 * u * amp <= 10) return std::nullopt;
  return PropertyCheck{"additivity", true, true,
                       "logits up to " + shortest(amp - 1) + " rounded to " + format + " move softmax weights by up to e^" +
                           shortest(2 * u * amp) + "; no bound in exact magnitudes"};
}

oracle::AttentionProblem to_problem(const Case& c) {
  oracle::AttentionProblem p;
  const auto& s = c.shape;
  p.shape = {s.batch, s.heads_q, s.heads_kv, s.seq_q, s.seq_k, s.head_dim, s.head_dim_v};
  p.mask = c.mask == kernels::Mask::none            ? oracle::Mask::none
           : c.mask == kernels::Mask::causal_top_left ? oracle::Mask::causal_top_left
                                                      : oracle::Mask::causal_bottom_right;
  p.scale = c.scale;
  return p;
}

namespace {

using kernels::Op;

// The oracle's outputs of an op in the order of Outputs, in type T.
template <class T>
std::vector<std::vector<T>> oracle_values(const oracle::AttentionProblem& p, const CaseInputs& in, Op op) {
  const auto as = [](const Tensor& t) {
    const std::vector<double> x = t.values();
    return std::vector<T>(x.begin(), x.end());
  };
  const std::vector<T> q = as(in.q), k = as(in.k), v = as(in.v);
  if (op == Op::fwd) {
    auto f = oracle::attention_forward<T>(p, {q, k, v});
    return {std::move(f.o), std::move(f.lse)};
  }
  const std::vector<T> dout = as(in.dout);
  if (op == Op::bwd) {
    auto g = oracle::attention_backward<T>(p, {q, k, v}, dout);
    return {std::move(g.dq), std::move(g.dk), std::move(g.dv)};
  }
  const std::vector<T> ddq = as(in.ddq), ddk = as(in.ddk), ddv = as(in.ddv);
  auto h = oracle::attention_double_backward<T>(p, {q, k, v}, dout, {ddq, ddk, ddv});
  return {std::move(h.dq2), std::move(h.dk2), std::move(h.dv2), std::move(h.ddo)};
}

std::vector<std::vector<double>> baseline_values(const BaselineResult& b, Op op) {
  if (op == Op::fwd) return {b.o, b.lse};
  if (op == Op::bwd) return {b.dq, b.dk, b.dv};
  return {b.dq2, b.dk2, b.dv2, b.ddo};
}

std::vector<std::vector<double>> magnitudes_of(const oracle::AttentionMagnitudes& m, Op op) {
  if (op == Op::bwd) return {m.dq, m.dk, m.dv};
  return {m.dq2, m.dk2, m.dv2, m.ddo};
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
double dot_abs(const std::vector<double>& m, const std::vector<double>& x) {
  double s = 0;
  for (std::size_t i = 0; i < m.size(); ++i) s += m[i] * std::fabs(x[i]);
  return s;
}

Tensor like(const Tensor& t, const std::vector<double>& values, Layout layout) {
  Tensor out(t.view().format, t.view().shape, layout);
  out.assign(values);
  return out;
}

std::vector<double> along(const std::vector<double>& x, double t, const std::vector<double>& a) {
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] + t * a[i];
  return out;
}

}  // namespace

template <class T>
bool judge_outputs(CaseReport& r, const Outputs& out, const std::vector<std::vector<T>>& reference,
                   const std::vector<std::vector<double>>& baseline, const std::vector<double>& magnitudes,
                   const std::vector<double>& noise_units) {
  for (std::size_t i = 0; i < out.tensors.size() && r.discarded.empty(); ++i) {  // beyond the format's range: no verdict
    r.discarded = outside_range(out.tensors[i].name, out.tensors[i].range_format(), reference[i]);
  }
  if (r.discarded.empty()) {
    for (std::size_t i = 0; i < out.tensors.size(); ++i) {
      const Output& o = out.tensors[i];
      const double underflow = storage_underflow(r.policy().rounding, format_info(o.range_format()).min_subnormal());
      r.tensors.push_back(verdict(o.name, o.format(), o.values(), baseline[i], reference[i], magnitudes[i], noise_units[i], r.options, underflow));
    }
  }
  for (const TensorVerdict& v : r.tensors) {  // the plain same-format computation overflows: no verdict
    if (!v.baseline_usable && r.discarded.empty()) {
      r.discarded = "the same-format baseline overflows " + std::string(name(v.format)) + " in " + v.tensor +
                    " (the case is beyond the format's working range)";
    }
  }
  if (r.discarded.empty()) return true;
  r.pass = true;  // no verdict either way; runs count it as discarded, not passed
  return false;
}

template bool judge_outputs<double>(CaseReport&, const Outputs&, const std::vector<std::vector<double>>&,
                                    const std::vector<std::vector<double>>&, const std::vector<double>&, const std::vector<double>&);
template bool judge_outputs<oracle::quad>(CaseReport&, const Outputs&, const std::vector<std::vector<oracle::quad>>&,
                                          const std::vector<std::vector<double>>&, const std::vector<double>&,
                                          const std::vector<double>&);

void CaseReport::conclude() {
  pass = error.empty();
  for (const TensorVerdict& v : tensors) {
    pass = pass && v.pass;
    worst_ratio = std::max(worst_ratio, v.ratio);
    worst_ulp = std::max(worst_ulp, v.subject.max_ulp);
    weak_tensors += v.discriminating ? 0 : 1;
  }
  for (const PropertyCheck& p : properties) pass = pass && p.pass;
}

std::string CaseReport::case_text() const { return family == kernels::Family::attention ? c.to_string() : attnres.to_string(); }

std::string CaseReport::summary() const {
  std::ostringstream s;
  if (!error.empty()) s << "  subject error: " << error << "\n";
  if (!discarded.empty()) s << "  discarded: " << discarded << "\n";
  for (const TensorVerdict& v : tensors) {
    if (v.pass) continue;
    s << "  " << v.tensor << " (" << name(v.format) << "): max error " << shortest(v.subject.max_abs) << " > rho "
      << shortest(options.rho) << " x baseline " << shortest(v.baseline.max_abs) << " + floor " << shortest(v.floor)
      << " (ratio " << shortest(v.ratio) << ", max ULP " << shortest(v.subject.max_ulp) << ", non-finite mismatches "
      << v.subject.nonfinite_mismatch << ")\n";
  }
  for (const PropertyCheck& p : properties) {
    if (!p.pass) s << "  " << p.name << ": " << p.detail << "\n";
  }
  return s.str();
}

CaseReport check_case(kernels::Subject& subject, const Case& c, Op op, const VerdictOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  CaseReport r;
  r.c = c;
  r.op = op;
  r.oracle_type = oracle::oracle_type_for(c.policy);
  r.options = options;
  const auto finish = [&] {
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  };
  const kernels::SubjectInfo& info = subject.info();
  const oracle::AttentionProblem problem = to_problem(c);
  const CaseInputs in = make_inputs(c);
  Caller call(subject, c);

  // The op under test, on the case's inputs.
  Outputs fwd, out;
  try {
    fwd = call.fwd(in.q, in.k, in.v);
    out = op == Op::fwd ? fwd
          : op == Op::bwd ? call.bwd(in.q, in.k, in.v, fwd, in.dout)
                          : call.bwdbwd(in.q, in.k, in.v, fwd, in.dout, in.ddq, in.ddk, in.ddv);
  } catch (const std::exception& e) {
    r.error = e.what();
    return finish();
  }

  // Against the oracle and the baseline. Each tensor's floor scales with the largest magnitude of the
  // terms its entries are summed from (for L: 1 + the largest logit magnitude + |L|).
  const auto q = in.q.values(), k = in.k.values(), v = in.v.values(), dout = in.dout.values();
  const auto ddq = in.ddq.values(), ddk = in.ddk.values(), ddv = in.ddv.values();
  const oracle::AttentionMagnitudes mag = oracle::attention_magnitudes(problem, {q, k, v}, dout, {ddq, ddk, ddv});
  const BaselineResult base = baseline(c, in, op);
  const auto base_values = baseline_values(base, op);
  std::vector<double> scales;
  if (op == Op::fwd) {
    // L: an absolute error of L is a relative error of every P = exp(S - L), so its scale is at least 1
    scales = {largest_finite(mag.o), 1 + mag.logit_max + largest_finite(base.lse)};
  } else {
    for (const auto& m : magnitudes_of(mag, op)) scales.push_back(largest_finite(m));
  }
  const auto& sh = c.shape;
  const double chain = sh.head_dim + sh.head_dim_v + sh.seq_k + static_cast<double>(sh.heads_q / sh.heads_kv) * sh.seq_q;
  // u_t + u_acc (sqrt(L) + A): one rounding of a reused intermediate to the storage format, plus
  // summation-order noise, plus logits rounded at another point or a softmax re-derived from a rounded
  // log-sum-exp, P = exp(S - L): S and L each carry a relative rounding, |S| + |L| <= 2 max|S| + ln Nk,
  // so A = 2 (1 + the largest logit magnitude) + ln Nk (see checks.hpp).
  const double logit_noise = 2 * (1 + mag.logit_max) + std::log(std::max(1.0, static_cast<double>(sh.seq_k)));
  const double noise_unit = storage_noise(c.policy.rounding, unit_roundoff(c.policy.format(Role::q))) +
                            unit_roundoff(c.policy.accumulate) * (std::sqrt(chain) + logit_noise);
  const std::vector<double> noise_units(out.tensors.size(), noise_unit);
  const bool judged = r.oracle_type == oracle::OracleType::fp64
                          ? judge_outputs(r, out, oracle_values<double>(problem, in, op), base_values, scales, noise_units)
                          : judge_outputs(r, out, oracle_values<oracle::quad>(problem, in, op), base_values, scales, noise_units);
  if (!judged) return finish();
  if (options.oracle_only) {
    r.conclude();
    return finish();
  }

  // Oracle-free properties. Each re-runs the subject; a subject error in any of them is a failure.
  try {
    if (info.deterministic) {
      const Outputs again = op == Op::fwd ? call.fwd(in.q, in.k, in.v)
                            : op == Op::bwd ? call.bwd(in.q, in.k, in.v, fwd, in.dout)
                                            : call.bwdbwd(in.q, in.k, in.v, fwd, in.dout, in.ddq, in.ddk, in.ddv);
      r.properties.push_back(determinism(out, again));
    }
    if (op != Op::fwd) {
      const auto scaled = [&](const Tensor& t, double factor) {
        std::vector<double> x = t.values();
        for (double& e : x) e *= factor;
        return like(t, x, c.layout);
      };
      // The op as a function of its cotangent (dO for bwd; ddQ, ddK, ddV for bwdbwd).
      const auto with_cotangent = [&](const Tensor* a, const Tensor* b, const Tensor* cc) {
        return op == Op::bwd ? call.bwd(in.q, in.k, in.v, fwd, *a) : call.bwdbwd(in.q, in.k, in.v, fwd, in.dout, *a, *b, *cc);
      };
      {  // zero
        const Tensor z1 = scaled(op == Op::bwd ? in.dout : in.ddq, 0.0), z2 = scaled(in.ddk, 0.0), z3 = scaled(in.ddv, 0.0);
        r.properties.push_back(zero(with_cotangent(&z1, &z2, &z3)));
      }
      const double max_finite = format_info(c.policy.format(Role::dout)).max_finite();
      double cot_max = 0;
      for (const Tensor* t : op == Op::bwd ? std::vector<const Tensor*>{&in.dout} : std::vector<const Tensor*>{&in.ddq, &in.ddk, &in.ddv}) {
        for (double x : t->values()) cot_max = std::max(cot_max, std::fabs(x));
      }
      const double n_len = c.shape.head_dim + c.shape.head_dim_v + c.shape.seq_q + c.shape.seq_k + 8;
      const double amp = 1 + mag.logit_max;
      const double u_t = unit_roundoff(c.policy.format(Role::q));
      // additivity's rounding bound (per unit of the summed magnitudes) and its gradual-underflow term.
      // The magnitudes are the exact terms'; a subject (and the baseline) that rounds the logits to t
      // moves each softmax weight by up to a factor e^(2 u_t A), and the terms with it, so the bound
      // carries that factor: 1.08 for A = 10 in bf16, but e^40 where sigma-100 inputs give logits of 5e3
      // (seen: torch.math in bf16, whose rounded logits put weight on keys with exact weight 1e-20).
      const double linear_bound = (op == Op::bwd ? 8 : 16) * n_len * amp * u_t * weight_perturbation(u_t, amp);
      const double linear_underflow = 8 * n_len * std::max(format_info(c.policy.format(Role::grad)).min_subnormal(),
                                                            format_info(c.policy.accumulate).min_subnormal());
      // one rounding of an output, relative: u of the gradients' format under RN, 2u under SR
      const double output_rounding = (c.policy.rounding == Rounding::stochastic ? 2 : 1) * unit_roundoff(c.policy.format(Role::grad));
      if (2 * cot_max <= max_finite) {  // homogeneity
        const Tensor t1 = scaled(op == Op::bwd ? in.dout : in.ddq, 2.0), t2 = scaled(in.ddk, 2.0), t3 = scaled(in.ddv, 2.0);
        const Outputs twice = with_cotangent(&t1, &t2, &t3);
        if (info.deterministic) {
          double input_max = 0;
          for (const auto* x : {&q, &k, &v, &dout, &ddq, &ddk, &ddv}) {
            for (double e : *x) input_max = std::max(input_max, std::fabs(e));
          }
          const FormatInfo t = format_info(c.policy.format(Role::q));
          const double underflow = 2 * chain * t.unit_roundoff() * t.min_normal() * 2 * input_max;
          r.properties.push_back(homogeneity(out, twice, underflow));
        } else {
          // A subject that sums in a run-dependent order (atomics) doubles exactly only up to that
          // order's rounding, which differs between the two calls: hold g(2a) = g(a) + g(a) to
          // additivity's rounding bound instead (b = a, magnitudes m, m, 2m).
          const auto m = magnitudes_of(mag, op);
          auto m2 = m;
          for (auto& t : m2) {
            for (double& e : t) e *= 2;
          }
          PropertyCheck h = additivity(out, out, twice, m, m, m2, linear_bound, linear_underflow, output_rounding);
          h.name = "homogeneity";
          h.detail = "(run-order rounding allowed: the subject is nondeterministic) " + h.detail;
          r.properties.push_back(h);
        }
      } else {
        r.properties.push_back({"homogeneity", true, true, "twice the cotangent would overflow"});
      }
      if (auto skipped = additivity_undetermined(u_t, amp, std::string(name(c.policy.format(Role::q))))) {
        r.properties.push_back(*skipped);
      } else {  // additivity: a = the case's cotangent, b an independent one, c = round(a + b)
        const std::uint64_t seed = c.seed;
        const auto add = [&](const Tensor& a, std::uint32_t stream) {
          const auto x = a.values();
          const auto b = standard_normal(seed, stream, x.size());
          std::vector<double> sum(x.size());
          for (std::size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + b[i];
          return std::pair{like(a, b, c.layout), like(a, sum, c.layout)};
        };
        const double bound = linear_bound, underflow = linear_underflow, rounding = output_rounding;
        if (op == Op::bwd) {
          const auto [b, sum] = add(in.dout, 263);
          const auto m_a = magnitudes_of(mag, op);
          const auto m_b = magnitudes_of(oracle::attention_magnitudes(problem, {q, k, v}, b.values(), {ddq, ddk, ddv}), op);
          const auto m_c = magnitudes_of(oracle::attention_magnitudes(problem, {q, k, v}, sum.values(), {ddq, ddk, ddv}), op);
          r.properties.push_back(additivity(out, with_cotangent(&b, nullptr, nullptr), with_cotangent(&sum, nullptr, nullptr), m_a, m_b, m_c, bound, underflow,
                                            rounding));
        } else {
          const auto [bq, sq] = add(in.ddq, 264);
          const auto [bk, sk] = add(in.ddk, 265);
          const auto [bv, sv] = add(in.ddv, 266);
          const auto m_a = magnitudes_of(mag, op);
          const auto m_b = magnitudes_of(oracle::attention_magnitudes(problem, {q, k, v}, dout, {bq.values(), bk.values(), bv.values()}), op);
          const auto m_c = magnitudes_of(oracle::attention_magnitudes(problem, {q, k, v}, dout, {sq.values(), sk.values(), sv.values()}), op);
          r.properties.push_back(additivity(out, with_cotangent(&bq, &bk, &bv), with_cotangent(&sq, &sk, &sv), m_a, m_b, m_c, bound, underflow,
                                            rounding));
        }
      }
      const Format storage = c.policy.format(Role::q);
      if (storage == Format::fp32 || storage == Format::fp64) {  // self-fd
        // phi(x) = <cotangent, F(x)> for F the op's own primal (fwd for bwd, bwd for bwdbwd), along a
        // direction a; central difference phi(x + t a) - phi(x - t a) against <g(x), x+ - x-> with
        // x+- the realised (rounded) points. Errors, per unit t: truncation t^2 rate^2 M1 / 6,
        // evaluation C_f u M_phi / t, the gradient's own C_g u M1; t balances the first two.
        const double u = unit_roundoff(storage);
        const double c_f = (op == Op::bwd ? 4 : 8) * n_len * amp, c_g = (op == Op::bwd ? 8 : 16) * n_len * amp;
        const auto aq = standard_normal(c.seed, 270, q.size()), ak = standard_normal(c.seed, 271, k.size());
        const auto av = standard_normal(c.seed, 272, v.size()), ado = standard_normal(c.seed, 273, dout.size());
        const double rate = 1 + oracle::attention_logit_rate(problem, q, k, aq, ak);
        double m1, m_phi;
        if (op == Op::bwd) {
          m1 = dot_abs(mag.dq, aq) + dot_abs(mag.dk, ak) + dot_abs(mag.dv, av);
          std::vector<double> abs_dout(dout.size());
          for (std::size_t i = 0; i < dout.size(); ++i) abs_dout[i] = std::fabs(dout[i]);
          m_phi = dot(abs_dout, mag.o);
        } else {
          m1 = dot_abs(mag.dq2, aq) + dot_abs(mag.dk2, ak) + dot_abs(mag.dv2, av) + dot_abs(mag.ddo, ado);
          m_phi = dot_abs(mag.dq, ddq) + dot_abs(mag.dk, ddk) + dot_abs(mag.dv, ddv);
        }
        if (m1 > 0) {
          const double t = std::cbrt(3 * c_f * u * m_phi / (rate * rate * m1));
          const auto phi = [&](double sign) {
            const Tensor qs = like(in.q, along(q, sign * t, aq), c.layout), ks = like(in.k, along(k, sign * t, ak), c.layout),
                         vs = like(in.v, along(v, sign * t, av), c.layout);
            const Outputs f = call.fwd(qs, ks, vs);
            if (op == Op::bwd) return std::pair{dot(dout, f.at("O").values()), std::vector<Tensor>{qs, ks, vs}};
            const Tensor dos = like(in.dout, along(dout, sign * t, ado), c.layout);
            const Outputs g = call.bwd(qs, ks, vs, f, dos);
            return std::pair{dot(ddq, g.at("dQ").values()) + dot(ddk, g.at("dK").values()) + dot(ddv, g.at("dV").values()),
                             std::vector<Tensor>{qs, ks, vs, dos}};
          };
          const auto [plus, xp] = phi(1.0);
          const auto [minus, xm] = phi(-1.0);
          double analytic = 0;
          for (std::size_t i = 0; i < xp.size(); ++i) {
            const auto p1 = xp[i].values(), m1v = xm[i].values(), g = out.tensors[i].values();
            for (std::size_t j = 0; j < g.size(); ++j) analytic += g[j] * (p1[j] - m1v[j]);
          }
          const double per_t = std::fabs((plus - minus) - analytic) / (2 * t);
          const double tolerance = 4 * (t * t * rate * rate * m1 / 6 + c_f * u * m_phi / t + c_g * u * m1);
          r.properties.push_back({"self-fd", per_t <= tolerance, false,
                                  "|central difference - <g, dx>| / 2t = " + shortest(per_t / m1) + " of the derivative's magnitude, tolerance " +
                                      shortest(tolerance / m1) + " (step " + shortest(t) + ")"});
        }
      }
    }
  } catch (const std::exception& e) {
    r.error = std::string("during the property checks: ") + e.what();
  }

  r.conclude();
  return finish();
}

}  // namespace fc::gradcheck
