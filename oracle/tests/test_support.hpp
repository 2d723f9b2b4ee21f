// Helpers shared by the oracle's tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace fc::oracle::testing {

// n independent N(0, 1) values from a fixed-seed generator.
inline std::vector<double> normal(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> x(n);
  for (double& e : x) e = d(rng);
  return x;
}

// The message of the std::invalid_argument `call` throws, or "accepted" when it throws none.
template <class Call>
std::string rejection_message(Call&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return std::string(e.what());
  }
  return std::string("accepted");
}

}  // namespace fc::oracle::testing
