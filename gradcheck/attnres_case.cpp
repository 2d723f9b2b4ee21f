#include "gradcheck/attnres_case.hpp"

#include <sstream>
#include <stdexcept>

namespace fc::gradcheck {

std::string AttnResCase::to_string() const {
  std::ostringstream s;
  s.precision(17);
  s << "N=" << shape.sources << " B=" << shape.batch << " T=" << shape.tokens << " D=" << shape.dim << " S=" << shape.layers
    << " eps=" << shape.eps << " inputs=" << inputs.to_string() << " policy=" << policy.to_string() << " seed=" << seed;
  return s.str();
}

AttnResCase AttnResCase::parse(std::string_view text) {
  AttnResCase c;
  std::istringstream in{std::string(text)};
  std::string token;
  int fields = 0;
  while (in >> token) {
    const auto eq = token.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("AttnRes case: '" + token + "' is not key=value");
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    try {
      kernels::AttnResShape& s = c.shape;
      if (key == "N") s.sources = positive_int_field(value);
      else if (key == "B") s.batch = positive_int_field(value);
      else if (key == "T") s.tokens = positive_int_field(value);
      else if (key == "D") s.dim = positive_int_field(value);
      else if (key == "S") s.layers = positive_int_field(value);
      else if (key == "eps") {
        s.eps = finite_field(value);
        if (!(s.eps > 0)) throw std::invalid_argument("eps must be > 0");
      } else if (key == "inputs") c.inputs = InputDistribution::parse(value);
      else if (key == "policy") c.policy = PrecisionPolicy::parse(value);
      else if (key == "seed") c.seed = unsigned_field(value);
      else throw std::invalid_argument("unknown key (N, B, T, D, S, eps, inputs, policy, seed)");
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("AttnRes case field '" + token + "': " + e.what());
    } catch (const std::out_of_range&) {
      throw std::invalid_argument("AttnRes case field '" + token + "': out of range");
    }
    ++fields;
  }
  if (fields == 0) throw std::invalid_argument("AttnRes case: empty");
  return c;
}

}  // namespace fc::gradcheck
