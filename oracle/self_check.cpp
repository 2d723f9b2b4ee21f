#include "oracle/self_check.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>

#include "oracle/attention.hpp"
#include "oracle/autodiff.hpp"
#include "oracle/finite_difference.hpp"

namespace fc::oracle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The random inputs of one case, in double (each converts exactly to quad and mp50).
struct CaseData {
  std::vector<double> q, k, v, dout;   // the point
  std::vector<double> ddq, ddk, ddv;   // cotangents of the double backward
  std::vector<double> aq, ak, av;      // direction of the first-order checks
  std::vector<double> wq, wk, wv, wdo; // direction of the second-order checks
};

CaseData draw(const AttentionCase& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const auto n = [&](std::size_t size) {
    std::vector<double> x(size);
    for (double& e : x) e = normal(rng);
    return x;
  };
  const AttentionShape& s = c.problem.shape;
  CaseData d;
  d.q = n(s.q_size()), d.k = n(s.k_size()), d.v = n(s.v_size()), d.dout = n(s.o_size());
  d.ddq = n(s.q_size()), d.ddk = n(s.k_size()), d.ddv = n(s.v_size());
  d.aq = n(s.q_size()), d.ak = n(s.k_size()), d.av = n(s.v_size());
  d.wq = n(s.q_size()), d.wk = n(s.k_size()), d.wv = n(s.v_size()), d.wdo = n(s.o_size());
  return d;
}

template <class T>
std::vector<T> as(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

template <class T>
T dot(const std::vector<T>& a, const std::vector<T>& b) {
  T s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double dot_abs(const std::vector<double>& magnitude, const std::vector<double>& direction) {
  double s = 0;
  for (std::size_t i = 0; i < magnitude.size(); ++i) s += magnitude[i] * std::fabs(direction[i]);
  return s;
}

// |a - b| / (u * magnitude); a zero magnitude admits only an exact match.
template <class T>
double scaled(const T& a, const T& b, double u, double magnitude) {
  using std::fabs;
  const double diff = to_double(T(fabs(a - b)));
  if (magnitude == 0) return diff == 0 ? 0 : kInf;
  return diff / (u * magnitude);
}

// max_i |x_i - ref_i| / (u * magnitude_i): elementwise, against the mp50 reference.
template <class T>
double scaled_max(const std::vector<T>& x, const std::vector<mp50>& ref, double u, const std::vector<double>& magnitude) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const mp50 diff = abs(mp50(x[i]) - ref[i]);
    const double d = to_double(diff);
    const double v = magnitude[i] == 0 ? (d == 0 ? 0 : kInf) : d / (u * magnitude[i]);
    worst = std::max(worst, v);
  }
  return worst;
}

// The log-sum-exp rows: |dL| <= C u (1 + logit_max + |L|) (see bound_reason). Fully masked rows
// are -inf in both.
template <class T>
double scaled_lse(const std::vector<T>& x, const std::vector<mp50>& ref, double u, double logit_max) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!is_finite(ref[i])) {
      worst = std::max(worst, (!is_finite(x[i]) && x[i] < 0) ? 0.0 : kInf);
      continue;
    }
    const double d = to_double(mp50(abs(mp50(x[i]) - ref[i])));
    worst = std::max(worst, d / (u * (1 + logit_max + std::fabs(to_double(ref[i])))));
  }
  return worst;
}

struct Bounds {
  double first_order, second_order, forward, lse;
};

// See bound_reason() for the derivation of each.
Bounds bounds_for(const AttentionProblem& p, double logit_max) {
  const AttentionShape& s = p.shape;
  const double lengths = s.head_dim + s.head_dim_v + s.seq_q + s.seq_k + 8;
  const double amplification = 1 + logit_max;
  Bounds b;
  b.forward = 4 * lengths * amplification;
  b.first_order = 8 * lengths * amplification;
  b.second_order = 16 * lengths * amplification;
  b.lse = 4 * (s.head_dim + s.seq_k + 8);
  return b;
}

// The finite difference's error bound in the units of `scaled` (u_mp50 times the magnitude): four
// times the stencil's truncation estimate, plus the rounding of f's own evaluations (each within
// f_factor u of f's magnitude f_magnitude) amplified by the stencil.
double fd_bound(const FiniteDifference& fd, double u, double magnitude, double f_factor, double f_magnitude) {
  if (magnitude == 0) return 0.0;
  const double rounding = finite_difference_rounding(fd, f_factor * u * f_magnitude);
  return (4 * to_double(fd.error_estimate) + rounding) / (u * magnitude);
}

template <class T>
AttentionInputs<T> inputs(const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v) {
  return {q, k, v};
}

// Everything computed in one scalar type T for one case.
template <class T>
struct Results {
  std::vector<T> q, k, v, dout, ddq, ddk, ddv, aq, ak, av, wq, wk, wv, wdo;
  AttentionForward<T> fwd;
  AttentionBackward<T> bwd;
  AttentionDoubleBackward<T> dbwd;
  T first_order_analytic, second_order_analytic;

  Results(const AttentionProblem& p, const CaseData& d)
      : q(as<T>(d.q)), k(as<T>(d.k)), v(as<T>(d.v)), dout(as<T>(d.dout)), ddq(as<T>(d.ddq)), ddk(as<T>(d.ddk)),
        ddv(as<T>(d.ddv)), aq(as<T>(d.aq)), ak(as<T>(d.ak)), av(as<T>(d.av)), wq(as<T>(d.wq)), wk(as<T>(d.wk)),
        wv(as<T>(d.wv)), wdo(as<T>(d.wdo)) {
    const AttentionInputs<T> x = inputs(q, k, v);
    fwd = attention_forward<T>(p, x);
    bwd = attention_backward<T>(p, x, dout);
    dbwd = attention_double_backward<T>(p, x, dout, inputs(ddq, ddk, ddv));
    // <J^T dO, a> and <(dQ', dK', dV', ddO), w> from the analytic formulas
    first_order_analytic = dot(bwd.dq, aq) + dot(bwd.dk, ak) + dot(bwd.dv, av);
    second_order_analytic = dot(dbwd.dq2, wq) + dot(dbwd.dk2, wk) + dot(dbwd.dv2, wv) + dot(dbwd.ddo, wdo);
  }

  // <dO, J a> by forward-mode autodiff.
  T first_order_autodiff(const AttentionProblem& p) const {
    return dot(dout, attention_jvp<T>(p, inputs(q, k, v), inputs(aq, ak, av)).o_dot);
  }
  // The double backward entry by entry: ddO against the JVP along dd (all of it), and dQ', dK', dV'
  // against the HVP H dd at the given coordinates of (Q, K, V); max over entries of
  // |analytic - autodiff| / (u * magnitude).
  double second_order_elementwise(const AttentionProblem& p, const AttentionMagnitudes& mag, double u,
                                  const std::vector<std::size_t>& coordinates) const {
    const auto x = inputs(q, k, v);
    const auto dd = inputs(ddq, ddk, ddv);
    double worst = 0;
    const auto jvp = attention_jvp<T>(p, x, dd);
    for (std::size_t i = 0; i < dbwd.ddo.size(); ++i) worst = std::max(worst, scaled(dbwd.ddo[i], jvp.o_dot[i], u, mag.ddo[i]));
    const auto hvp = attention_hvp<T>(p, x, dout, dd, coordinates);
    const std::size_t nq = q.size(), nk = k.size();
    for (std::size_t c = 0; c < coordinates.size(); ++c) {
      const std::size_t j = coordinates[c];
      const T& analytic = j < nq ? dbwd.dq2[j] : j < nq + nk ? dbwd.dk2[j - nq] : dbwd.dv2[j - nq - nk];
      const double m = j < nq ? mag.dq2[j] : j < nq + nk ? mag.dk2[j - nq] : mag.dv2[j - nq - nk];
      worst = std::max(worst, scaled(analytic, hvp[c], u, m));
    }
    return worst;
  }
  // d/dt <dd, B(x + t w_x, dO + t w_dO)> = <w_dO, J dd> + <dO, D^2 O[dd, w_x]> by autodiff.
  T second_order_autodiff(const AttentionProblem& p) const {
    const auto x = inputs(q, k, v);
    const auto dd = inputs(ddq, ddk, ddv);
    return dot(wdo, attention_jvp<T>(p, x, dd).o_dot) +
           dot(dout, attention_second_directional<T>(p, x, dd, inputs(wq, wk, wv)).o_ab);
  }
};

template <class T>
std::vector<T> along(const std::vector<T>& x, const T& t, const std::vector<T>& direction) {
  std::vector<T> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] + t * direction[i];
  return out;
}

}  // namespace

std::string_view bound_reason(std::string_view check) {
  if (check.find("finite differences") != std::string_view::npos) {
    return "4 x the order-8 stencil's truncation estimate (|f^(9)| h^8/630 + 7 |f| u/h) plus the rounding of f's "
           "evaluations (C u of f's magnitude, C as for forward or backward) times the stencil's 2.08/h: ~u^(8/9) = "
           "2^18.7 u once the direction is rescaled by the fastest logit rate so f's derivatives are of unit scale";
  }
  if (check.starts_with("AttnRes")) {
    if (check.find("backward") != std::string_view::npos) {
      return "8 n A with n = D + N + 8, A = 1 + largest logit magnitude r |w|.|x|: the backward's sums (g . v_i, "
             "sum p_i a_i, dw over tokens) on top of the forward's; factor 2 for the two sides, 2 for second-order terms";
    }
    return "4 n A with n = D + N + 8: the RMS norm and w . v are D-term sums, the softmax N + 1 terms; logit errors "
           "enter the weights scaled by A; factor 4 for second-order terms and the other side";
  }
  // n = d + dv + Nq + Nk + 8 (the longest chains of sums), A = 1 + max |s| sum_c |q k| (the exp of a
  // logit turns its absolute error into a relative error of P of the same size).
  if (check.starts_with("forward")) {
    return "4 n A: O = P V sums Nk terms after the d-term logits and the Nk-term normaliser, each adding ~len u; "
           "logit errors enter P scaled by A; factor 4 for the second-order terms and the mp50 reference";
  }
  if (check.starts_with("log-sum-exp")) {
    return "4 (d + Nk + 8), relative to 1 + max logit + |L|: L = m + log sum exp carries the logit error (d u of the "
           "logit magnitude), the normaliser's Nk u, and its own rounding";
  }
  if (check.starts_with("backward")) {
    return "8 n A: both sides sum the same elementary products (of dP = dO V^T, D, dS = s P o (dP - D)) in different "
           "orders, each with error ~ n A u of the magnitude; factor 2 for the two sides, 2 for second-order terms";
  }
  if (check.starts_with("double backward")) {
    return "16 n A: as the first order, with two more levels of sums (dd, b, then dQ' etc.), doubling the factor "
           "(entry by entry, each entry against its own magnitude)";
  }
  return "";
}

std::string AttentionCase::to_string() const { return problem.to_string() + " seed=" + std::to_string(seed); }

namespace {

// Calls field(key, value) for each key=value token; wraps its errors with the whole text.
template <class Field>
void parse_fields(std::string_view text, Field&& field) {
  std::istringstream in{std::string(text)};
  std::string token;
  int seen = 0;
  while (in >> token) {
    const auto eq = token.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("case '" + std::string(text) + "': '" + token + "' is not key=value");
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    try {
      field(key, value);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("case '" + std::string(text) + "': " + key + ": " + e.what());
    } catch (const std::out_of_range&) {
      throw std::invalid_argument("case '" + std::string(text) + "': " + key + " is out of range");
    }
    ++seen;
  }
  if (seen == 0) throw std::invalid_argument("case: empty");
}

}  // namespace

AttentionCase AttentionCase::parse(std::string_view text) {
  AttentionCase c;
  AttentionShape& s = c.problem.shape;
  parse_fields(text, [&](const std::string& key, const std::string& value) {
    if (key == "B") s.batch = std::stoi(value);
    else if (key == "Hq") s.heads_q = std::stoi(value);
    else if (key == "Hkv") s.heads_kv = std::stoi(value);
    else if (key == "Nq") s.seq_q = std::stoi(value);
    else if (key == "Nk") s.seq_k = std::stoi(value);
    else if (key == "d") s.head_dim = std::stoi(value);
    else if (key == "dv") s.head_dim_v = std::stoi(value);
    else if (key == "scale") c.problem.scale = std::stod(value);
    else if (key == "seed") c.seed = std::stoull(value);
    else if (key == "mask") {
      const auto m = parse_mask(value);
      if (!m) throw std::invalid_argument("unknown mask '" + value + "' (none, causal_tl, causal_br)");
      c.problem.mask = *m;
    } else {
      throw std::invalid_argument("unknown key");
    }
  });
  c.problem.validate();
  return c;
}

std::string AttnResCase::to_string() const { return shape.to_string() + " seed=" + std::to_string(seed); }

AttnResCase AttnResCase::parse(std::string_view text) {
  AttnResCase c;
  AttnResShape& s = c.shape;
  parse_fields(text, [&](const std::string& key, const std::string& value) {
    if (key == "N") s.sources = std::stoi(value);
    else if (key == "B") s.batch = std::stoi(value);
    else if (key == "T") s.tokens = std::stoi(value);
    else if (key == "D") s.dim = std::stoi(value);
    else if (key == "S") s.layers = std::stoi(value);
    else if (key == "eps") s.eps = std::stod(value);
    else if (key == "seed") c.seed = std::stoull(value);
    else throw std::invalid_argument("unknown key");
  });
  c.shape.validate();
  return c;
}

AttentionCase random_attention_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  AttentionCase c;
  AttentionShape& s = c.problem.shape;
  s.batch = pick(1, 2);
  s.heads_kv = pick(1, 2);
  s.heads_q = s.heads_kv * pick(1, 3);
  s.seq_q = pick(1, 9);
  s.seq_k = pick(1, 9);
  s.head_dim = pick(1, 8);
  s.head_dim_v = pick(1, 8);
  c.problem.mask = static_cast<Mask>(pick(0, 2));
  const double factor = std::uniform_real_distribution<double>(0.25, 2.0)(rng);
  c.problem.scale = default_scale(s.head_dim) * factor * (pick(0, 9) == 0 ? -1 : 1);
  c.seed = seed;
  return c;
}

std::vector<Agreement> check_attention(const AttentionCase& c) {
  const AttentionProblem& p = c.problem;
  p.validate();
  const CaseData data = draw(c);
  const AttentionMagnitudes mag =
      attention_magnitudes(p, inputs(data.q, data.k, data.v), data.dout, inputs(data.ddq, data.ddk, data.ddv));
  const Bounds bound = bounds_for(p, mag.logit_max);
  const double m1 = dot_abs(mag.dq, data.aq) + dot_abs(mag.dk, data.ak) + dot_abs(mag.dv, data.av);
  const double m2 = dot_abs(mag.dq2, data.wq) + dot_abs(mag.dk2, data.wk) + dot_abs(mag.dv2, data.wv) +
                    dot_abs(mag.ddo, data.wdo);

  const Results<double> r64(p, data);
  const Results<quad> r128(p, data);
  const Results<mp50> r50(p, data);
  const double u64 = unit_roundoff<double>(), u128 = unit_roundoff<quad>(), u50 = unit_roundoff<mp50>();

  std::vector<Agreement> out;
  // a. first order: analytic vs autodiff (double, quad) and vs finite differences (mp50)
  out.push_back({"backward: analytic vs autodiff", OracleType::fp64,
                 scaled(r64.first_order_analytic, r64.first_order_autodiff(p), u64, m1), bound.first_order});
  out.push_back({"backward: analytic vs autodiff", OracleType::quad,
                 scaled(r128.first_order_analytic, r128.first_order_autodiff(p), u128, m1), bound.first_order});
  const FiniteDifference fd1 = finite_difference_derivative_at_zero(
      [&](const mp50& t) {
        const auto fwd = attention_forward<mp50>(p, {along(r50.q, t, r50.aq), along(r50.k, t, r50.ak), along(r50.v, t, r50.av)});
        return dot(r50.dout, fwd.o);
      },
      1 + attention_logit_rate(p, data.q, data.k, data.aq, data.ak));
  out.push_back({"backward: analytic vs finite differences", OracleType::mp50,
                 scaled(r50.first_order_analytic, fd1.derivative, u50, m1),
                 fd_bound(fd1, u50, m1, bound.forward, dot_abs(mag.o, data.dout))});

  // b. second order: analytic double backward vs second-order autodiff, vs finite differences of
  // the analytic backward
  out.push_back({"double backward: analytic vs autodiff", OracleType::fp64,
                 scaled(r64.second_order_analytic, r64.second_order_autodiff(p), u64, m2), bound.second_order});
  out.push_back({"double backward: analytic vs autodiff", OracleType::quad,
                 scaled(r128.second_order_analytic, r128.second_order_autodiff(p), u128, m2), bound.second_order});
  // Entry by entry: up to 32 coordinates of (Q, K, V), drawn from the case's seed.
  std::vector<std::size_t> coordinates;
  {
    const std::size_t n = p.shape.q_size() + p.shape.k_size() + p.shape.v_size();
    std::mt19937_64 pick(c.seed + 1);
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 32); ++i) coordinates.push_back(n <= 32 ? i : pick() % n);
  }
  out.push_back({"double backward entries: analytic vs autodiff HVP and JVP", OracleType::fp64,
                 r64.second_order_elementwise(p, mag, u64, coordinates), bound.second_order});
  out.push_back({"double backward entries: analytic vs autodiff HVP and JVP", OracleType::quad,
                 r128.second_order_elementwise(p, mag, u128, coordinates), bound.second_order});
  const FiniteDifference fd2 = finite_difference_derivative_at_zero(
      [&](const mp50& t) {
        const auto b = attention_backward<mp50>(
            p, {along(r50.q, t, r50.wq), along(r50.k, t, r50.wk), along(r50.v, t, r50.wv)}, along(r50.dout, t, r50.wdo));
        return dot(r50.ddq, b.dq) + dot(r50.ddk, b.dk) + dot(r50.ddv, b.dv);
      },
      1 + attention_logit_rate(p, data.q, data.k, data.wq, data.wk));
  out.push_back({"double backward: analytic vs finite differences of the backward", OracleType::mp50,
                 scaled(r50.second_order_analytic, fd2.derivative, u50, m2),
                 fd_bound(fd2, u50, m2, bound.first_order,
                          dot_abs(mag.dq, data.ddq) + dot_abs(mag.dk, data.ddk) + dot_abs(mag.dv, data.ddv))});

  // c. the precision ladder: double and quad against mp50, element by element
  const auto ladder = [&](const auto& r, OracleType type, double u) {
    out.push_back({"forward O vs mp50", type, scaled_max(r.fwd.o, r50.fwd.o, u, mag.o), bound.forward});
    out.push_back({"log-sum-exp L vs mp50", type, scaled_lse(r.fwd.lse, r50.fwd.lse, u, mag.logit_max), bound.lse});
    out.push_back({"backward dQ dK dV vs mp50", type,
                   std::max({scaled_max(r.bwd.dq, r50.bwd.dq, u, mag.dq), scaled_max(r.bwd.dk, r50.bwd.dk, u, mag.dk),
                             scaled_max(r.bwd.dv, r50.bwd.dv, u, mag.dv)}),
                   bound.first_order});
    out.push_back({"double backward dQ' dK' dV' ddO vs mp50", type,
                   std::max({scaled_max(r.dbwd.dq2, r50.dbwd.dq2, u, mag.dq2),
                             scaled_max(r.dbwd.dk2, r50.dbwd.dk2, u, mag.dk2),
                             scaled_max(r.dbwd.dv2, r50.dbwd.dv2, u, mag.dv2),
                             scaled_max(r.dbwd.ddo, r50.dbwd.ddo, u, mag.ddo)}),
                   bound.second_order});
  };
  ladder(r64, OracleType::fp64, u64);
  ladder(r128, OracleType::quad, u128);
  return out;
}

AttnResCase random_attnres_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x5bd1e9955bd1e995ULL);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  AttnResCase c;
  c.shape.sources = pick(1, 5);
  c.shape.batch = pick(1, 2);
  c.shape.tokens = pick(1, 3);
  c.shape.dim = pick(1, 12);
  c.shape.layers = pick(1, 3);
  c.shape.eps = std::array<double, 3>{1e-6, 1e-3, 0.5}[static_cast<std::size_t>(pick(0, 2))];
  c.seed = seed;
  return c;
}

namespace {

struct AttnResData {
  std::vector<double> values, partial, queries, dh;
  std::vector<double> a_values, a_partial, a_queries;  // the direction of the derivative checks
};

AttnResData draw(const AttnResCase& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const auto n = [&](std::size_t size) {
    std::vector<double> x(size);
    for (double& e : x) e = normal(rng);
    return x;
  };
  // Vectors of D entries, each vector scaled by e^z: RMS norms spread over about e^(+-2).
  const auto scaled_vectors = [&](std::size_t size) {
    std::vector<double> x = n(size);
    const std::size_t D = static_cast<std::size_t>(c.shape.dim);
    for (std::size_t v = 0; v < size / D; ++v) {
      const double scale = std::exp(normal(rng));
      for (std::size_t i = 0; i < D; ++i) x[v * D + i] *= scale;
    }
    return x;
  };
  const AttnResShape& s = c.shape;
  AttnResData d;
  d.values = scaled_vectors(s.values_size());
  d.partial = scaled_vectors(s.outputs_size());
  d.queries = n(s.queries_size());
  d.dh = n(s.outputs_size());
  d.a_values = n(s.values_size()), d.a_partial = n(s.outputs_size()), d.a_queries = n(s.queries_size());
  return d;
}

// The fastest rate of change along (a_w, a_x) of what the outputs depend on nonlinearly: each RMS
// factor r = (|x|^2/D + eps)^(-1/2) varies on the scale of r |a_x| / sqrt(D) (the direction's RMS in
// the units r normalises by; by Cauchy-Schwarz it bounds r's relative rate r^2 |x . a_x| / D, and
// unlike that it does not vanish where x . a_x happens to be 0), and each logit s = r (w . x) at
// r (|a_w| . |x| + |w| . |a_x|) + |s| times that; over every source vector x and layer.
double attnres_logit_rate(const AttnResShape& sh, const AttnResData& d) {
  const std::size_t D = static_cast<std::size_t>(sh.dim);
  const std::size_t tokens = static_cast<std::size_t>(sh.batch) * static_cast<std::size_t>(sh.tokens);
  double rate = 0;
  const auto consider = [&](const double* x, const double* ax, const double* w, const double* aw) {
    double ss = 0, wx = 0, awx = 0, wax = 0, axax = 0;
    for (std::size_t c = 0; c < D; ++c) {
      ss += x[c] * x[c], wx += w[c] * x[c], awx += std::fabs(aw[c] * x[c]);
      wax += std::fabs(w[c] * ax[c]), axax += ax[c] * ax[c];
    }
    const double r = 1 / std::sqrt(ss / static_cast<double>(D) + sh.eps);
    const double r_rate = r * std::sqrt(axax / static_cast<double>(D));
    rate = std::max({rate, r * (awx + wax) + std::fabs(r * wx) * r_rate, r_rate});
  };
  for (int layer = 0; layer < sh.layers; ++layer) {
    const double* w = d.queries.data() + static_cast<std::size_t>(layer) * D;
    const double* aw = d.a_queries.data() + static_cast<std::size_t>(layer) * D;
    for (std::size_t token = 0; token < tokens; ++token) {
      for (int i = 0; i < sh.sources; ++i) {
        const std::size_t off = (static_cast<std::size_t>(i) * tokens + token) * D;
        consider(d.values.data() + off, d.a_values.data() + off, w, aw);
      }
      const std::size_t off = (static_cast<std::size_t>(layer) * tokens + token) * D;
      consider(d.partial.data() + off, d.a_partial.data() + off, w, aw);
    }
  }
  return rate;
}

template <class T>
struct AttnResResults {
  std::vector<T> values, partial, queries, dh, a_values, a_partial, a_queries;
  std::vector<T> h, h_one_softmax;
  AttnResGrads<T> grads;
  T analytic;  // <grads, direction>

  AttnResResults(const AttnResShape& s, const AttnResData& d)
      : values(as<T>(d.values)), partial(as<T>(d.partial)), queries(as<T>(d.queries)), dh(as<T>(d.dh)),
        a_values(as<T>(d.a_values)), a_partial(as<T>(d.a_partial)), a_queries(as<T>(d.a_queries)) {
    h = attnres_forward<T>(s, values, partial, queries);
    h_one_softmax.resize(h.size());
    attnres_one_softmax_forward(s, values.data(), partial.data(), queries.data(), h_one_softmax.data());
    grads = attnres_backward<T>(s, values, partial, queries, dh);
    analytic = dot(grads.d_values, a_values) + dot(grads.d_partial, a_partial) + dot(grads.d_queries, a_queries);
  }
  T autodiff(const AttnResShape& s) const {
    return dot(dh, attnres_jvp<T>(s, values, partial, queries, a_values, a_partial, a_queries).h_dot);
  }
};

// max_i |a_i - b_i| / (u * magnitude_i), both in T.
template <class T>
double scaled_max_same(const std::vector<T>& a, const std::vector<T>& b, double u, const std::vector<double>& magnitude) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, scaled(a[i], b[i], u, magnitude[i]));
  return worst;
}

}  // namespace

std::vector<Agreement> check_attnres(const AttnResCase& c) {
  const AttnResShape& s = c.shape;
  s.validate();
  const AttnResData data = draw(c);
  const AttnResMagnitudes mag = attnres_magnitudes(s, data.values, data.partial, data.queries, data.dh);
  const double lengths = s.dim + s.sources + 8, amplification = 1 + mag.logit_max;
  const double bound_forward = 4 * lengths * amplification, bound_backward = 8 * lengths * amplification;
  const double m = dot_abs(mag.d_values, data.a_values) + dot_abs(mag.d_partial, data.a_partial) +
                   dot_abs(mag.d_queries, data.a_queries);
  const AttnResResults<double> r64(s, data);
  const AttnResResults<quad> r128(s, data);
  const AttnResResults<mp50> r50(s, data);
  const double u64 = unit_roundoff<double>(), u128 = unit_roundoff<quad>(), u50 = unit_roundoff<mp50>();

  std::vector<Agreement> out;
  out.push_back({"AttnRes: two-phase vs one-softmax", OracleType::fp64,
                 scaled_max_same(r64.h, r64.h_one_softmax, u64, mag.h), bound_forward});
  out.push_back({"AttnRes: two-phase vs one-softmax", OracleType::quad,
                 scaled_max_same(r128.h, r128.h_one_softmax, u128, mag.h), bound_forward});
  out.push_back({"AttnRes: two-phase vs one-softmax", OracleType::mp50,
                 scaled_max_same(r50.h, r50.h_one_softmax, u50, mag.h), bound_forward});
  out.push_back({"AttnRes backward: analytic vs autodiff", OracleType::fp64, scaled(r64.analytic, r64.autodiff(s), u64, m),
                 bound_backward});
  out.push_back({"AttnRes backward: analytic vs autodiff", OracleType::quad,
                 scaled(r128.analytic, r128.autodiff(s), u128, m), bound_backward});
  const FiniteDifference fd = finite_difference_derivative_at_zero(
      [&](const mp50& t) {
        return dot(r50.dh, attnres_forward<mp50>(s, along(r50.values, t, r50.a_values), along(r50.partial, t, r50.a_partial),
                                                 along(r50.queries, t, r50.a_queries)));
      },
      1 + attnres_logit_rate(s, data));
  out.push_back({"AttnRes backward: analytic vs finite differences", OracleType::mp50,
                 scaled(r50.analytic, fd.derivative, u50, m), fd_bound(fd, u50, m, bound_forward, dot_abs(mag.h, data.dh))});
  const auto ladder = [&](const auto& r, OracleType type, double u) {
    out.push_back({"AttnRes forward h vs mp50", type, scaled_max(r.h, r50.h, u, mag.h), bound_forward});
    out.push_back({"AttnRes backward vs mp50", type,
                   std::max({scaled_max(r.grads.d_values, r50.grads.d_values, u, mag.d_values),
                             scaled_max(r.grads.d_partial, r50.grads.d_partial, u, mag.d_partial),
                             scaled_max(r.grads.d_queries, r50.grads.d_queries, u, mag.d_queries)}),
                   bound_backward});
  };
  ladder(r64, OracleType::fp64, u64);
  ladder(r128, OracleType::quad, u128);
  return out;
}

}  // namespace fc::oracle
