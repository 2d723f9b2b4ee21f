// The oracle's scalar types and their unit roundoffs.
//
// Multiprecision types use Boost.Multiprecision's expression-template-off variants, so every
// operation rounds once, in the order written, whatever the expression looks like.
#pragma once

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <boost/multiprecision/eigen.hpp>  // Eigen::NumTraits for the multiprecision types

#include <cmath>
#include <limits>
#include <string_view>

namespace fc::oracle {

// IEEE binary128 layout in software (113-bit significand). Chosen over Boost's float128
// (__float128): it needs no GNU extensions or libquadmath, and is only 1.6x slower here
// (63 vs 40 ns per multiply-add, measured in oracle/NOTES.md).
using quad = boost::multiprecision::cpp_bin_float_quad;
// 50 decimal digits (168-bit significand).
using mp50 = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<50>,
                                           boost::multiprecision::et_off>;

enum class OracleType { fp64, quad, mp50 };
std::string_view name(OracleType t);

// Unit roundoff u = 2^-p of a scalar type with a p-bit significand.
template <class T>
double unit_roundoff() {
  return std::ldexp(1.0, -std::numeric_limits<T>::digits);
}
double unit_roundoff(OracleType t);

template <class T>
constexpr OracleType oracle_type_of() {
  if constexpr (std::is_same_v<T, double>) {
    return OracleType::fp64;
  } else if constexpr (std::is_same_v<T, quad>) {
    return OracleType::quad;
  } else {
    static_assert(std::is_same_v<T, mp50>, "oracle scalar types: double, quad, mp50");
    return OracleType::mp50;
  }
}

// Conversions every oracle type supports (ADL finds the multiprecision overloads).
template <class T>
double to_double(const T& x) {
  return static_cast<double>(x);
}
template <class T>
bool is_finite(const T& x) {
  using std::isfinite;
  return isfinite(x);
}

}  // namespace fc::oracle
