// Device-side inputs for timing: N(0, 1) values in bf16 or fp16 from Philox words (Box-Muller), so
// benchmarks never run on zeros (which can run faster than real data) and need no host copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

// Fills n elements of `type` at `data` (device memory); throws std::runtime_error on a launch error.
void fill_normal(void* data, std::size_t n, StorageType type, std::uint64_t seed, std::uint32_t stream);

}  // namespace fc::kernels::cuda
