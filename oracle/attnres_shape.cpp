#include <cmath>
#include <sstream>
#include <stdexcept>

#include "oracle/attnres.hpp"

namespace fc::oracle {

void AttnResShape::validate() const {
  const auto positive = [](int v, const char* what) {
    if (v < 1) throw std::invalid_argument(std::string(what) + " must be at least 1, got " + std::to_string(v));
  };
  positive(sources, "AttnRes sources N");
  positive(batch, "AttnRes batch B");
  positive(tokens, "AttnRes tokens T (an empty sequence has nothing to attend)");
  positive(dim, "AttnRes dim D");
  positive(layers, "AttnRes layers S");
  if (!(std::isfinite(eps) && eps > 0)) throw std::invalid_argument("AttnRes eps must be finite and > 0");
}

std::string AttnResShape::to_string() const {
  std::ostringstream s;
  s.precision(17);
  s << "N=" << sources << " B=" << batch << " T=" << tokens << " D=" << dim << " S=" << layers << " eps=" << eps;
  return s.str();
}

}  // namespace fc::oracle
