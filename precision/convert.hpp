// Whole-array conversions between storage formats: what a backend does when it stores a tensor.
// Element i of the array is element (first_index + i) of its tensor, so a tensor converted in pieces
// draws the same stochastic-rounding words as one converted whole.
#pragma once

#include <cstdint>
#include <span>

#include "precision/format.hpp"
#include "precision/fp8.hpp"
#include "precision/half.hpp"
#include "precision/philox.hpp"
#include "precision/rounding.hpp"

namespace fc {

// Throws std::invalid_argument when the spans differ in length.
void round_array(std::span<const float> in, std::span<bf16> out, Rounding mode,
                 RandomStream stream = {}, std::uint64_t first_index = 0);
void round_array(std::span<const float> in, std::span<fp16> out, Rounding mode,
                 RandomStream stream = {}, std::uint64_t first_index = 0);
void round_array(std::span<const double> in, std::span<bf16> out, Rounding mode,
                 RandomStream stream = {}, std::uint64_t first_index = 0);
void round_array(std::span<const double> in, std::span<fp16> out, Rounding mode,
                 RandomStream stream = {}, std::uint64_t first_index = 0);
void round_array(std::span<const double> in, std::span<float> out, Rounding mode,
                 RandomStream stream = {}, std::uint64_t first_index = 0);

void widen_array(std::span<const bf16> in, std::span<float> out);
void widen_array(std::span<const fp16> in, std::span<float> out);

// One value of type A (float or double) rounded in format f (to nearest even unless `mode` says
// otherwise; random_word is used only by stochastic rounding), returned as A: what storing it in f and
// reading it back gives. An identity for formats at least as wide as A.
template <class A>
A round_to_format(A x, Format f, Rounding mode = Rounding::nearest_even, std::uint32_t random_word = 0) {
  switch (f) {
    case Format::bf16: return static_cast<A>(to_float(round_to<bf16>(x, mode, random_word)));
    case Format::fp16: return static_cast<A>(to_float(round_to<fp16>(x, mode, random_word)));
    case Format::e4m3: return static_cast<A>(to_float(round_to_e4m3(x, mode, random_word)));
    case Format::fp32:
      if constexpr (sizeof(A) > sizeof(float)) {
        return static_cast<A>(mode == Rounding::nearest_even ? static_cast<float>(x) : round_to<float>(x, mode, random_word));
      }
      return x;
    case Format::fp64: return x;
  }
  return x;
}

}  // namespace fc
