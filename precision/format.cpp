#include "precision/format.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

namespace fc {

double FormatInfo::unit_roundoff() const { return std::ldexp(1.0, -precision); }
double FormatInfo::machine_epsilon() const { return std::ldexp(1.0, 1 - precision); }
double FormatInfo::max_finite() const {
  if (name == "e4m3") return 448.0;  // S.1111.111 is its NaN: 1.75, not 1.875, times 2^8
  return std::ldexp(2.0 - std::ldexp(1.0, 1 - precision), emax);
}
double FormatInfo::min_normal() const { return std::ldexp(1.0, emin); }
double FormatInfo::min_subnormal() const { return std::ldexp(1.0, emin - precision + 1); }

std::optional<Format> parse_format(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "fp64" || lower == "double" || lower == "float64" || lower == "f64") return Format::fp64;
  if (lower == "fp32" || lower == "float" || lower == "float32" || lower == "f32") return Format::fp32;
  if (lower == "fp16" || lower == "half" || lower == "float16" || lower == "f16") return Format::fp16;
  if (lower == "bf16" || lower == "bfloat16") return Format::bf16;
  if (lower == "e4m3" || lower == "fp8" || lower == "float8_e4m3fn" || lower == "fp8e4m3") return Format::e4m3;
  return std::nullopt;
}

double ulp(Format f, double x) {
  if (!std::isfinite(x)) return std::nan("");
  const FormatInfo info = format_info(f);
  int e = info.emin;
  if (x != 0.0) {
    int frexp_exp = 0;
    std::frexp(x, &frexp_exp);  // x = m * 2^frexp_exp with 0.5 <= |m| < 1
    e = std::max(frexp_exp - 1, info.emin);
  }
  return std::ldexp(1.0, e - info.precision + 1);
}

}  // namespace fc
