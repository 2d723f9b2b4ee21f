// High-precision finite differences: the derivative at 0 of a scalar function of one mp50
// variable, by Boost.Math's order-8 central stencil, with the stencil's own a-posteriori error
// estimate (|f^(9)| h^8 / 630 from a ninth-difference estimate, plus 7 |f| eps / h of rounding).
//
// The step h = (551.25 eps)^(1/9) suits functions whose derivatives are of unit scale. Callers whose
// function varies faster (an attention logit moving at rate r per unit t) pass `rate`: the function
// is evaluated at t / rate, so the effective step is h / rate, and the derivative scaled back.
#pragma once

#include <functional>

#include "oracle/scalar.hpp"

namespace fc::oracle {

struct FiniteDifference {
  mp50 derivative;
  mp50 error_estimate;  // Boost's estimate, scaled back like the derivative
  double step;          // the effective step h / rate
};

// The rounding part of the result's error when each evaluation of f carries an absolute error of
// at most f_error: the stencil (3/8 y4 + 4 y3 + 21 y2 + 84 y1) / (105 h) over differences y_i of two
// evaluations amplifies it by 2 * 109.375 / 105 / step.
double finite_difference_rounding(const FiniteDifference& fd, double f_error);

FiniteDifference finite_difference_derivative_at_zero(const std::function<mp50(const mp50&)>& f, double rate = 1.0);

}  // namespace fc::oracle
