// The GPU draws the same Philox words and rounds to the same bits as the host, for every mode, on
// 2^22 inputs that mix ordinary values, subnormals, overflow and NaN/Inf; and FA4's emulated 2^x gives the
// host's bits (the twins cuda.fa4 / cpu.fa4.emulated rely on it). Label `gpu`.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "precision/exp2_emulated.hpp"

#include "precision/tests/device_rounding_kernels.hpp"

namespace fc {
namespace {

TEST(DeviceRounding, HostAndDeviceAgreeBitForBit) {
  if (const std::string why = testing::cuda_device_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  constexpr std::size_t n = std::size_t{1} << 22;
  std::mt19937_64 rng(11);
  std::vector<float> in(n);
  std::vector<double> in64(n);
  for (std::size_t i = 0; i < n; ++i) {
    in[i] = float_from_bits(static_cast<std::uint32_t>(rng()));  // every binade, NaN, Inf, subnormals
    in64[i] = i % 2 ? std::ldexp(static_cast<double>(rng() >> 11), -53 - static_cast<int>(rng() % 40))
                    : double_from_bits(rng());
  }
  const RandomStream stream{0xfeedULL, 4};
  for (Rounding mode : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
    const testing::DeviceRoundingResult d = testing::round_on_device(in, in64, mode, stream);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t w = stream.word(i);
      ASSERT_EQ(d.words[i], w) << "element " << i;
      ASSERT_EQ(d.bf16_from_float[i].bits, round_to<bf16>(in[i], mode, w).bits) << "element " << i << " " << name(mode);
      ASSERT_EQ(d.fp16_from_float[i].bits, round_to<fp16>(in[i], mode, w).bits) << "element " << i << " " << name(mode);
      ASSERT_EQ(d.fp16_from_double[i].bits, round_to<fp16>(in64[i], mode, w).bits) << "element " << i << " " << name(mode);
    }
  }
}

// The arguments the softmax passes (<= 0, or <= tau <= 30 with selective rescaling), the domain [-125, 126] and
// past both ends on a grid of 2^-16 (2^24 points over [-130, 126]), random bit patterns of [-256, 256], and NaN:
// the device's nvcc-compiled sequence (FADD, FFMA, shift-add) gives g++'s bits.
TEST(DeviceRounding, Exp2EmulatedGivesTheHostsBits) {
  if (const std::string why = testing::cuda_device_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  std::vector<float> in;
  for (int i = -130 * 65536; i < 126 * 65536; ++i) in.push_back(static_cast<float>(i) / 65536.0f);
  std::mt19937 rng(5);
  while (in.size() < (std::size_t{3} << 23)) {
    const float x = float_from_bits(rng());
    if (x >= -256.0f && x <= 256.0f) in.push_back(x);
  }
  const std::vector<float> d = testing::exp2_emulated_on_device(in);
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(bits_of(d[i]), bits_of(exp2_emulated(in[i]))) << "x = " << in[i];
  const std::vector<float> nan = testing::exp2_emulated_on_device({std::numeric_limits<float>::quiet_NaN()});
  EXPECT_TRUE(std::isnan(nan[0])) << "(NaN bits may differ between host and device; NaN must stay NaN)";
}

}  // namespace
}  // namespace fc
