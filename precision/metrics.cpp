#include "precision/metrics.hpp"

#include <cstdio>
#include <limits>

namespace fc::detail {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

MetricAccumulator::MetricAccumulator(const MetricOptions& options) {
  if (!(options.relative_floor >= 0.0 && std::isfinite(options.relative_floor))) {
    throw std::invalid_argument("MetricOptions: relative_floor must be finite and >= 0");
  }
  m_.relative_floor = options.relative_floor;
  m_.ulp_format = options.ulp_format;
}

void MetricAccumulator::record_abs(std::size_t index, double abs_err) {
  if (abs_err > m_.max_abs) {
    m_.max_abs = abs_err;
    m_.max_abs_index = index;
  }
}

void MetricAccumulator::add_finite(std::size_t index, double diff, double relative, double ulps,
                                   long double actual_ld, long double reference_ld) {
  ++m_.finite_pairs;
  const double abs_err = std::fabs(diff);
  record_abs(index, abs_err);
  if (std::isinf(abs_err)) {
    infinite_difference_ = true;
  } else if (abs_err > 0.0) {
    // Scaled sum of squares (as in LAPACK's dnrm2): exact scaling by the running maximum avoids
    // overflow of huge errors and underflow of tiny ones.
    if (ssq_scale_ < abs_err) {
      const double ratio = ssq_scale_ / abs_err;
      ssq_ = 1.0 + ssq_ * ratio * ratio;
      ssq_scale_ = abs_err;
    } else {
      const double ratio = abs_err / ssq_scale_;
      ssq_ += ratio * ratio;
    }
  }
  sum_signed_ += diff;
  // A NaN ratio (only Inf / Inf can produce one) is an unbounded error.
  m_.max_rel = std::isnan(relative) ? kInf : std::fmax(m_.max_rel, relative);
  m_.max_ulp = std::isnan(ulps) ? kInf : std::fmax(m_.max_ulp, ulps);
  dot_ += actual_ld * reference_ld;
  norm_a_ += actual_ld * actual_ld;
  norm_r_ += reference_ld * reference_ld;
  reference_max_abs_ = std::fmax(reference_max_abs_, std::fabs(reference_ld));
}

void MetricAccumulator::add_nonfinite(std::size_t index, bool actual_finite, bool reference_finite,
                                      bool agree) {
  if (!actual_finite) ++m_.nonfinite_actual;
  if (!reference_finite) ++m_.nonfinite_reference;
  if (agree) return;  // an exact match: contributes zero error
  ++m_.nonfinite_mismatch;
  record_abs(index, kInf);
}

ErrorMetrics MetricAccumulator::finish(std::size_t count) const {
  ErrorMetrics m = m_;
  m.count = count;
  if (m.nonfinite_mismatch > 0) {
    m.max_abs = m.rms = m.max_rel = m.max_ulp = kInf;
    m.mean_signed = m.cosine = kNaN;
    return m;
  }
  if (m.finite_pairs == 0) return m;
  const auto n = static_cast<double>(m.finite_pairs);
  if (infinite_difference_) {
    m.rms = kInf;
    m.mean_signed = kNaN;
  } else {
    m.rms = ssq_scale_ * std::sqrt(ssq_ / n);
    m.mean_signed = static_cast<double>(sum_signed_ / static_cast<long double>(n));
  }
  m.reference_max_abs = static_cast<double>(reference_max_abs_);
  m.reference_rms = static_cast<double>(std::sqrt(norm_r_ / static_cast<long double>(n)));
  if (norm_a_ == 0.0L && norm_r_ == 0.0L) {
    m.cosine = 1.0;
  } else if (norm_a_ == 0.0L || norm_r_ == 0.0L) {
    m.cosine = 0.0;
  } else {
    m.cosine = static_cast<double>(dot_ / (std::sqrt(norm_a_) * std::sqrt(norm_r_)));
  }
  return m;
}

}  // namespace fc::detail

namespace fc {

std::string ErrorMetrics::to_string() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "n=%zu (finite pairs %zu) max_abs=%.6g (at %zu) rms=%.6g mean_signed=%.6g max_rel=%.6g (floor %.3g) "
                "max_ulp=%.6g (%s) cosine=%.17g |reference| max=%.6g rms=%.6g nonfinite actual/reference/mismatch=%zu/%zu/%zu",
                count, finite_pairs, max_abs, max_abs_index, rms, mean_signed, max_rel, relative_floor, max_ulp,
                std::string(name(ulp_format)).c_str(), cosine, reference_max_abs, reference_rms, nonfinite_actual,
                nonfinite_reference, nonfinite_mismatch);
  return buf;
}

}  // namespace fc
