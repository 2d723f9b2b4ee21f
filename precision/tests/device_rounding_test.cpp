// The GPU draws the same Philox words and rounds to the same bits as the host, for every mode, on
// 2^22 inputs that mix ordinary values, subnormals, overflow and NaN/Inf. Label `gpu`.
#include <gtest/gtest.h>

#include <random>

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

}  // namespace
}  // namespace fc
