#include "oracle/finite_difference.hpp"

#include <boost/math/differentiation/finite_difference.hpp>

#include <limits>
#include <stdexcept>

namespace fc::oracle {

FiniteDifference finite_difference_derivative_at_zero(const std::function<mp50(const mp50&)>& f, double rate) {
  if (!(rate >= 1.0)) throw std::invalid_argument("finite difference: rate must be >= 1");
  const mp50 r(rate);
  const auto scaled = [&](const mp50& t) { return f(t / r); };
  mp50 error = 0;
  const mp50 d = boost::math::differentiation::finite_difference_derivative<decltype(scaled), mp50, 8>(scaled, mp50(0), &error);
  using std::pow;
  const double h = static_cast<double>(pow(mp50(551.25) * std::numeric_limits<mp50>::epsilon(), mp50(1) / 9));
  return {d * r, error * r, h / rate};
}

double finite_difference_rounding(const FiniteDifference& fd, double f_error) {
  return 2.0 * 109.375 / 105.0 * f_error / fd.step;
}

}  // namespace fc::oracle
