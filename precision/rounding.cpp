#include "precision/rounding.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace fc {

std::string_view name(Rounding r) {
  switch (r) {
    case Rounding::nearest_even: return "rn";
    case Rounding::toward_zero: return "rz";
    case Rounding::stochastic: return "sr";
  }
  return "?";
}

std::optional<Rounding> parse_rounding(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "rn" || lower == "nearest" || lower == "nearest_even") return Rounding::nearest_even;
  if (lower == "rz" || lower == "zero" || lower == "toward_zero") return Rounding::toward_zero;
  if (lower == "sr" || lower == "stochastic") return Rounding::stochastic;
  return std::nullopt;
}

}  // namespace fc
