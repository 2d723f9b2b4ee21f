// What the GPU tests share: the skip without a device, and the harness's case count and seed from the
// environment (FLASHCHECK_GPU_CASES, default 2000; FLASHCHECK_GPU_SEED, default 2026), so that
// processes with different seeds run disjoint case streams in parallel (one stream per test, serial).
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_subjects.hpp"

#define REQUIRE_GPU()                                                                                                         \
  do {                                                                                                                        \
    if (const std::string why = ::fc::kernels::cuda::device_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;         \
  } while (0)

namespace fc::kernels::cuda::testing {

inline int harness_cases() {
  const char* env = std::getenv("FLASHCHECK_GPU_CASES");
  return env ? std::max(1, std::atoi(env)) : 2000;
}
inline std::uint64_t harness_seed() {
  const char* env = std::getenv("FLASHCHECK_GPU_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 2026;
}

// Hopper (compute capability 9.x): cuda.fa3 is registered there only (wgmma, TMA).
inline bool device_is_hopper() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major == 9;
}

}  // namespace fc::kernels::cuda::testing
