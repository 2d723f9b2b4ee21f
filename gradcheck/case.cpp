#include "gradcheck/case.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>

namespace fc::gradcheck {

std::string InputDistribution::to_string() const {
  switch (kind) {
    case Distribution::normal: {
      std::ostringstream s;
      s.precision(17);
      s << "normal:" << sigma;
      return s.str();
    }
    case Distribution::outliers: {
      if (outlier_rate == InputDistribution{}.outlier_rate && outlier_sigma == InputDistribution{}.outlier_sigma) return "outliers";
      std::ostringstream s;
      s.precision(17);
      s << "outliers:" << outlier_rate << ":" << outlier_sigma;
      return s.str();
    }
    case Distribution::onehot: return "onehot";
    case Distribution::uniform: return "uniform";
    case Distribution::logits: {
      std::ostringstream s;
      s.precision(17);
      s << "logits:" << sigma;
      return s.str();
    }
  }
  return "?";
}

double InputDistribution::logit_sigma() const {
  switch (kind) {
    case Distribution::onehot: return 16.0;
    case Distribution::uniform: return 0.01;
    case Distribution::logits: return sigma;
    default: return 0.0;
  }
}

std::string_view name(Layout l) { return l == Layout::bhnd ? "bhnd" : "bnhd"; }

std::string Case::to_string() const {
  std::ostringstream s;
  s.precision(17);
  s << "B=" << shape.batch << " Hq=" << shape.heads_q << " Hkv=" << shape.heads_kv << " Nq=" << shape.seq_q << " Nk=" << shape.seq_k
    << " d=" << shape.head_dim << " dv=" << shape.head_dim_v << " mask=" << kernels::name(mask) << " scale=" << scale
    << " inputs=" << inputs.to_string() << " layout=" << name(layout) << " policy=" << policy.to_string() << " seed=" << seed;
  return s.str();
}

int positive_int_field(const std::string& v) {
  std::size_t used = 0;
  const int x = std::stoi(v, &used);
  if (used != v.size() || x < 1) throw std::invalid_argument("'" + v + "' is not a positive integer");
  return x;
}

// The whole token, finite ("0.5x", "inf", "nan" are refused).
double finite_field(const std::string& v) {
  std::size_t used = 0;
  const double x = std::stod(v, &used);
  if (used != v.size() || !std::isfinite(x)) throw std::invalid_argument("'" + v + "' is not a finite number");
  return x;
}

// Digits only: std::stoull would take "-1" as 2^64 - 1.
std::uint64_t unsigned_field(const std::string& v) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument("'" + v + "' is not a non-negative integer");
  }
  return std::stoull(v);
}

InputDistribution InputDistribution::parse(const std::string& value) {
  if (value.rfind("normal:", 0) == 0) {
    const InputDistribution d{Distribution::normal, finite_field(value.substr(7))};
    if (!(d.sigma > 0)) throw std::invalid_argument("normal sigma must be > 0");
    return d;
  }
  if (value == "outliers") return {Distribution::outliers, 1.0};
  if (value.rfind("outliers:", 0) == 0) {
    const std::string rest = value.substr(9);
    const auto colon = rest.find(':');
    if (colon == std::string::npos) throw std::invalid_argument("outliers:RATE:SIGMA needs both numbers");
    InputDistribution d{Distribution::outliers, 1.0};
    d.outlier_rate = finite_field(rest.substr(0, colon));
    d.outlier_sigma = finite_field(rest.substr(colon + 1));
    if (!(d.outlier_rate >= 0 && d.outlier_rate <= 1)) throw std::invalid_argument("outlier rate must be in [0, 1]");
    if (!(d.outlier_sigma >= 0)) throw std::invalid_argument("outlier sigma must be >= 0");
    return d;
  }
  if (value.rfind("logits:", 0) == 0) {
    const InputDistribution d{Distribution::logits, finite_field(value.substr(7))};
    if (!(d.sigma > 0)) throw std::invalid_argument("logits sigma must be > 0");
    return d;
  }
  if (value == "onehot") return {Distribution::onehot, 1.0};
  if (value == "uniform") return {Distribution::uniform, 1.0};
  throw std::invalid_argument("unknown inputs '" + value + "' (normal:SIGMA, outliers, outliers:RATE:SIGMA, onehot, uniform, logits:SIGMA)");
}

Case Case::parse(std::string_view text) {
  Case c;
  std::istringstream in{std::string(text)};
  std::string token;
  int fields = 0;
  while (in >> token) {
    const auto eq = token.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("case: '" + token + "' is not key=value");
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    try {
      kernels::AttentionShape& s = c.shape;
      if (key == "B") s.batch = positive_int_field(value);
      else if (key == "Hq") s.heads_q = positive_int_field(value);
      else if (key == "Hkv") s.heads_kv = positive_int_field(value);
      else if (key == "Nq") s.seq_q = positive_int_field(value);
      else if (key == "Nk") s.seq_k = positive_int_field(value);
      else if (key == "d") s.head_dim = positive_int_field(value);
      else if (key == "dv") s.head_dim_v = positive_int_field(value);
      else if (key == "scale") c.scale = finite_field(value);
      else if (key == "seed") c.seed = unsigned_field(value);
      else if (key == "policy") c.policy = PrecisionPolicy::parse(value);
      else if (key == "mask") {
        if (value == "none") c.mask = kernels::Mask::none;
        else if (value == "causal_tl") c.mask = kernels::Mask::causal_top_left;
        else if (value == "causal_br") c.mask = kernels::Mask::causal_bottom_right;
        else throw std::invalid_argument("unknown mask '" + value + "' (none, causal_tl, causal_br)");
      } else if (key == "layout") {
        if (value == "bhnd") c.layout = Layout::bhnd;
        else if (value == "bnhd") c.layout = Layout::bnhd;
        else throw std::invalid_argument("unknown layout '" + value + "' (bhnd, bnhd)");
      } else if (key == "inputs") {
        c.inputs = InputDistribution::parse(value);
      } else {
        throw std::invalid_argument("unknown key");
      }
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("case field '" + token + "': " + e.what());
    } catch (const std::out_of_range&) {
      throw std::invalid_argument("case field '" + token + "': out of range");
    }
    ++fields;
  }
  if (fields == 0) throw std::invalid_argument("case: empty");
  if (c.shape.heads_q % c.shape.heads_kv != 0) {
    throw std::invalid_argument("case: Hq = " + std::to_string(c.shape.heads_q) + " is not a multiple of Hkv = " +
                                std::to_string(c.shape.heads_kv));
  }
  return c;
}

}  // namespace fc::gradcheck
