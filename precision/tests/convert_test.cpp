#include "precision/convert.hpp"

#include "precision/tests/reference_rounding.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

namespace fc {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(Convert, ArraysEqualElementwiseRounding) {
  const auto in = random_floats(1001, 1);
  const RandomStream stream{9, 3};
  std::vector<bf16> b(in.size());
  std::vector<fp16> h(in.size());
  for (Rounding mode : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
    round_array(std::span<const float>(in), std::span<bf16>(b), mode, stream);
    round_array(std::span<const float>(in), std::span<fp16>(h), mode, stream);
    for (std::size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(b[i].bits, round_to<bf16>(in[i], mode, stream.word(i)).bits) << i;
      ASSERT_EQ(h[i].bits, round_to<fp16>(in[i], mode, stream.word(i)).bits) << i;
    }
  }
}

// The words of element i do not depend on how the tensor is cut into pieces: converting it in
// chunks that start at unaligned offsets gives the same bits as converting it whole.
TEST(Convert, StochasticRoundingIsIndependentOfChunking) {
  const auto in = random_floats(4099, 2);
  const RandomStream stream{123, 1};
  std::vector<bf16> whole(in.size()), pieces(in.size());
  round_array(std::span<const float>(in), std::span<bf16>(whole), Rounding::stochastic, stream);
  std::size_t start = 0;
  for (std::size_t len : {1u, 2u, 5u, 3u, 1000u, 7u, 3081u}) {
    round_array(std::span<const float>(in).subspan(start, len), std::span<bf16>(pieces).subspan(start, len),
                Rounding::stochastic, stream, start);
    start += len;
  }
  ASSERT_EQ(start, in.size());
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(whole[i].bits, pieces[i].bits) << i;
}

// Widening against the independent decoding of every bit pattern (reference_rounding.hpp).
TEST(Convert, WideningIsExact) {
  std::vector<fp16> h(0x10000);
  std::vector<bf16> b(0x10000);
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    h[i] = fp16{static_cast<std::uint16_t>(i)};
    b[i] = bf16{static_cast<std::uint16_t>(i)};
  }
  std::vector<float> wide_h(h.size()), wide_b(b.size());
  widen_array(std::span<const fp16>(h), std::span<float>(wide_h));
  widen_array(std::span<const bf16>(b), std::span<float>(wide_b));
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    const double want_h = testing::reference_fp16().value(static_cast<std::uint16_t>(i));
    const double want_b = testing::reference_bf16().value(static_cast<std::uint16_t>(i));
    if (std::isnan(want_h)) {
      ASSERT_TRUE(std::isnan(wide_h[i]));
    } else {
      ASSERT_EQ(static_cast<double>(wide_h[i]), want_h) << std::hex << i;
    }
    if (std::isnan(want_b)) {
      ASSERT_TRUE(std::isnan(wide_b[i]));
    } else {
      ASSERT_EQ(static_cast<double>(wide_b[i]), want_b) << std::hex << i;
    }
  }
}

TEST(Convert, MismatchedLengthsAreRejected) {
  std::vector<float> in(4);
  std::vector<bf16> out(3);
  EXPECT_THROW(round_array(std::span<const float>(in), std::span<bf16>(out), Rounding::nearest_even),
               std::invalid_argument);
}

}  // namespace
}  // namespace fc
