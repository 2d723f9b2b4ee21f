// Error metrics of a result against a reference, over arrays of double, float, bf16, fp16 or a
// multiprecision type (the oracle's quad or 50-digit numbers).
//
// Honesty rules:
// - A non-finite value is never skipped silently. Where actual and reference disagree in finiteness
//   (NaN against a number, Inf against a number, +Inf against -Inf) the pair's error is +Inf, so
//   max_abs, rms, max_rel and max_ulp are +Inf and mean_signed and cosine are NaN; the counts say why.
//   Pairs that agree (both NaN, or the same infinity) are exact and left out of rms and mean_signed,
//   which average over the finite pairs (finite_pairs of them).
// - The difference, the relative error and the ULP distance are taken in the wider of the two types
//   (a multiprecision reference keeps its digits and its exponent), then rounded to double: each
//   metric carries a relative error of about 2^-53, far below anything a 16- or 32-bit subject can
//   show. A difference too large for double is +Inf, never NaN.
// - Relative error divides by max(|reference|, relative_floor), and ULP distances count in the
//   spacing at that same max: the floor is explicit (finite, >= 0) because near zero any relative
//   error is meaningless (and a zero reference's ULP is the format's smallest subnormal), and a
//   report must say which floor it used.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <span>
#include <stdexcept>
#include <string>

#include "precision/format.hpp"
#include "precision/half.hpp"

namespace fc {

struct MetricOptions {
  Format ulp_format = Format::fp32;  // ULP distances count in this format (the subject's storage)
  double relative_floor = 0.0;       // denominator floor of the relative error
};

struct ErrorMetrics {
  std::size_t count = 0;
  std::size_t finite_pairs = 0;  // pairs where both values are finite (rms and mean_signed average these)
  double max_abs = 0.0;
  std::size_t max_abs_index = 0;  // where max_abs occurs (first such index)
  double rms = 0.0;               // sqrt(mean(diff^2)) over the finite pairs
  double mean_signed = 0.0;       // mean(actual - reference) over the finite pairs: the bias
  double max_rel = 0.0;           // max |diff| / max(|reference|, relative_floor)
  double relative_floor = 0.0;
  double max_ulp = 0.0;  // max |diff| / ulp_format-spacing at max(|reference|, relative_floor) (see fc::ulp)
  Format ulp_format = Format::fp32;
  double cosine = 1.0;  // <a, r> / (|a| |r|); 1 when both are zero, 0 when exactly one is
  // The reference's own size over the finite pairs, so that errors can be stated normwise
  // (max_abs / reference_max_abs, rms / reference_rms) and compared across shapes and inputs.
  double reference_max_abs = 0.0;
  double reference_rms = 0.0;
  std::size_t nonfinite_actual = 0;
  std::size_t nonfinite_reference = 0;
  std::size_t nonfinite_mismatch = 0;  // pairs whose finiteness disagrees

  std::string to_string() const;
};

namespace detail {

// Non-template aggregation of per-element values.
class MetricAccumulator {
 public:
  explicit MetricAccumulator(const MetricOptions& options);
  // A pair where both values are finite: diff = actual - reference, and its relative error and ULP
  // distance, each already computed in the wide type and rounded to double.
  void add_finite(std::size_t index, double diff, double relative, double ulps, long double actual_ld,
                  long double reference_ld);
  // A pair where at least one value is not finite.
  void add_nonfinite(std::size_t index, bool actual_finite, bool reference_finite, bool agree);
  ErrorMetrics finish(std::size_t count) const;

 private:
  void record_abs(std::size_t index, double abs_err);
  ErrorMetrics m_;
  double ssq_scale_ = 0.0, ssq_ = 1.0;  // sum of squares = scale^2 * ssq, free of over/underflow
  bool infinite_difference_ = false;    // a finite pair whose difference overflowed double
  long double sum_signed_ = 0.0L, dot_ = 0.0L, norm_a_ = 0.0L, norm_r_ = 0.0L, reference_max_abs_ = 0.0L;
};

// Storage types widen exactly to double; multiprecision types stay as they are.
inline double widen(bf16 x) { return to_double(x); }
inline double widen(fp16 x) { return to_double(x); }
inline double widen(float x) { return x; }
inline double widen(double x) { return x; }
template <class T>
const T& widen(const T& x) {
  return x;
}

template <class T>
bool finite_value(const T& x) {
  using std::isfinite;
  return isfinite(x);
}
template <class T>
bool nan_value(const T& x) {
  using std::isnan;
  return isnan(x);
}
template <class T>
bool negative_value(const T& x) {
  using std::signbit;
  return signbit(x);
}

// |diff| / max(|r|, floor) and |diff| / ulp_format(max(|r|, floor)), in the type W of the difference.
template <class W>
void wide_ratios(const W& diff, const W& r, const MetricOptions& options, double& relative, double& ulps) {
  using std::abs;
  using std::frexp;
  using std::ldexp;
  const W abs_diff = abs(diff);
  const W abs_r = abs(r);
  const W floor(options.relative_floor);
  const W denominator = abs_r > floor ? abs_r : floor;
  relative = denominator > 0 ? static_cast<double>(abs_diff / denominator)
                             : (abs_diff > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  const FormatInfo f = format_info(options.ulp_format);
  int e = f.emin + 1;  // so that floor(log2 |r|) = e - 1 is the subnormal binade for r = 0
  if (denominator > 0) frexp(denominator, &e);
  const W spacing = ldexp(W(1), std::max(e - 1, f.emin) - f.precision + 1);
  ulps = static_cast<double>(abs_diff / spacing);
}

}  // namespace detail

template <class A, class R>
ErrorMetrics compare(std::span<const A> actual, std::span<const R> reference,
                     const MetricOptions& options) {
  if (actual.size() != reference.size()) {
    throw std::invalid_argument("compare: actual has " + std::to_string(actual.size()) +
                                " elements, reference has " + std::to_string(reference.size()));
  }
  detail::MetricAccumulator acc(options);
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const auto a = detail::widen(actual[i]);
    const auto r = detail::widen(reference[i]);
    const bool fa = detail::finite_value(a), fr = detail::finite_value(r);
    if (fa && fr) {
      const auto diff = a - r;
      using W = std::remove_cv_t<decltype(diff)>;
      double relative = 0, ulps = 0;
      detail::wide_ratios<W>(diff, W(r), options, relative, ulps);
      acc.add_finite(i, static_cast<double>(diff), relative, ulps, static_cast<long double>(a), static_cast<long double>(r));
    } else {
      const bool both_nan = detail::nan_value(a) && detail::nan_value(r);
      const bool same_inf = !fa && !fr && !detail::nan_value(a) && !detail::nan_value(r) &&
                            detail::negative_value(a) == detail::negative_value(r);
      acc.add_nonfinite(i, fa, fr, both_nan || same_inf);
    }
  }
  return acc.finish(actual.size());
}

// Convenience for containers (std::vector and the like).
template <class CA, class CR>
ErrorMetrics compare_arrays(const CA& actual, const CR& reference, const MetricOptions& options) {
  using A = typename CA::value_type;
  using R = typename CR::value_type;
  return compare(std::span<const A>(actual), std::span<const R>(reference), options);
}

}  // namespace fc
