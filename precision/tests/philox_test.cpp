#include "precision/philox.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

namespace fc {
namespace {

struct KnownAnswer {
  int rounds;
  Words4 counter;
  std::uint32_t key0, key1;
  Words4 expected;
};

// Random123's tests/kat_vectors, the philox4x32 lines (counter, key, expected).
const KnownAnswer kKnownAnswers[] = {
    {7, {{0, 0, 0, 0}}, 0, 0, {{0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}}},
    {7, {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
     {{0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}}},
    {7, {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
     {{0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}}},
    {10, {{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
    {10, {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
     {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
    {10, {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
     {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
};

TEST(Philox, MatchesRandom123KnownAnswers) {
  for (const KnownAnswer& k : kKnownAnswers) {
    const Words4 got = philox4x32(k.counter, k.key0, k.key1, k.rounds);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got.w[i], k.expected.w[i]) << "rounds " << k.rounds << " word " << i;
    }
  }
}

// The documented layout: element i of stream t under seed s (draw r) is lane i % 4 of Philox with
// counter (i / 4 low word, i / 4 high word, t, r) and key (s low word, s high word).
TEST(Philox, StreamWordsFollowTheDocumentedCounterLayout) {
  const std::uint64_t seed = 0x0123456789abcdefULL;
  const RandomStream s{seed, 5};
  for (std::uint64_t i : {0ULL, 3ULL, 6ULL, 0x912345678ULL * 4 + 2, (1ULL << 40) + 1}) {
    for (std::uint32_t draw : {0u, 9u}) {
      const std::uint64_t g = i / 4;
      const Words4 direct = philox4x32(Words4{{static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(g >> 32), 5u, draw}},
                                       0x89abcdefu, 0x01234567u);
      EXPECT_EQ(s.word(i, draw), direct.w[i % 4]) << "element " << i << " draw " << draw;
    }
  }
}

TEST(Philox, SeedStreamAndDrawEachChangeTheWords) {
  const RandomStream a{1, 1}, b{2, 1}, c{1, 2};
  int same_seed = 0, same_stream = 0, same_draw = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    same_seed += a.word(i) == b.word(i);
    same_stream += a.word(i) == c.word(i);
    same_draw += a.word(i) == a.word(i, 1);
  }
  // Independent 32-bit words coincide with probability 2^-32 each.
  EXPECT_LE(same_seed, 1);
  EXPECT_LE(same_stream, 1);
  EXPECT_LE(same_draw, 1);
}

// The low 8 bits and the high 8 bits of 2^20 consecutive words fall evenly into 256 buckets: a
// chi-square test (255 degrees of freedom) at a 1e-6 false-alarm rate. A broken generator (wrong
// round function, a counter that does not advance) fails it by orders of magnitude.
TEST(Philox, ConsecutiveWordsAreUniform) {
  const RandomStream s{42, 7};
  constexpr int kWords = 1 << 20;
  std::array<std::vector<int>, 2> counts{std::vector<int>(256), std::vector<int>(256)};
  for (std::uint64_t i = 0; i < kWords; ++i) {
    const std::uint32_t w = s.word(i);
    ++counts[0][w & 0xff];
    ++counts[1][w >> 24];
  }
  const double expected = kWords / 256.0;
  for (const auto& c : counts) {
    double chi2 = 0;
    for (int n : c) chi2 += (n - expected) * (n - expected) / expected;
    // chi-square(255): mean 255, sd sqrt(510) = 22.6; P(chi2 > 375) ~ 1e-6.
    EXPECT_LT(chi2, 375.0);
    EXPECT_GT(chi2, 150.0) << "suspiciously even: not random";
  }
}

}  // namespace
}  // namespace fc
