// Rounding an intermediate to the storage format, as tensor-core kernels do before a matrix
// product (P before P V, dS before dS K): the operand the hardware sees. Round to nearest even, the
// conversion instructions' mode. An identity when the format is as wide as the accumulator.
#pragma once

#include <cstddef>

#include "precision/convert.hpp"
#include "precision/format.hpp"
#include "precision/half.hpp"
#include "precision/philox.hpp"
#include "precision/rounding.hpp"

namespace fc::kernels::cpu {

template <class A>
inline void round_to_storage(A* x, std::size_t n, Format f) {
  if (f == Format::fp64 || (f == Format::fp32 && sizeof(A) <= sizeof(float))) return;  // nothing to round
  for (std::size_t i = 0; i < n; ++i) x[i] = round_to_format(x[i], f);
}

// The same for an intermediate one kernel stores and the next reads back (AttnRes's dO between its
// phase-2 and phase-1 backward kernels): rounded as outputs are, per the policy's mode, the random word
// of element i from `stream`.
template <class A>
inline void round_to_storage(A* x, std::size_t n, Format f, Rounding mode, RandomStream stream) {
  if (mode == Rounding::nearest_even) return round_to_storage(x, n, f);
  const auto word = [&](std::size_t i) { return mode == Rounding::stochastic ? stream.word(i) : 0u; };
  switch (f) {
    case Format::bf16:
      for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<A>(to_float(round_to<bf16>(x[i], mode, word(i))));
      return;
    case Format::fp16:
      for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<A>(to_float(round_to<fp16>(x[i], mode, word(i))));
      return;
    case Format::e4m3:
      for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<A>(to_float(round_to_e4m3(x[i], mode, word(i))));
      return;
    case Format::fp32:
      if constexpr (sizeof(A) > sizeof(float)) {
        for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<A>(round_to<float>(static_cast<double>(x[i]), mode, word(i)));
      }
      return;
    case Format::fp64: return;
  }
}

}  // namespace fc::kernels::cpu
