#include "oracle/ladder.hpp"

#include <algorithm>
#include <limits>

namespace fc::oracle {

OracleType oracle_type_for(const PrecisionPolicy& policy) {
  int widest = format_info(policy.accumulate).precision;
  for (Role r : {Role::o, Role::grad, Role::stats}) widest = std::max(widest, format_info(policy.format(r)).precision);
  for (OracleType t : {OracleType::fp64, OracleType::quad, OracleType::mp50}) {
    const int digits = t == OracleType::fp64   ? std::numeric_limits<double>::digits
                       : t == OracleType::quad ? std::numeric_limits<quad>::digits
                                               : std::numeric_limits<mp50>::digits;
    if (digits >= widest + kLadderMarginBits) return t;
  }
  return OracleType::mp50;  // unreachable for the formats precision/ defines (widest 53 bits)
}

}  // namespace fc::oracle
