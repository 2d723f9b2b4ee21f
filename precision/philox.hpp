// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
// a counter-based generator: the random words are a pure function of (counter, key), so any thread
// on any device can compute the bits of any element without shared state.
//
// RandomStream fixes how flashcheck uses it: the word of element i of tensor stream t under seed s
// comes from counter (i / 4 as 64 bits, t, draw) and key s, lane i % 4. The result does not depend
// on how elements are assigned to threads, which is what makes CPU and CUDA stochastic rounding
// bit-identical. Element indices are linear indices into the logical row-major tensor, not offsets
// into strided memory.
#pragma once

#include <cstdint>

#include "precision/host_device.hpp"

namespace fc {

struct Words4 {
  std::uint32_t w[4];
};

namespace detail {
FC_HD inline void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
#if defined(__CUDA_ARCH__)
  hi = __umulhi(a, b);
  lo = a * b;
#else
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
#endif
}
}  // namespace detail

// Philox4x32 with a given number of rounds (10 is the standard, crush-resistant choice).
FC_HD inline Words4 philox4x32(Words4 ctr, std::uint32_t key0, std::uint32_t key1, int rounds = 10) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {  // the key schedule bumps the key before every round but the first
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    std::uint32_t hi0, lo0, hi1, lo1;
    detail::mulhilo32(kMul0, ctr.w[0], hi0, lo0);
    detail::mulhilo32(kMul1, ctr.w[2], hi1, lo1);
    ctr = Words4{{hi1 ^ ctr.w[1] ^ key0, lo1, hi0 ^ ctr.w[3] ^ key1, lo0}};
  }
  return ctr;
}

// The random words of one tensor under one seed: one 32-bit word per element (per draw).
struct RandomStream {
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;  // which tensor (see policy.hpp's stream ids)

  // Words of elements 4g .. 4g+3: one Philox call, for code that handles four elements at once.
  FC_HD Words4 group(std::uint64_t g, std::uint32_t draw = 0) const {
    return philox4x32(Words4{{static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(g >> 32),
                              stream, draw}},
                      static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  }
  // Word of element i. `draw` selects an independent word for the same element (e.g. the second
  // uniform of a Box-Muller pair).
  FC_HD std::uint32_t word(std::uint64_t i, std::uint32_t draw = 0) const {
    return group(i >> 2, draw).w[i & 3];
  }
};

}  // namespace fc
