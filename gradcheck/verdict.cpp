#include "gradcheck/verdict.hpp"

#include <limits>
#include <sstream>
#include <stdexcept>

#include "oracle/scalar.hpp"

namespace fc::gradcheck {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

std::vector<double> Output::values() const {
  std::vector<double> x = tensor.values();
  if (!scale.view().data) return x;
  const std::vector<double> s = scale.values();
  const std::size_t width = x.size() / std::max<std::size_t>(s.size(), 1);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] *= s[i / width];  // exact: powers of two
  return x;
}

bool Output::bitwise_equal(const Output& other) const {
  return tensor.bitwise_equal(other.tensor) && (!scale.view().data || scale.bitwise_equal(other.scale));
}

bool Output::has_nonfinite() const { return tensor.has_nonfinite() || (scale.view().data && scale.has_nonfinite()); }

const Output& Outputs::at(const std::string& name) const {
  for (const Output& o : tensors) {
    if (o.name == name) return o;
  }
  throw std::logic_error("no output " + name);
}

void Outputs::add(std::string name, Tensor t, Tensor scale) { tensors.push_back({std::move(name), std::move(t), std::move(scale)}); }

void Outputs::poison() {
  for (Output& o : tensors) {
    o.tensor.poison();
    if (o.scale.view().data) o.scale.poison();
  }
}

std::string shortest(double x) {
  std::ostringstream s;
  s.precision(4);
  s << x;
  return s.str();
}

double largest_finite(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) {
    if (std::isfinite(e)) m = std::max(m, std::fabs(e));
  }
  return m;
}

template <class T>
TensorVerdict verdict(const std::string& name, Format format, const std::vector<double>& subject, const std::vector<double>& base,
                      const std::vector<T>& reference, double magnitude, double noise_unit, const VerdictOptions& o, double underflow) {
  TensorVerdict v;
  v.tensor = name;
  v.format = format;
  v.floor = o.floor_u * (noise_unit * magnitude + underflow);
  // Relative errors and ULPs are floored at the magnitude scale: near a zero reference they count
  // against the size of the terms that cancelled, not against the (tiny) reference itself.
  const MetricOptions m{format, magnitude};
  v.subject = compare(std::span<const double>(subject), std::span<const T>(reference), m);
  v.baseline = compare(std::span<const double>(base), std::span<const T>(reference), m);
  const double es = v.subject.max_abs, eb = v.baseline.max_abs;
  double ref_max = 0;
  for (const T& x : reference) {
    if (std::isfinite(static_cast<double>(x))) ref_max = std::max(ref_max, std::fabs(static_cast<double>(x)));
  }
  v.discriminating = v.floor < 0.25 * ref_max;
  v.baseline_usable = std::isfinite(eb);
  // The error in units of the larger of the baseline's error and the floor: err / err_base wherever
  // the baseline is above rounding noise, and finite where the baseline happens to be exact.
  const double unit = std::max(eb, v.floor);
  v.ratio = unit > 0 ? es / unit : (es > 0 ? kInf : 0.0);
  v.pass = v.baseline_usable && es <= o.rho * eb + v.floor;  // an unusable baseline discards the case
  return v;
}

template <class T>
std::string outside_range(const std::string& name, Format range, const std::vector<T>& reference) {
  const double max_finite = format_info(range).max_finite();
  for (const auto& x : reference) {
    const double d = static_cast<double>(x);
    if (std::isfinite(d) && std::fabs(d) > max_finite) {
      return "the exact " + name + " (" + shortest(d) + ") is outside " + std::string(fc::name(range)) + "'s range";
    }
  }
  return {};
}

template TensorVerdict verdict<double>(const std::string&, Format, const std::vector<double>&, const std::vector<double>&,
                                       const std::vector<double>&, double, double, const VerdictOptions&, double);
template TensorVerdict verdict<oracle::quad>(const std::string&, Format, const std::vector<double>&, const std::vector<double>&,
                                             const std::vector<oracle::quad>&, double, double, const VerdictOptions&, double);
template std::string outside_range<double>(const std::string&, Format, const std::vector<double>&);
template std::string outside_range<oracle::quad>(const std::string&, Format, const std::vector<oracle::quad>&);

PropertyCheck determinism(const Outputs& a, const Outputs& b) {
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    if (!a.tensors[i].bitwise_equal(b.tensors[i])) {
      return {"determinism", false, false, a.tensors[i].name + " differs between two identical calls"};
    }
  }
  return {"determinism", true, false, "bitwise identical"};
}

PropertyCheck zero(const Outputs& out) {
  for (const Output& o : out.tensors) {
    for (double x : o.values()) {
      if (x != 0) return {"zero", false, false, o.name + " has a nonzero entry (" + shortest(x) + ") for a zero cotangent"};
    }
  }
  return {"zero", true, false, "all outputs exactly zero"};
}

// g(2a) = 2 g(a) exactly, except where an intermediate that scales with the cotangent is subnormal in
// the storage format t: its rounding does not scale (FA2 rounds dS to fp16 before dS K; P below 6e-5
// makes dS subnormal in fp16). Each such intermediate is off by at most u_t min_normal_t, which can
// move an output across a rounding boundary: allowed, 2 ULPs of the output's format plus `underflow`
// (2 L u_t min_normal_t max|input| for long sums of them, computed by the caller).
PropertyCheck homogeneity(const Outputs& once, const Outputs& twice, double underflow) {
  for (const Outputs* o : {&once, &twice}) {
    for (const Output& t : o->tensors) {
      if (t.has_nonfinite()) return {"homogeneity", true, true, t.name + " has non-finite entries"};
    }
  }
  double worst = 0;
  std::string where = "-";
  for (std::size_t i = 0; i < once.tensors.size(); ++i) {
    const Format f = once.tensors[i].format();
    const std::vector<double> a = once.tensors[i].values(), b = twice.tensors[i].values();
    for (std::size_t j = 0; j < a.size(); ++j) {
      const double diff = std::fabs(b[j] - 2 * a[j]);
      if (diff == 0) continue;
      const double allowed = 2 * ulp(f, std::max(std::fabs(b[j]), std::fabs(2 * a[j]))) + underflow;
      const double v = diff / allowed;
      if (v > worst) worst = v, where = once.tensors[i].name + "[" + std::to_string(j) + "]";
    }
  }
  return {"homogeneity", worst <= 1, false,
          worst == 0 ? "doubling the cotangent doubles every output exactly"
                     : "max |g(2a) - 2 g(a)| / allowance (2 ULPs + underflow) = " + shortest(worst) + " at " + where};
}

// The absolute term covers gradual underflow (softmax weights below the smallest normal keep an
// absolute, not a relative, accuracy). The term in the outputs' own size covers their final rounding:
// the bound in the exact magnitudes alone fails a subject whose computed terms are far from the exact
// ones. Seen: torch.math in bf16 with inputs of sigma 100 rounds logits of size 1e3 to bf16 (so does
// the baseline), which moves P by factors e^4 and makes keys whose exact weight is 1e-20 carry weight;
// dV = P^T dO is then linear in dO to the last rounding of each of the three stored results, while the
// exact magnitudes (1e-20) allowed nothing: ratio 9e24 against a bound of 5e5.
PropertyCheck additivity(const Outputs& ga, const Outputs& gb, const Outputs& gc, const std::vector<std::vector<double>>& ma,
                         const std::vector<std::vector<double>>& mb, const std::vector<std::vector<double>>& mc, double bound,
                         double underflow, double output_rounding) {
  double worst = 0;
  std::string where = "-";
  for (std::size_t i = 0; i < ga.tensors.size(); ++i) {
    const auto a = ga.tensors[i].values(), b = gb.tensors[i].values(), c = gc.tensors[i].values();
    for (std::size_t j = 0; j < a.size(); ++j) {
      const double mag = ma[i][j] + mb[i][j] + mc[i][j];
      const double rounding = output_rounding * (std::fabs(a[j]) + std::fabs(b[j]) + std::fabs(c[j]));
      const double excess = std::fabs(c[j] - a[j] - b[j]) - underflow - rounding;
      const double v = excess <= 0 ? 0.0 : (mag > 0 ? excess / mag : kInf);
      if (!(v <= worst)) worst = v, where = ga.tensors[i].name + "[" + std::to_string(j) + "]";
    }
  }
  const bool pass = worst <= bound;
  return {"additivity", pass, false,
          "max (|g(a+b) - g(a) - g(b)| - underflow - outputs' rounding) / magnitude = " + shortest(worst) + " (at " + where + "), bound " +
              shortest(bound)};
}

}  // namespace fc::gradcheck
