#include "kernels/cpu/attnres.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/storage_rounding.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/tensor_io.hpp"

namespace fc::kernels::cpu {
namespace {

constexpr int kTokensPerTask = 64;  // tokens per task, and per dw partial sum

template <class A>
std::vector<A> read_rows(const TensorView& t, const TensorView& scale) {
  if constexpr (std::is_same_v<A, double>) {
    return read_rows_as_double(t, scale);
  } else {
    return read_rows_as_float(t, scale);
  }
}

// The problem read once into contiguous arrays of the accumulation type A.
template <class A>
struct Problem {
  const AttnResCall& c;
  int N, BT, D, S;
  A eps;
  std::vector<A> v, u, w;  // values [N, BT, D], partial [S, BT, D], queries [S, D]

  explicit Problem(const AttnResCall& call) : c(call) {
    const AttnResShape& s = call.shape;
    N = s.sources, BT = s.batch * s.tokens, D = s.dim, S = s.layers;
    eps = static_cast<A>(s.eps);
    v = read_rows<A>(call.values, {}), u = read_rows<A>(call.partial, {}), w = read_rows<A>(call.queries, {});
  }
  std::size_t row(int outer, int token) const { return (static_cast<std::size_t>(outer) * BT + token) * D; }
  const A* source(int i, int token) const { return &v[row(i, token)]; }
  const A* partial(int s, int token) const { return &u[row(s, token)]; }
  const A* query(int s) const { return &w[static_cast<std::size_t>(s) * D]; }
  std::size_t tasks() const { return static_cast<std::size_t>((BT + kTokensPerTask - 1) / kTokensPerTask); }
  int token_begin(std::size_t task) const { return static_cast<int>(task) * kTokensPerTask; }
  int token_end(std::size_t task) const { return std::min(BT, token_begin(task) + kTokensPerTask); }
};

template <class A>
A dot(const A* a, const A* b, int n) {
  A s = 0;
  for (int c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

template <class A>
A rms_inverse(const A* x, int D, A eps) {
  return A(1) / std::sqrt(dot(x, x, D) / static_cast<A>(D) + eps);
}

template <class A>
A sigmoid_of_difference(A s, A lse) {  // sigmoid(s - lse) = 1 / (1 + exp(lse - s)): 0 or 1 at the extremes, never NaN
  return A(1) / (A(1) + std::exp(lse - s));
}

template <class A>
void forward(const AttnResCall& call) {
  const Problem<A> p(call);
  const std::size_t rows = static_cast<std::size_t>(p.S) * p.BT;
  std::vector<A> o(rows * p.D), lse(rows);
  parallel_for(p.tasks(), [&](std::size_t task) {
    std::vector<A> r(p.N), logit(p.N), acc(p.D);
    for (int t = p.token_begin(task); t < p.token_end(task); ++t) {
      for (int i = 0; i < p.N; ++i) r[i] = rms_inverse(p.source(i, t), p.D, p.eps);
      for (int s = 0; s < p.S; ++s) {
        A m = -std::numeric_limits<A>::infinity();
        for (int i = 0; i < p.N; ++i) logit[i] = r[i] * dot(p.query(s), p.source(i, t), p.D), m = std::max(m, logit[i]);
        std::fill(acc.begin(), acc.end(), A(0));
        A l = 0;
        for (int i = 0; i < p.N; ++i) {
          const A pi = std::exp(logit[i] - m);
          l += pi;
          const A* vi = p.source(i, t);
          for (int c = 0; c < p.D; ++c) acc[c] += pi * vi[c];
        }
        A* out = &o[p.row(s, t)];
        for (int c = 0; c < p.D; ++c) out[c] = acc[c] / l;
        lse[static_cast<std::size_t>(s) * p.BT + t] = m + std::log(l);
      }
    }
  });
  const PrecisionPolicy& pol = call.policy;
  write_rows_from(call.out_o, call.out_o_scale, std::span<const A>(o), pol.rounding, pol.stream(Role::o));
  write_from(call.out_lse, std::span<const A>(lse), pol.rounding, pol.stream(Role::stats));

  // Phase 2, as its own kernel would: from the stored o and lse.
  const std::vector<A> o_stored = read_rows<A>(call.out_o, call.out_o_scale), lse_stored = read_rows<A>(call.out_lse, {});
  std::vector<A> h(rows * p.D);
  parallel_for(p.tasks(), [&](std::size_t task) {
    for (int s = 0; s < p.S; ++s) {
      for (int t = p.token_begin(task); t < p.token_end(task); ++t) {
        const A* ut = p.partial(s, t);
        const A beta = sigmoid_of_difference(rms_inverse(ut, p.D, p.eps) * dot(p.query(s), ut, p.D), lse_stored[static_cast<std::size_t>(s) * p.BT + t]);
        const A* ot = &o_stored[p.row(s, t)];
        A* ht = &h[p.row(s, t)];
        for (int c = 0; c < p.D; ++c) ht[c] = ot[c] + beta * (ut[c] - ot[c]);
      }
    }
  });
  write_rows_from(call.out_h, call.out_h_scale, std::span<const A>(h), pol.rounding, attnres_h_stream(pol));
}

template <class A>
void backward(const AttnResCall& call) {
  const Problem<A> p(call);
  const PrecisionPolicy& pol = call.policy;
  const std::size_t rows = static_cast<std::size_t>(p.S) * p.BT;
  const std::vector<A> o = read_rows<A>(call.o, call.o_scale), lse = read_rows<A>(call.lse, {}), dh = read_rows<A>(call.dh, {});
  std::vector<A> d_o(rows * p.D), dlse(rows), du(rows * p.D);
  std::vector<A> dw_partial(p.tasks() * p.S * p.D, A(0));  // [task, S, D]

  // Phase 2 backward (per layer: s outer, as the per-layer kernel runs).
  parallel_for(p.tasks(), [&](std::size_t task) {
    for (int s = 0; s < p.S; ++s) {
      const A* ws = p.query(s);
      A* dw = &dw_partial[(task * p.S + s) * p.D];
      for (int t = p.token_begin(task); t < p.token_end(task); ++t) {
        const std::size_t r = static_cast<std::size_t>(s) * p.BT + t;
        const A* ut = p.partial(s, t);
        const A* ot = &o[p.row(s, t)];
        const A* g = &dh[p.row(s, t)];
        const A ru = rms_inverse(ut, p.D, p.eps), su = ru * dot(ws, ut, p.D);
        // 1 - beta as a sigmoid of its own, not by subtraction: when beta rounds to 1 (s_u >> lse), 1 - beta
        // would lose every digit (seen: d_values of a one-source case wrong by 100% of its value in fp32)
        const A beta = sigmoid_of_difference(su, lse[r]), one_minus_beta = sigmoid_of_difference(lse[r], su);
        A delta = 0;
        for (int c = 0; c < p.D; ++c) delta += g[c] * (ot[c] - ut[c]);
        const A dl = beta * one_minus_beta * delta, dsu = -dl;
        dlse[r] = dl;
        const A coef = su * ru * ru / static_cast<A>(p.D);
        A* dut = &du[p.row(s, t)];
        A* dot_ = &d_o[p.row(s, t)];
        for (int c = 0; c < p.D; ++c) {
          dot_[c] = one_minus_beta * g[c];
          dut[c] = beta * g[c] + dsu * (ru * ws[c] - coef * ut[c]);
          dw[c] += dsu * ru * ut[c];
        }
      }
    }
  });
  // do crosses from the phase-2 to the phase-1 backward kernel through memory, in the gradient format.
  round_to_storage(d_o.data(), d_o.size(), pol.format(Role::grad), pol.rounding, attnres_d_o_stream(pol));

  // Phase 1 backward (per token: all layers' contributions to dv_i summed in layer order).
  std::vector<A> dv(static_cast<std::size_t>(p.N) * p.BT * p.D);
  parallel_for(p.tasks(), [&](std::size_t task) {
    std::vector<A> r(p.N), logit(p.N), prob(p.N), a(p.N);
    for (int t = p.token_begin(task); t < p.token_end(task); ++t) {
      for (int i = 0; i < p.N; ++i) {
        r[i] = rms_inverse(p.source(i, t), p.D, p.eps);
        std::fill_n(&dv[p.row(i, t)], p.D, A(0));
      }
      for (int s = 0; s < p.S; ++s) {
        const std::size_t rs = static_cast<std::size_t>(s) * p.BT + t;
        const A* ws = p.query(s);
        const A* g = &d_o[p.row(s, t)];
        A abar = 0;
        for (int i = 0; i < p.N; ++i) {
          logit[i] = r[i] * dot(ws, p.source(i, t), p.D);
          prob[i] = std::exp(logit[i] - lse[rs]);
          a[i] = dot(g, p.source(i, t), p.D);
          abar += prob[i] * a[i];
        }
        A* dw = &dw_partial[(task * p.S + s) * p.D];
        for (int i = 0; i < p.N; ++i) {
          const A dsi = prob[i] * (a[i] - abar + dlse[rs]);
          const A coef = logit[i] * r[i] * r[i] / static_cast<A>(p.D);
          const A* vi = p.source(i, t);
          A* dvi = &dv[p.row(i, t)];
          for (int c = 0; c < p.D; ++c) {
            dvi[c] += prob[i] * g[c] + dsi * (r[i] * ws[c] - coef * vi[c]);
            dw[c] += dsi * r[i] * vi[c];
          }
        }
      }
    }
  });
  std::vector<A> dw(static_cast<std::size_t>(p.S) * p.D, A(0));
  for (std::size_t task = 0; task < p.tasks(); ++task) {  // chunk order: deterministic
    for (std::size_t j = 0; j < dw.size(); ++j) dw[j] += dw_partial[task * dw.size() + j];
  }
  write_from(call.d_values, std::span<const A>(dv), pol.rounding, pol.stream(Role::grad));
  write_from(call.d_partial, std::span<const A>(du), pol.rounding, attnres_d_partial_stream(pol));
  write_from(call.d_queries, std::span<const A>(dw), pol.rounding, attnres_d_queries_stream(pol));
}

class CpuAttnRes final : public Subject {
 public:
  CpuAttnRes() {
    info_.name = "cpu.attnres";
    info_.description =
        "Attention Residuals, phase 1 (softmax over N sources, RMS-normalised keys) and phase 2 (merge of the partial sum), "
        "fwd and bwd; o and h stored per policy (fp16 with per-row scales), RN or SR; dw without atomics";
    info_.family = Family::attnres;
    info_.ops = {Op::fwd, Op::bwd};
    info_.formats = {Format::bf16, Format::fp16, Format::fp32, Format::fp64};
    info_.max_head_dim = 8192;
    info_.masks = {Mask::none};
    info_.gqa = false;
    info_.stochastic_rounding = true;
    info_.deterministic = true;
  }
  const SubjectInfo& info() const override { return info_; }

  void run_attnres(Op op, const AttnResCall& call) override {
    validate_attnres_call(info_, op, call);
    const std::string& who = info_.name;
    require_finite(call.values, who, "values");
    require_finite(call.partial, who, "partial");
    require_finite(call.queries, who, "queries");
    if (op == Op::bwd) {
      require_finite(call.o, who, "o");
      require_finite(call.lse, who, "lse");
      require_finite(call.dh, who, "dh");
    }
    const bool wide = call.policy.accumulate == Format::fp64;
    if (op == Op::fwd) {
      wide ? forward<double>(call) : forward<float>(call);
    } else {
      wide ? backward<double>(call) : backward<float>(call);
    }
  }

 private:
  SubjectInfo info_;
};

}  // namespace

std::unique_ptr<Subject> make_cpu_attnres() { return std::make_unique<CpuAttnRes>(); }

}  // namespace fc::kernels::cpu
