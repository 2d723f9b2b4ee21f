#include "oracle/attention_problem.hpp"

#include <cmath>
#include <sstream>

namespace fc::oracle {

std::string_view name(Mask m) {
  switch (m) {
    case Mask::none: return "none";
    case Mask::causal_top_left: return "causal_tl";
    case Mask::causal_bottom_right: return "causal_br";
  }
  return "?";
}

std::optional<Mask> parse_mask(std::string_view text) {
  if (text == "none") return Mask::none;
  if (text == "causal_tl" || text == "causal_top_left") return Mask::causal_top_left;
  if (text == "causal_br" || text == "causal_bottom_right" || text == "causal") return Mask::causal_bottom_right;
  return std::nullopt;
}

void AttentionProblem::validate() const {
  const auto positive = [](int v, const char* what) {
    if (v < 1) throw std::invalid_argument(std::string(what) + " must be at least 1, got " + std::to_string(v));
  };
  positive(shape.batch, "batch size B");
  positive(shape.heads_q, "query heads Hq");
  positive(shape.heads_kv, "key/value heads Hkv");
  positive(shape.seq_q, "query length Nq (an empty sequence has no attention)");
  positive(shape.seq_k, "key length Nk (an empty sequence has no attention)");
  positive(shape.head_dim, "head dim d");
  positive(shape.head_dim_v, "value head dim dv");
  if (shape.heads_q % shape.heads_kv != 0) {
    throw std::invalid_argument("query heads Hq = " + std::to_string(shape.heads_q) + " is not a multiple of Hkv = " +
                                std::to_string(shape.heads_kv));
  }
  if (!std::isfinite(scale)) throw std::invalid_argument("softmax scale is not finite");
}

std::string AttentionProblem::to_string() const {
  std::ostringstream s;
  s.precision(17);
  s << "B=" << shape.batch << " Hq=" << shape.heads_q << " Hkv=" << shape.heads_kv << " Nq=" << shape.seq_q
    << " Nk=" << shape.seq_k << " d=" << shape.head_dim << " dv=" << shape.head_dim_v << " mask=" << name(mask)
    << " scale=" << scale;
  return s.str();
}

double default_scale(int head_dim) { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

}  // namespace fc::oracle
