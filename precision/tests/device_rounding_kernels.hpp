// Launchers for the device side of the host/device agreement tests (device_rounding_test.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "precision/half.hpp"
#include "precision/philox.hpp"
#include "precision/rounding.hpp"

namespace fc::testing {

// Empty when a CUDA device is usable, otherwise why not (for GTEST_SKIP).
std::string cuda_device_unavailable_reason();

struct DeviceRoundingResult {
  std::vector<std::uint32_t> words;  // stream.word(i)
  std::vector<bf16> bf16_from_float;
  std::vector<fp16> fp16_from_float;
  std::vector<fp16> fp16_from_double;
};

// Runs on the GPU: element i draws stream.word(i) and rounds in[i] (and in64[i]) with `mode`.
// Throws std::runtime_error on a CUDA error.
DeviceRoundingResult round_on_device(const std::vector<float>& in, const std::vector<double>& in64, Rounding mode,
                                     RandomStream stream);

// Runs on the GPU: exp2_emulated(in[i]) (precision/exp2_emulated.hpp). Throws std::runtime_error on a CUDA error.
std::vector<float> exp2_emulated_on_device(const std::vector<float>& in);

}  // namespace fc::testing
