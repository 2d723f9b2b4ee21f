// Every one of the 2^32 floats, rounded to bf16 and fp16 (RN and RZ) and checked against the
// independent reference; the fast paths checked against the generic engine (bf16 in all three modes,
// fp16 RN). Label `long`: a few minutes on two cores, so it is not part of the default test command.
// Run it with: ctest --test-dir build -L long --output-on-failure
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "precision/philox.hpp"
#include "precision/rounding.hpp"
#include "precision/tests/reference_rounding.hpp"

namespace fc {
namespace {

constexpr std::uint64_t kPass = ~std::uint64_t{0};

// Checks the floats with bit patterns [begin, end); returns the first failing pattern, or kPass.
std::uint64_t check_range(std::uint64_t begin, std::uint64_t end) {
  const auto& rb = testing::reference_bf16();
  const auto& rh = testing::reference_fp16();
  const RandomStream words{31, 1};
  for (std::uint64_t bits = begin; bits < end; ++bits) {
    const auto b = static_cast<std::uint32_t>(bits);
    const float x = float_from_bits(b);
    const std::uint32_t w = words.word(bits);
    // The fast paths equal the generic engine.
    for (Rounding mode : {Rounding::nearest_even, Rounding::toward_zero, Rounding::stochastic}) {
      if (round_to<bf16>(x, mode, w).bits != detail::round_encoding<bf16, float>(b, mode, w)) return bits;
    }
    if (round_to<fp16>(x, Rounding::nearest_even).bits != detail::round_encoding<fp16, float>(b, Rounding::nearest_even, 0)) {
      return bits;
    }
    if (std::isnan(x)) {
      if (!is_nan(round_to<bf16>(x, Rounding::nearest_even)) || !is_nan(round_to<fp16>(x, Rounding::nearest_even)) ||
          !is_nan(round_to<bf16>(x, Rounding::toward_zero)) || !is_nan(round_to<fp16>(x, Rounding::toward_zero))) {
        return bits;
      }
      continue;
    }
    std::uint16_t want_bn, want_bz, want_hn, want_hz;
    if (std::isinf(x)) {
      const std::uint16_t s = x < 0 ? 0x8000 : 0;
      want_bn = want_bz = static_cast<std::uint16_t>(rb.inf_bits() | s);
      want_hn = want_hz = static_cast<std::uint16_t>(rh.inf_bits() | s);
    } else {
      want_bn = rb.nearest_even(x);
      want_bz = rb.toward_zero(x);
      want_hn = rh.nearest_even(x);
      want_hz = rh.toward_zero(x);
    }
    if (round_to<bf16>(x, Rounding::nearest_even).bits != want_bn || round_to<bf16>(x, Rounding::toward_zero).bits != want_bz ||
        round_to<fp16>(x, Rounding::nearest_even).bits != want_hn || round_to<fp16>(x, Rounding::toward_zero).bits != want_hz) {
      return bits;
    }
  }
  return kPass;
}

TEST(RoundingExhaustive, AllFloatsToBf16AndFp16) {
  const auto start = std::chrono::steady_clock::now();
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  constexpr std::uint64_t kAll = std::uint64_t{1} << 32;
  constexpr std::uint64_t kChunk = std::uint64_t{1} << 24;
  std::atomic<std::uint64_t> next{0};
  std::vector<std::uint64_t> first_failure(threads, kPass);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (std::uint64_t c; (c = next.fetch_add(kChunk)) < kAll;) {
        const std::uint64_t fail = check_range(c, c + kChunk);
        if (fail < first_failure[t]) first_failure[t] = fail;
      }
    });
  }
  for (auto& th : pool) th.join();
  for (unsigned t = 0; t < threads; ++t) {
    EXPECT_EQ(first_failure[t], kPass) << "first failing float bit pattern: 0x" << std::hex << first_failure[t];
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("checked all 2^32 floats on %u threads in %.1f s\n", threads, seconds);
  RecordProperty("seconds", static_cast<int>(seconds));
}

}  // namespace
}  // namespace fc
