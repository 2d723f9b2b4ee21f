#include "gradcheck/attnres_checks.hpp"

#include <chrono>
#include <cmath>

#include "gradcheck/attnres_baseline.hpp"
#include "gradcheck/inputs.hpp"
#include "oracle/attnres.hpp"
#include "oracle/ladder.hpp"

namespace fc::gradcheck {
namespace {

using kernels::Op;

oracle::AttnResShape to_oracle(const kernels::AttnResShape& s) { return {s.sources, s.batch, s.tokens, s.dim, s.layers, s.eps}; }

// Calls the subject, allocating outputs in the policy's formats (o and h with row scales in fp16).
class Caller {
 public:
  Caller(kernels::Subject& s, const AttnResCase& c) : subject_(s), c_(c) {}

  Outputs fwd(const AttnResInputs& in) {
    kernels::AttnResCall call = base(in);
    const PrecisionPolicy& p = c_.policy;
    const auto& s = c_.shape;
    Outputs out;
    out.add("o", Tensor(p.format(Role::o), attnres_rows_shape(s), Layout::bhnd), row_scales());
    out.add("lse", Tensor(p.format(Role::stats), attnres_stats_shape(s), Layout::bhnd));
    out.add("h", Tensor(p.format(Role::o), attnres_rows_shape(s), Layout::bhnd), row_scales());
    out.poison();
    call.out_o = out.at("o").tensor.view(), call.out_o_scale = out.at("o").scale.view();
    call.out_lse = out.at("lse").tensor.view();
    call.out_h = out.at("h").tensor.view(), call.out_h_scale = out.at("h").scale.view();
    subject_.run_attnres(Op::fwd, call);
    return out;
  }

  Outputs bwd(const AttnResInputs& in, const Outputs& f, const Tensor& dh) {
    kernels::AttnResCall call = base(in);
    const PrecisionPolicy& p = c_.policy;
    const auto& s = c_.shape;
    call.o = f.at("o").tensor.view(), call.o_scale = f.at("o").scale.view(), call.lse = f.at("lse").tensor.view();
    call.dh = dh.view();
    Outputs out;
    out.add("d_values", Tensor(p.format(Role::grad), attnres_values_shape(s), Layout::bhnd));
    out.add("d_partial", Tensor(p.format(Role::grad), attnres_rows_shape(s), Layout::bhnd));
    out.add("d_queries", Tensor(p.format(Role::grad), attnres_queries_shape(s), Layout::bhnd));
    out.poison();
    call.d_values = out.at("d_values").tensor.view(), call.d_partial = out.at("d_partial").tensor.view();
    call.d_queries = out.at("d_queries").tensor.view();
    subject_.run_attnres(Op::bwd, call);
    return out;
  }

 private:
  kernels::AttnResCall base(const AttnResInputs& in) const {
    kernels::AttnResCall call;
    call.shape = c_.shape, call.policy = c_.policy;
    call.values = in.values.view(), call.partial = in.partial.view(), call.queries = in.queries.view();
    return call;
  }
  Tensor row_scales() const {
    return kernels::attnres_scaled_outputs(c_.policy) ? Tensor(Format::fp32, attnres_stats_shape(c_.shape), Layout::bhnd) : Tensor();
  }
  kernels::Subject& subject_;
  const AttnResCase& c_;
};

template <class T>
std::vector<std::vector<T>> oracle_values(const AttnResCase& c, const AttnResInputs& in, const Tensor& dh, Op op) {
  const auto as = [](const Tensor& t) {
    const std::vector<double> x = t.values();
    return std::vector<T>(x.begin(), x.end());
  };
  const oracle::AttnResShape s = to_oracle(c.shape);
  const std::vector<T> v = as(in.values), u = as(in.partial), w = as(in.queries);
  if (op == Op::fwd) {
    auto p1 = oracle::attnres_phase1_forward<T>(s, v, w);
    auto h = oracle::attnres_forward<T>(s, v, u, w);
    return {std::move(p1.o), std::move(p1.lse), std::move(h)};
  }
  auto g = oracle::attnres_backward<T>(s, v, u, w, as(dh));
  return {std::move(g.d_values), std::move(g.d_partial), std::move(g.d_queries)};
}

std::vector<std::vector<double>> gradient_magnitudes(const oracle::AttnResMagnitudes& m) { return {m.d_values, m.d_partial, m.d_queries}; }

Tensor scaled_copy(const Tensor& t, double factor) {
  std::vector<double> x = t.values();
  for (double& e : x) e *= factor;
  Tensor out(t.view().format, t.view().shape, Layout::bhnd);
  out.assign(x);
  return out;
}

}  // namespace

CaseReport check_attnres_case(kernels::Subject& subject, const AttnResCase& c, Op op, const VerdictOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  CaseReport r;
  r.family = kernels::Family::attnres;
  r.attnres = c;
  r.op = op;
  r.oracle_type = oracle::oracle_type_for(c.policy);
  r.options = options;
  const auto finish = [&] {
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  };
  const AttnResInputs in = make_attnres_inputs(c);
  Caller call(subject, c);
  Outputs fwd, out;
  try {
    fwd = call.fwd(in);
    out = op == Op::fwd ? fwd : call.bwd(in, fwd, in.dh);
  } catch (const std::exception& e) {
    r.error = e.what();
    return finish();
  }

  const auto v = in.values.values(), u = in.partial.values(), w = in.queries.values(), dh = in.dh.values();
  const oracle::AttnResShape os = to_oracle(c.shape);
  const oracle::AttnResMagnitudes mag = oracle::attnres_magnitudes(os, v, u, w, dh);
  const AttnResBaselineResult base = attnres_baseline(c, in, op);
  const auto& s = c.shape;
  const double chain = 2.0 * s.dim + s.sources + s.layers;
  const double tokens = static_cast<double>(s.batch) * s.tokens;
  std::vector<double> scales, chains;
  std::vector<std::vector<double>> base_values;
  if (op == Op::fwd) {
    scales = {largest_finite(v), 1 + mag.logit_max + largest_finite(base.lse), largest_finite(mag.h)};
    chains = {chain, chain, chain};
    base_values = {base.o, base.lse, base.h};
  } else {
    for (const auto& m : gradient_magnitudes(mag)) scales.push_back(largest_finite(m));
    chains = {chain, chain, chain + tokens};
    base_values = {base.d_values, base.d_partial, base.d_queries};
  }
  const PrecisionPolicy& p = c.policy;
  const double u_t = std::max({unit_roundoff(p.format(Role::v)), unit_roundoff(p.format(Role::o)), unit_roundoff(p.format(Role::grad))});
  const double logit_noise = 2 * (1 + mag.logit_max) + std::log(s.sources + 1.0);
  std::vector<double> noise_units;
  for (double chain_length : chains) {
    noise_units.push_back(storage_noise(p.rounding, u_t) + unit_roundoff(p.accumulate) * (std::sqrt(chain_length) + logit_noise));
  }
  const bool judged = r.oracle_type == oracle::OracleType::fp64
                          ? judge_outputs(r, out, oracle_values<double>(c, in, in.dh, op), base_values, scales, noise_units)
                          : judge_outputs(r, out, oracle_values<oracle::quad>(c, in, in.dh, op), base_values, scales, noise_units);
  if (!judged) return finish();
  if (options.oracle_only) {
    r.conclude();
    return finish();
  }

  try {
    if (subject.info().deterministic) {
      const Outputs again = op == Op::fwd ? call.fwd(in) : call.bwd(in, fwd, in.dh);
      r.properties.push_back(determinism(out, again));
    }
    if (op == Op::bwd) {
      r.properties.push_back(zero(call.bwd(in, fwd, scaled_copy(in.dh, 0.0))));
      const double dh_max = largest_finite(dh);
      if (2 * dh_max <= format_info(p.format(Role::dout)).max_finite()) {
        const FormatInfo t = format_info(p.format(Role::v));
        double input_max = dh_max;
        for (const auto* x : {&v, &u, &w}) input_max = std::max(input_max, largest_finite(*x));
        const double underflow = 2 * (chain + tokens) * t.unit_roundoff() * t.min_normal() * 2 * input_max;
        r.properties.push_back(homogeneity(out, call.bwd(in, fwd, scaled_copy(in.dh, 2.0)), underflow));
      } else {
        r.properties.push_back({"homogeneity", true, true, "twice the cotangent would overflow"});
      }
      const double n_len = chain + tokens + 8, amp = 1 + mag.logit_max;
      if (auto skipped = additivity_undetermined(u_t, amp, "the storage formats")) {
        r.properties.push_back(*skipped);
      } else {
        // additivity: a = the case's dh, b an independent one, c = round(a + b)
        const std::vector<double> b = standard_normal(c.seed, 284, dh.size());
        std::vector<double> sum(dh.size());
        for (std::size_t i = 0; i < dh.size(); ++i) sum[i] = dh[i] + b[i];
        Tensor tb(in.dh.view().format, in.dh.view().shape, Layout::bhnd), tc(in.dh.view().format, in.dh.view().shape, Layout::bhnd);
        tb.assign(b), tc.assign(sum);
        const double bound = 8 * n_len * amp * u_t * weight_perturbation(u_t, amp);  // (checks.cpp)
        const double underflow = 8 * n_len * std::max(format_info(p.format(Role::grad)).min_subnormal(), format_info(p.accumulate).min_subnormal());
        const auto m_b = gradient_magnitudes(oracle::attnres_magnitudes(os, v, u, w, tb.values()));
        const auto m_c = gradient_magnitudes(oracle::attnres_magnitudes(os, v, u, w, tc.values()));
        const double output_rounding = (p.rounding == Rounding::stochastic ? 2 : 1) * unit_roundoff(p.format(Role::grad));
        r.properties.push_back(
            additivity(out, call.bwd(in, fwd, tb), call.bwd(in, fwd, tc), gradient_magnitudes(mag), m_b, m_c, bound, underflow, output_rounding));
      }
    }
  } catch (const std::exception& e) {
    r.error = std::string("during the property checks: ") + e.what();
  }

  r.conclude();
  return finish();
}

CaseReport check_case_text(kernels::Subject& subject, const std::string& text, Op op, const VerdictOptions& options) {
  if (subject.info().family == kernels::Family::attnres) return check_attnres_case(subject, AttnResCase::parse(text), op, options);
  return check_case(subject, Case::parse(text), op, options);
}

}  // namespace fc::gradcheck
