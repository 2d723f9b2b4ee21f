// Every one of the 65,536 bit patterns of bf16 and fp16: exact decoding, and a round trip through
// float and double in every rounding mode.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "precision/half.hpp"
#include "precision/rounding.hpp"
#include "precision/tests/cuda_host_reference.hpp"
#include "precision/tests/reference_rounding.hpp"

namespace fc {
namespace {

template <class T>
void check_all_patterns(const testing::ReferenceFormat& ref) {
  std::mt19937 rng(7);
  const std::uint16_t quiet_bit = static_cast<std::uint16_t>(1u << (Encoding<T>::mant_bits - 1));
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const T x{static_cast<std::uint16_t>(bits)};
    const float f = to_float(x);
    const double expected = ref.value(static_cast<std::uint16_t>(bits));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      ASSERT_TRUE(is_nan(x));
      // NaN keeps its sign and payload; rounding back forces the quiet bit and changes nothing else.
      ASSERT_EQ(std::signbit(f), (bits & 0x8000u) != 0) << std::hex << bits;
      for (Rounding mode : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
        ASSERT_EQ(round_to<T>(f, mode, rng()).bits, bits | quiet_bit) << std::hex << bits;
        ASSERT_EQ(round_to<T>(to_double(x), mode, rng()).bits, bits | quiet_bit) << std::hex << bits;
      }
      continue;
    }
    ASSERT_FALSE(is_nan(x)) << std::hex << bits;
    ASSERT_EQ(is_finite(x), std::isfinite(expected)) << std::hex << bits;
    // Exact decoding, -0 included.
    ASSERT_EQ(f, expected) << std::hex << bits;
    ASSERT_EQ(std::signbit(f), std::signbit(expected)) << std::hex << bits;
    ASSERT_EQ(to_double(x), expected) << std::hex << bits;
    // A representable value survives every rounding mode and any random word unchanged.
    for (Rounding mode : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
      const std::uint32_t word = rng();
      ASSERT_EQ(round_to<T>(f, mode, word).bits, bits) << std::hex << bits << " mode " << name(mode);
      ASSERT_EQ(round_to<T>(static_cast<double>(f), mode, word).bits, bits) << std::hex << bits;
    }
  }
}

TEST(Half, Bf16AllBitPatternsDecodeExactlyAndRoundTrip) { check_all_patterns<bf16>(testing::reference_bf16()); }
TEST(Half, Fp16AllBitPatternsDecodeExactlyAndRoundTrip) { check_all_patterns<fp16>(testing::reference_fp16()); }

#if FLASHCHECK_HAVE_CUDA_HEADERS
TEST(Half, DecodingAgreesWithCudaHostConversions) {
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const float ours_b = to_float(bf16{b}), cuda_b = testing::cuda_host::bf16_to_float(b);
    const float ours_h = to_float(fp16{b}), cuda_h = testing::cuda_host::fp16_to_float(b);
    if (std::isnan(cuda_b)) {
      ASSERT_TRUE(std::isnan(ours_b)) << std::hex << bits;
    } else {
      ASSERT_EQ(bits_of(ours_b), bits_of(cuda_b)) << std::hex << bits;
    }
    if (std::isnan(cuda_h)) {
      ASSERT_TRUE(std::isnan(ours_h)) << std::hex << bits;
    } else {
      ASSERT_EQ(bits_of(ours_h), bits_of(cuda_h)) << std::hex << bits;
    }
  }
}
#endif

TEST(Half, SpecialValuesHaveTheirIeeeEncodings) {
  EXPECT_EQ(round_to<bf16>(INFINITY, Rounding::nearest_even).bits, 0x7f80);
  EXPECT_EQ(round_to<bf16>(-INFINITY, Rounding::nearest_even).bits, 0xff80);
  EXPECT_EQ(round_to<fp16>(INFINITY, Rounding::nearest_even).bits, 0x7c00);
  EXPECT_EQ(round_to<fp16>(-0.0f, Rounding::nearest_even).bits, 0x8000);
  EXPECT_EQ(round_to<bf16>(-0.0, Rounding::toward_zero).bits, 0x8000);
  EXPECT_EQ(round_to<fp16>(1.0f, Rounding::nearest_even).bits, 0x3c00);
  EXPECT_EQ(round_to<bf16>(1.0f, Rounding::nearest_even).bits, 0x3f80);
  EXPECT_EQ(round_to<fp16>(65504.0f, Rounding::nearest_even).bits, 0x7bff);
  EXPECT_EQ(round_to<fp16>(0x1p-24f, Rounding::nearest_even).bits, 0x0001);
  EXPECT_EQ(round_to<bf16>(0x1p-133f, Rounding::nearest_even).bits, 0x0001);
  // A signalling NaN whose payload lies entirely in the discarded bits must not become Inf.
  const float snan_low = float_from_bits(0x7f800001u);
  EXPECT_EQ(round_to<bf16>(snan_low, Rounding::nearest_even).bits, 0x7fc0);
  EXPECT_EQ(round_to<fp16>(snan_low, Rounding::toward_zero).bits, 0x7e00);
  EXPECT_EQ(round_to<fp16>(float_from_bits(0xffc12345u), Rounding::nearest_even).bits, 0xfe09);
}

}  // namespace
}  // namespace fc
