// Whole-array conversions between storage formats: what a backend does when it stores a tensor.
// Element i of the array is element (first_index + i) of its tensor, so a tensor converted in pieces
// draws the same stochastic-rounding words as one converted whole.
#pragma once

#include <cstdint>
#include <span>

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

}  // namespace fc
