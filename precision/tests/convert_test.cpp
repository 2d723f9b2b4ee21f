#include "precision/convert.hpp"

#include <gtest/gtest.h>

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

TEST(Convert, WideningIsExact) {
  const auto in = random_floats(500, 3);
  std::vector<fp16> h(in.size());
  std::vector<float> back(in.size());
  round_array(std::span<const float>(in), std::span<fp16>(h), Rounding::nearest_even);
  widen_array(std::span<const fp16>(h), std::span<float>(back));
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(back[i], to_float(h[i]));
}

TEST(Convert, MismatchedLengthsAreRejected) {
  std::vector<float> in(4);
  std::vector<bf16> out(3);
  EXPECT_THROW(round_array(std::span<const float>(in), std::span<bf16>(out), Rounding::nearest_even),
               std::invalid_argument);
}

}  // namespace
}  // namespace fc
