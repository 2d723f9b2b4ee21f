// Stochastic rounding with Philox words, statistically: the result is always a neighbour, rounds up
// with probability (x - lo) / (hi - lo), and is unbiased. Every bound is 5 standard deviations of the
// binomial count (a false alarm rate of about 6e-7 per check), and a negative control (RZ) shows the
// bias check has the power to fail.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "precision/philox.hpp"
#include "precision/rounding.hpp"
#include "precision/tests/reference_rounding.hpp"

namespace fc {
namespace {

// x values spread over the places where SR is delicate: fractions of a place from 0.001 to 0.999,
// next to powers of two (where the spacing changes), the format's subnormals (including below the
// smallest one), and negative values.
template <class T>
std::vector<double> spread() {
  const FormatInfo info = format_info(format_of_v<T>);
  const double sub = info.min_subnormal();
  const double place = std::ldexp(1.0, 1 - info.precision);  // spacing in [1, 2)
  std::vector<double> xs;
  for (double p : {0.001, 0.1, 0.25, 0.5, 0.7, 0.999}) xs.push_back(1.0 + p * place);
  for (int k : {-3, 0, 5, info.emax}) {
    const double two_k = std::ldexp(1.0, k);
    xs.push_back(two_k - 0.3 * 0.5 * ulp(format_of_v<T>, two_k));  // just below 2^k: half spacing
    xs.push_back(two_k + 0.6 * ulp(format_of_v<T>, two_k));
  }
  for (double m : {0.2, 0.5, 3.4, 77.9}) xs.push_back(m * sub);
  xs.push_back(info.min_normal() - 0.45 * sub);
  xs.push_back(-(1.0 + 0.37 * place));
  xs.push_back(-5.3 * sub);
  return xs;
}

template <class T, class X>
void check_probabilities(std::uint32_t stream_base) {
  const auto& ref = testing::reference_for<T>();
  constexpr int kDraws = 1'000'000;
  std::uint32_t stream_id = stream_base;
  for (double target : spread<T>()) {
    const X x = static_cast<X>(target);  // the value actually rounded
    const auto b = ref.bracket(std::fabs(static_cast<double>(x)));
    ASSERT_FALSE(b.exact) << "spread point " << target << " is representable";
    const double p = (std::fabs(static_cast<double>(x)) - b.lo) / (b.hi - b.lo);
    const std::uint16_t sign = std::signbit(static_cast<double>(x)) ? ref.sign_bit() : 0;
    const RandomStream stream{2024, stream_id++};
    long ups = 0;
    for (int i = 0; i < kDraws; ++i) {
      const std::uint16_t r = round_to<T>(x, Rounding::stochastic, stream.word(static_cast<std::uint64_t>(i))).bits;
      if (r == (b.hi_bits | sign)) {
        ++ups;
      } else {
        ASSERT_EQ(r, b.lo_bits | sign) << std::hexfloat << "x = " << static_cast<double>(x) << " gave a non-neighbour";
      }
    }
    const double mean = kDraws * p, sigma = std::sqrt(kDraws * p * (1 - p));
    EXPECT_LE(std::fabs(static_cast<double>(ups) - mean), 5 * sigma)
        << std::hexfloat << "x = " << static_cast<double>(x) << std::defaultfloat << ": P(up) = " << p
        << ", observed " << static_cast<double>(ups) / kDraws;
  }
}

TEST(StochasticRounding, Bf16FromFloatRoundsUpWithTheRightProbability) { check_probabilities<bf16, float>(100); }
TEST(StochasticRounding, Fp16FromFloatRoundsUpWithTheRightProbability) { check_probabilities<fp16, float>(200); }
TEST(StochasticRounding, Bf16FromDoubleRoundsUpWithTheRightProbability) { check_probabilities<bf16, double>(300); }
TEST(StochasticRounding, Fp16FromDoubleRoundsUpWithTheRightProbability) { check_probabilities<fp16, double>(400); }

// Mean of SR(x) - x over 10^7 draws, in units of the spacing, for x drawn uniformly from floats in
// [1, 2) (each draw a fresh x and a fresh word). Unbiased SR gives mean 0 with standard deviation
// sqrt(sum p_i (1 - p_i)) / n <= 0.5 / sqrt(n) = 1.6e-4 places. RZ, the control, is biased by -1/2.
template <class T>
double mean_error_in_places(Rounding mode, double& sigma) {
  constexpr int kDraws = 10'000'000;
  const double place = std::ldexp(1.0, 1 - format_info(format_of_v<T>).precision);
  const RandomStream xs{77, 1000}, words{77, 1001};
  long double sum = 0, var = 0;
  for (std::uint64_t i = 0; i < kDraws; ++i) {
    const float x = float_from_bits(0x3f800000u | (xs.word(i) >> 9));  // uniform float in [1, 2)
    const double err = (to_double(round_to<T>(x, mode, words.word(i))) - x) / place;
    sum += err;
    const double p = (x - 1.0) / place - std::floor((x - 1.0) / place);  // fraction of a place
    var += p * (1 - p);
  }
  sigma = static_cast<double>(std::sqrt(var) / kDraws);
  return static_cast<double>(sum / kDraws);
}

template <class T>
void check_unbiased() {
  double sigma = 0;
  const double sr = mean_error_in_places<T>(Rounding::stochastic, sigma);
  EXPECT_LE(std::fabs(sr), 5 * sigma) << "SR mean error " << sr << " places, sigma " << sigma;
  double unused = 0;
  const double rz = mean_error_in_places<T>(Rounding::toward_zero, unused);
  EXPECT_GT(std::fabs(rz), 5 * sigma) << "negative control: RZ's bias (" << rz << ") must be detected";
  EXPECT_NEAR(rz, -0.5, 0.01);
}

TEST(StochasticRounding, Bf16IsUnbiasedOverTenMillionDraws) { check_unbiased<bf16>(); }
TEST(StochasticRounding, Fp16IsUnbiasedOverTenMillionDraws) { check_unbiased<fp16>(); }

// A single x, 10^7 draws: the mean of SR(x) equals x within 5 sigma (sigma = spacing sqrt(p(1-p)/n)).
TEST(StochasticRounding, MeanOfOneValueIsTheValue) {
  constexpr int kDraws = 10'000'000;
  for (double x : {1.0 / 3.0, 1e-6, 3e-8}) {  // normal, and fp16 subnormals
    const auto b = testing::reference_fp16().bracket(x);
    const double p = (x - b.lo) / (b.hi - b.lo);
    const RandomStream stream{5, 2000};
    long double sum = 0;
    for (std::uint64_t i = 0; i < kDraws; ++i) sum += to_double(round_to<fp16>(x, Rounding::stochastic, stream.word(i)));
    const double mean = static_cast<double>(sum / kDraws);
    const double sigma = (b.hi - b.lo) * std::sqrt(p * (1 - p) / kDraws);
    EXPECT_LE(std::fabs(mean - x), 5 * sigma) << x;
  }
}

TEST(StochasticRounding, SpecialValuesAndOverflow) {
  const RandomStream stream{1, 3000};
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const std::uint32_t w = stream.word(i);
    EXPECT_TRUE(is_nan(round_to<bf16>(std::numeric_limits<float>::quiet_NaN(), Rounding::stochastic, w)));
    EXPECT_TRUE(is_nan(round_to<fp16>(float_from_bits(0x7f800001u), Rounding::stochastic, w)));
    EXPECT_EQ(round_to<fp16>(-INFINITY, Rounding::stochastic, w).bits, 0xfc00);
    EXPECT_EQ(round_to<bf16>(INFINITY, Rounding::stochastic, w).bits, 0x7f80);
    EXPECT_EQ(round_to<fp16>(65536.0f, Rounding::stochastic, w).bits, 0x7c00) << "beyond 2^(emax+1): always Inf";
    EXPECT_EQ(round_to<fp16>(1e30, Rounding::stochastic, w).bits, 0x7c00);
    EXPECT_EQ(round_to<fp16>(65504.0f, Rounding::stochastic, w).bits, 0x7bff) << "max finite is exact";
  }
  // Between max finite and 2^(emax+1) the upper neighbour is Inf: P(Inf) = (x - max) / (2^(emax+1) - max).
  struct Case { double x, p_inf; bool is_bf16; };
  for (const Case c : {Case{65512.0, 0.25, false}, Case{0x1.ffp127, 0.5, true}}) {
    constexpr int kDraws = 1'000'000;
    long infs = 0;
    for (std::uint64_t i = 0; i < kDraws; ++i) {
      const std::uint32_t w = stream.word(i + 5000);
      const bool inf = c.is_bf16 ? !is_finite(round_to<bf16>(static_cast<float>(c.x), Rounding::stochastic, w))
                                 : !is_finite(round_to<fp16>(static_cast<float>(c.x), Rounding::stochastic, w));
      infs += inf;
    }
    const double sigma = std::sqrt(kDraws * c.p_inf * (1 - c.p_inf));
    EXPECT_LE(std::fabs(static_cast<double>(infs) - kDraws * c.p_inf), 5 * sigma) << c.x;
  }
}

}  // namespace
}  // namespace fc
