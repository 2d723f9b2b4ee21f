// Error metrics of a result against a reference, over arrays of double, float, bf16, fp16 or a
// multiprecision type (the oracle's quad or 50-digit numbers).
//
// Honesty rules:
// - A non-finite value is never skipped silently. Where actual and reference disagree in finiteness
//   (NaN against a number, Inf against a number, +Inf against -Inf) the pair's error is +Inf, so
//   max_abs, rms, max_rel and max_ulp are +Inf and mean_signed and cosine are NaN; the counts say why.
//   Pairs that agree (both NaN, or the same infinity) count as exact.
// - The difference is taken in the wider of the two types (a multiprecision reference keeps its
//   digits), then rounded to double for aggregation: each metric carries a relative error of about
//   2^-53, far below anything a 16- or 32-bit subject can show.
// - Relative error divides by max(|reference|, relative_floor): the floor is explicit because near
//   zero any relative error is meaningless, and a report must say which floor it used.
#pragma once

#include <cmath>
#include <cstddef>
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
  double max_abs = 0.0;
  std::size_t max_abs_index = 0;  // where max_abs occurs (first such index)
  double rms = 0.0;               // sqrt(mean(diff^2))
  double mean_signed = 0.0;       // mean(actual - reference): the bias
  double max_rel = 0.0;           // max |diff| / max(|reference|, relative_floor)
  double relative_floor = 0.0;
  double max_ulp = 0.0;  // max |diff| / ulp_format-spacing at the reference (see fc::ulp)
  Format ulp_format = Format::fp32;
  double cosine = 1.0;  // <a, r> / (|a| |r|); 1 when both are zero, 0 when exactly one is
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
  // A pair where both values are finite: diff = actual - reference, rounded to double.
  void add_finite(std::size_t index, double diff, double reference, long double actual_ld,
                  long double reference_ld);
  // A pair where at least one value is not finite.
  void add_nonfinite(std::size_t index, bool actual_finite, bool reference_finite, bool agree);
  ErrorMetrics finish(std::size_t count) const;

 private:
  void record_abs(std::size_t index, double abs_err);
  MetricOptions options_;
  ErrorMetrics m_;
  double ssq_scale_ = 0.0, ssq_ = 1.0;  // sum of squares = scale^2 * ssq, free of over/underflow
  long double sum_signed_ = 0.0L, dot_ = 0.0L, norm_a_ = 0.0L, norm_r_ = 0.0L;
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
      acc.add_finite(i, static_cast<double>(a - r), static_cast<double>(r), static_cast<long double>(a),
                     static_cast<long double>(r));
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
