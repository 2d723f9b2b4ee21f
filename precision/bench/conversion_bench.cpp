// Conversion throughput on this CPU, single thread: elements per second for each rounding path.
// A benchmark, not a test: it prints numbers and judges nothing. Each figure is the median of
// `repeats` timed passes over an array of normally distributed values (what activations look like),
// after one untimed warm-up pass.
//
// Usage: precision-bench [elements=4194304] [repeats=9]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "precision/convert.hpp"

namespace {

double median_seconds(int repeats, const std::function<void()>& pass) {
  pass();  // warm-up: page in the output, settle the clock
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (std::size_t{1} << 22);
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 9;
  if (n == 0 || repeats <= 0) {
    std::fprintf(stderr, "usage: precision-bench [elements>0] [repeats>0]\n");
    return 2;
  }
  std::mt19937_64 rng(12345);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> in64(n);
  std::vector<float> in32(n), out32(n);
  for (std::size_t i = 0; i < n; ++i) in32[i] = static_cast<float>(in64[i] = normal(rng));
  std::vector<fc::bf16> b(n);
  std::vector<fc::fp16> h(n);
  fc::round_array(std::span<const float>(in32), std::span<fc::bf16>(b), fc::Rounding::nearest_even);
  fc::round_array(std::span<const float>(in32), std::span<fc::fp16>(h), fc::Rounding::nearest_even);
  const fc::RandomStream stream{42, 1};

  struct Case {
    std::string name;
    std::function<void()> pass;
  };
  using fc::Rounding;
  const std::vector<Case> cases = {
      {"fp32 -> bf16 RN", [&] { fc::round_array(std::span<const float>(in32), std::span<fc::bf16>(b), Rounding::nearest_even); }},
      {"fp32 -> bf16 RZ", [&] { fc::round_array(std::span<const float>(in32), std::span<fc::bf16>(b), Rounding::toward_zero); }},
      {"fp32 -> bf16 SR (Philox words)", [&] { fc::round_array(std::span<const float>(in32), std::span<fc::bf16>(b), Rounding::stochastic, stream); }},
      {"fp32 -> fp16 RN", [&] { fc::round_array(std::span<const float>(in32), std::span<fc::fp16>(h), Rounding::nearest_even); }},
      {"fp32 -> fp16 RZ", [&] { fc::round_array(std::span<const float>(in32), std::span<fc::fp16>(h), Rounding::toward_zero); }},
      {"fp32 -> fp16 SR (Philox words)", [&] { fc::round_array(std::span<const float>(in32), std::span<fc::fp16>(h), Rounding::stochastic, stream); }},
      {"fp64 -> bf16 RN", [&] { fc::round_array(std::span<const double>(in64), std::span<fc::bf16>(b), Rounding::nearest_even); }},
      {"fp64 -> fp16 RN", [&] { fc::round_array(std::span<const double>(in64), std::span<fc::fp16>(h), Rounding::nearest_even); }},
      {"bf16 -> fp32", [&] { fc::widen_array(std::span<const fc::bf16>(b), std::span<float>(out32)); }},
      {"fp16 -> fp32", [&] { fc::widen_array(std::span<const fc::fp16>(h), std::span<float>(out32)); }},
  };
  std::printf("precision-bench: %zu elements, median of %d passes, one thread\n", n, repeats);
  std::printf("%-32s %14s %12s\n", "conversion", "M elements/s", "ns/element");
  for (const Case& c : cases) {
    const double s = median_seconds(repeats, c.pass);
    std::printf("%-32s %14.1f %12.3f\n", c.name.c_str(), static_cast<double>(n) / s / 1e6,
                s * 1e9 / static_cast<double>(n));
  }
  return 0;
}
