// Algebraic properties of the rounding engine, checked by rapidcheck on generated inputs and, for
// every shrunk failure ever found, replayed from the regression corpus (corpus/rounding.txt).
//
// Each property is a plain function of (input bits, random word) returning a failure description,
// so the corpus replays exactly what rapidcheck found. A failing property prints the corpus line to
// add: `<property> <input bits> <word>`.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "precision/rounding.hpp"
#include "precision/tests/reference_rounding.hpp"

namespace fc {
namespace {

using Failure = std::optional<std::string>;
using Property = std::function<Failure(std::uint64_t input, std::uint32_t word)>;

std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

template <class T>
const char* type_name() {
  return Encoding<T>::exp_bits == 8 ? "bf16" : "fp16";
}

// RN and RZ of a float or double equal the reference's (finite inputs).
template <class T, class X>
Failure matches_reference(X x) {
  if (!std::isfinite(x)) return std::nullopt;
  const auto& ref = testing::reference_for<T>();
  const auto rn = round_to<T>(x, Rounding::nearest_even).bits, rz = round_to<T>(x, Rounding::toward_zero).bits;
  if (rn != ref.nearest_even(x) || rz != ref.toward_zero(x)) {
    return std::string(type_name<T>()) + ": RN " + hex(rn) + " vs " + hex(ref.nearest_even(x)) + ", RZ " +
           hex(rz) + " vs " + hex(ref.toward_zero(x));
  }
  return std::nullopt;
}

// x <= y implies round(x) <= round(y), for y the next float up.
template <class T>
Failure monotone(float x) {
  if (std::isnan(x) || x == INFINITY) return std::nullopt;
  const float y = std::nextafter(x, INFINITY);
  for (Rounding mode : {Rounding::nearest_even, Rounding::toward_zero}) {
    if (!(to_double(round_to<T>(x, mode)) <= to_double(round_to<T>(y, mode)))) {
      return std::string(type_name<T>()) + " " + std::string(name(mode)) + " not monotone at the next float";
    }
  }
  return std::nullopt;
}

// Error bounds of each mode, for finite x within the format's range:
//   RN: |RN(x) - x| <= u |x| in the normal range, <= half the subnormal spacing below it;
//   RZ and SR: the result is one of the two neighbours, |result| <= |x| for RZ, error < one ULP.
template <class T>
Failure error_bounds(float x, std::uint32_t word) {
  const FormatInfo info = format_info(format_of_v<T>);
  if (!std::isfinite(x) || std::fabs(x) > info.max_finite()) return std::nullopt;
  const double xd = x, spacing = ulp(format_of_v<T>, xd);
  const double rn = to_double(round_to<T>(x, Rounding::nearest_even));
  const double rz = to_double(round_to<T>(x, Rounding::toward_zero));
  const double sr = to_double(round_to<T>(x, Rounding::stochastic, word));
  const double rn_bound = std::fabs(xd) >= info.min_normal() ? info.unit_roundoff() * std::fabs(xd)
                                                             : 0.5 * info.min_subnormal();
  if (std::fabs(rn - xd) > rn_bound) return std::string(type_name<T>()) + ": RN error above its bound";
  if (std::fabs(rz) > std::fabs(xd) || std::fabs(rz - xd) >= spacing) return std::string(type_name<T>()) + ": RZ";
  if (std::fabs(sr - xd) >= spacing) return std::string(type_name<T>()) + ": SR error of a whole ULP or more";
  if (sr != rz && std::fabs(sr) <= std::fabs(rz)) return std::string(type_name<T>()) + ": SR is not a neighbour";
  return std::nullopt;
}

// SR with the all-zero word truncates; with the all-ones word it rounds every inexact value away
// from zero when at most 32 bits are discarded. For a float x with floor(log2|x|) = e below emin the
// engine discards emin - p + 24 - e bits, so that holds for |x| >= 2^(emin - p - 8) (fp16: 2^-33).
template <class T>
Failure stochastic_extremes(float x) {
  const FormatInfo info = format_info(format_of_v<T>);
  if (!std::isfinite(x) || std::fabs(x) >= std::ldexp(1.0, info.emax + 1)) return std::nullopt;
  const T rz = round_to<T>(x, Rounding::toward_zero);
  if (round_to<T>(x, Rounding::stochastic, 0u).bits != rz.bits) {
    return std::string(type_name<T>()) + ": SR with word 0 differs from RZ";
  }
  if (std::fabs(x) < std::ldexp(1.0, info.emin - info.precision - 8)) return std::nullopt;
  const bool exact = to_double(rz) == static_cast<double>(x);
  const auto away = static_cast<std::uint16_t>(exact ? rz.bits : rz.bits + 1);
  if (round_to<T>(x, Rounding::stochastic, 0xffffffffu).bits != away) {
    return std::string(type_name<T>()) + ": SR with the all-ones word did not round away from zero";
  }
  return std::nullopt;
}

// round(-x) is round(x) with the sign flipped, in every mode and for any word.
template <class T>
Failure sign_symmetric(float x, std::uint32_t word) {
  const std::uint16_t sign = 0x8000;
  for (Rounding mode : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
    if (round_to<T>(-x, mode, word).bits != (round_to<T>(x, mode, word).bits ^ sign)) {
      return std::string(type_name<T>()) + " " + std::string(name(mode)) + ": not sign-symmetric";
    }
  }
  return std::nullopt;
}

Failure both(Failure a, Failure b) { return a ? a : b; }

float as_float(std::uint64_t b) { return float_from_bits(static_cast<std::uint32_t>(b)); }

const std::map<std::string, Property>& properties() {
  static const std::map<std::string, Property> all = {
      {"float_matches_reference",
       [](std::uint64_t b, std::uint32_t) { return both(matches_reference<bf16>(as_float(b)), matches_reference<fp16>(as_float(b))); }},
      {"double_matches_reference",
       [](std::uint64_t b, std::uint32_t) { return both(matches_reference<bf16>(double_from_bits(b)), matches_reference<fp16>(double_from_bits(b))); }},
      {"monotone", [](std::uint64_t b, std::uint32_t) { return both(monotone<bf16>(as_float(b)), monotone<fp16>(as_float(b))); }},
      {"error_bounds",
       [](std::uint64_t b, std::uint32_t w) { return both(error_bounds<bf16>(as_float(b), w), error_bounds<fp16>(as_float(b), w)); }},
      {"stochastic_extremes",
       [](std::uint64_t b, std::uint32_t) { return both(stochastic_extremes<bf16>(as_float(b)), stochastic_extremes<fp16>(as_float(b))); }},
      {"sign_symmetric",
       [](std::uint64_t b, std::uint32_t w) { return both(sign_symmetric<bf16>(as_float(b), w), sign_symmetric<fp16>(as_float(b), w)); }},
  };
  return all;
}

// A value within a few source places of the midpoint between a random encoding of the target
// format and the next one up (the overflow threshold for the largest): where ties and carries happen.
template <class X>
rc::Gen<X> near_midpoint(const testing::ReferenceFormat& ref) {
  return rc::gen::map(rc::gen::tuple(rc::gen::inRange<int>(0, ref.inf_bits()), rc::gen::inRange(-3, 4), rc::gen::arbitrary<bool>()),
                      [&ref](const std::tuple<int, int, bool>& t) {
                        const auto bits = static_cast<std::uint16_t>(std::get<0>(t));
                        const double lo = ref.value_of_positive(bits);
                        const double hi = bits == ref.max_finite_bits() ? 2.0 * std::ldexp(1.0, std::ilogb(lo))
                                                                        : ref.value_of_positive(static_cast<std::uint16_t>(bits + 1));
                        X x = static_cast<X>(0.5 * (lo + hi));  // exact (at most 12 bits); 2^128 is Inf as a float
                        for (int k = std::get<1>(t); k != 0; k += k > 0 ? -1 : 1) x = std::nextafter(x, k > 0 ? X(INFINITY) : X(0));
                        return std::get<2>(t) ? -x : x;
                      });
}

// Float bit patterns: uniform over all patterns (every binade, NaN, Inf, subnormals), or next to a
// bf16 or fp16 midpoint, in fp16's subnormal range, or next to fp16's overflow threshold.
rc::Gen<std::uint32_t> float_bits() {
  const auto bits_of_gen = [](rc::Gen<float> g) { return rc::gen::map(g, [](float x) { return bits_of(x); }); };
  return rc::gen::oneOf(rc::gen::arbitrary<std::uint32_t>(), bits_of_gen(near_midpoint<float>(testing::reference_bf16())),
                        bits_of_gen(near_midpoint<float>(testing::reference_fp16())),
                        rc::gen::inRange<std::uint32_t>(0x30000000u, 0x38800000u),   // fp16 subnormals
                        rc::gen::inRange<std::uint32_t>(0x477f0000u, 0x47900000u));  // fp16 overflow
}

rc::Gen<std::uint64_t> double_bits() {
  const auto bits_of_gen = [](rc::Gen<double> g) { return rc::gen::map(g, [](double x) { return bits_of(x); }); };
  return rc::gen::oneOf(rc::gen::arbitrary<std::uint64_t>(), bits_of_gen(near_midpoint<double>(testing::reference_bf16())),
                        bits_of_gen(near_midpoint<double>(testing::reference_fp16())));
}

void run_property(const std::string& prop, std::uint64_t input, std::uint32_t word) {
  if (const Failure f = properties().at(prop)(input, word)) {
    RC_FAIL(*f + "\n  corpus line: " + prop + " " + hex(input) + " " + hex(word));
  }
}

RC_GTEST_PROP(RoundingProperty, FloatMatchesReference, ()) { run_property("float_matches_reference", *float_bits(), 0); }
RC_GTEST_PROP(RoundingProperty, DoubleMatchesReference, ()) {
  run_property("double_matches_reference", *double_bits(), 0);
}
RC_GTEST_PROP(RoundingProperty, Monotone, ()) { run_property("monotone", *float_bits(), 0); }
RC_GTEST_PROP(RoundingProperty, ErrorBounds, ()) { run_property("error_bounds", *float_bits(), *rc::gen::arbitrary<std::uint32_t>()); }
RC_GTEST_PROP(RoundingProperty, StochasticExtremes, ()) { run_property("stochastic_extremes", *float_bits(), 0); }
RC_GTEST_PROP(RoundingProperty, SignSymmetric, ()) { run_property("sign_symmetric", *float_bits(), *rc::gen::arbitrary<std::uint32_t>()); }

// The regression corpus: every line re-runs on every test run.
TEST(RoundingProperty, RegressionCorpus) {
  std::ifstream in(FLASHCHECK_PRECISION_CORPUS);
  ASSERT_TRUE(in) << "cannot open " << FLASHCHECK_PRECISION_CORPUS;
  std::string line;
  int entries = 0;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto hash = line.find('#');
    std::istringstream fields(line.substr(0, hash));
    std::string prop, input_text, word_text;
    if (!(fields >> prop)) continue;  // blank or comment
    ASSERT_TRUE(fields >> input_text >> word_text) << "corpus line " << number << ": want <property> <input> <word>";
    ASSERT_TRUE(properties().count(prop)) << "corpus line " << number << ": unknown property " << prop;
    const std::uint64_t input = std::stoull(input_text, nullptr, 16);
    const auto word = static_cast<std::uint32_t>(std::stoul(word_text, nullptr, 16));
    const Failure f = properties().at(prop)(input, word);
    EXPECT_FALSE(f.has_value()) << "corpus line " << number << " (" << line << "): " << f.value_or("");
    ++entries;
  }
  RecordProperty("entries", entries);
}

}  // namespace
}  // namespace fc
