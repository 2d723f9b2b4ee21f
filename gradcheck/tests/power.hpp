// The harness's power against a broken subject: generated cases, each checked under every op, until
// the first failure (its index is the cases-to-detection).
#pragma once

#include <cstdint>
#include <string>

#include "gradcheck/generators.hpp"
#include "gradcheck/tests/broken_subjects.hpp"

namespace fc::gradcheck::testing {

struct Power {
  bool detected = false;
  int cases = 0;        // cases run: the detecting case's 1-based index, or all of them
  std::string caught_by;  // which output or property failed first
};

Power measure_power(kernels::Subject& subject, const PrecisionPolicy& policy, int max_cases, std::uint64_t seed,
                    const GeneratorLimits& limits);

}  // namespace fc::gradcheck::testing
