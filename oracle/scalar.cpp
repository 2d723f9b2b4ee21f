#include "oracle/scalar.hpp"

namespace fc::oracle {

std::string_view name(OracleType t) {
  switch (t) {
    case OracleType::fp64: return "fp64";
    case OracleType::quad: return "quad";
    case OracleType::mp50: return "mp50";
  }
  return "?";
}

double unit_roundoff(OracleType t) {
  switch (t) {
    case OracleType::fp64: return unit_roundoff<double>();
    case OracleType::quad: return unit_roundoff<quad>();
    case OracleType::mp50: return unit_roundoff<mp50>();
  }
  return 0;
}

}  // namespace fc::oracle
