// flag_nonfinite (nonfinite_scan.hpp): each tensor's flag says whether it holds a NaN or an Inf, wherever the value
// sits (the first and the last 16-byte chunk of memory, one inside) and in either layout the ops pass ([B, H, N, D]
// contiguous, or [B, N, H, D] memory seen as [B, H, N, D]); finite extremes (the largest finite value, subnormals) are
// not flagged; a tensor larger than one sweep of the grid is read to its end; flags may sit in mapped pinned host
// memory; bad tensors are refused with an error.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/nonfinite_scan.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"

namespace fc::kernels::cuda {
namespace {

constexpr int kB = 2, kH = 3, kN = 37, kD = 64;
constexpr std::int64_t kCount = std::int64_t{kB} * kH * kN * kD;

std::uint16_t bits_of(float x, StorageType type) {
  if (type == StorageType::fp16) {
    const __half h = __float2half(x);
    return *reinterpret_cast<const std::uint16_t*>(&h);
  }
  const __nv_bfloat16 h = __float2bfloat16(x);
  return *reinterpret_cast<const std::uint16_t*>(&h);
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

// Element strides of the two layouts, as [B, H, N, D] views.
ScanTensor view(const void* data, bool bnhd) {
  if (bnhd) return {data, std::int64_t{kN} * kH * kD, kD, std::int64_t{kH} * kD, kB, kH, kN, kD};
  return {data, std::int64_t{kH} * kN * kD, std::int64_t{kN} * kD, kD, kB, kH, kN, kD};
}

TEST(NonfiniteScan, FlagsExactlyTheTensorsHoldingNanOrInf) {
  REQUIRE_GPU();
  for (StorageType type : {StorageType::bf16, StorageType::fp16}) {
    for (bool bnhd : {false, true}) {
      // tensor 0 clean with finite extremes; 1: NaN first; 2: +Inf last; 3: -Inf inside a row near the end of memory
      const float big = type == StorageType::fp16 ? 65504.f : 3.38e38f, tiny = type == StorageType::fp16 ? 6e-8f : 1e-40f;
      std::vector<std::uint16_t> host(4 * kCount);
      for (std::int64_t i = 0; i < 4 * kCount; ++i) host[i] = bits_of(i % 3 == 0 ? big : i % 3 == 1 ? -tiny : 0.5f, type);
      host[1 * kCount] = bits_of(std::numeric_limits<float>::quiet_NaN(), type);
      host[2 * kCount + kCount - 1] = bits_of(INFINITY, type);
      host[3 * kCount + kCount - 5 * kD + 17] = bits_of(-INFINITY, type);
      DeviceBuffer data(host.size() * 2), flags(4 * sizeof(unsigned));
      ASSERT_EQ(cudaMemcpy(data.p, host.data(), host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(flags.p, 0, 4 * sizeof(unsigned)), cudaSuccess);
      const auto* base = static_cast<const std::uint16_t*>(data.p);
      const ScanTensor tensors[4] = {view(base, bnhd), view(base + kCount, bnhd), view(base + 2 * kCount, bnhd), view(base + 3 * kCount, bnhd)};
      flag_nonfinite(tensors, 4, type, static_cast<unsigned*>(flags.p), nullptr);
      unsigned got[4];
      ASSERT_EQ(cudaMemcpy(got, flags.p, sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(got[0], 0u) << "the clean tensor (largest finite value, subnormals)";
      EXPECT_NE(got[1], 0u) << "NaN in the first element";
      EXPECT_NE(got[2], 0u) << "+Inf in the last element";
      EXPECT_NE(got[3], 0u) << "-Inf inside a row";
    }
  }
}

// [1, 16, 8192, 64]: 1 Mi 16-byte chunks, 15.5 sweeps of the 264 x 256 threads; a NaN in the very last element, and
// a size-1 batch dimension whose stride is 0 (as PyTorch may give it).
TEST(NonfiniteScan, ReadsATensorLargerThanOneSweepToItsEnd) {
  REQUIRE_GPU();
  constexpr int kHeads = 16, kRows = 8192;
  constexpr std::int64_t kBig = std::int64_t{kHeads} * kRows * kD;
  std::vector<std::uint16_t> host(kBig, bits_of(1.f, StorageType::bf16));
  DeviceBuffer data(kBig * 2), flags(2 * sizeof(unsigned));
  ASSERT_EQ(cudaMemcpy(data.p, host.data(), kBig * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(flags.p, 0, 2 * sizeof(unsigned)), cudaSuccess);
  const ScanTensor clean{data.p, 0, std::int64_t{kRows} * kD, kD, 1, kHeads, kRows, kD};
  flag_nonfinite(&clean, 1, StorageType::bf16, static_cast<unsigned*>(flags.p), nullptr);
  host.back() = bits_of(std::numeric_limits<float>::quiet_NaN(), StorageType::bf16);
  ASSERT_EQ(cudaMemcpy(data.p, host.data(), kBig * 2, cudaMemcpyHostToDevice), cudaSuccess);
  flag_nonfinite(&clean, 1, StorageType::bf16, static_cast<unsigned*>(flags.p) + 1, nullptr);
  unsigned got[2];
  ASSERT_EQ(cudaMemcpy(got, flags.p, sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got[0], 0u);
  EXPECT_NE(got[1], 0u) << "NaN in the last of 8 Mi elements";
}

// The PyTorch ops give the pass mapped pinned host memory for its flags (attention_cuda.cpp: no memset and no copy in
// the stream); the host reads them after the pass, with no copy.
TEST(NonfiniteScan, WritesItsFlagsIntoMappedPinnedHostMemory) {
  REQUIRE_GPU();
  std::vector<std::uint16_t> host(2 * kCount, bits_of(0.25f, StorageType::fp16));
  host[kCount + 3 * kD] = bits_of(std::numeric_limits<float>::quiet_NaN(), StorageType::fp16);
  DeviceBuffer data(host.size() * 2);
  ASSERT_EQ(cudaMemcpy(data.p, host.data(), host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  unsigned* flags = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flags), 2 * sizeof(unsigned), cudaHostAllocMapped), cudaSuccess);
  flags[0] = flags[1] = 0;
  void* on_device = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&on_device, flags, 0), cudaSuccess);
  const auto* base = static_cast<const std::uint16_t*>(data.p);
  const ScanTensor tensors[2] = {view(base, false), view(base + kCount, false)};
  flag_nonfinite(tensors, 2, StorageType::fp16, static_cast<unsigned*>(on_device), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(flags[0], 0u) << "the clean tensor";
  EXPECT_NE(flags[1], 0u) << "the tensor with a NaN";
  cudaFreeHost(flags);
}

TEST(NonfiniteScan, RefusesWhatItCannotRead) {
  alignas(16) static const std::uint16_t host[16] = {};
  unsigned* no_flags = nullptr;
  ScanTensor odd = view(host + 1, false);  // 2-byte aligned
  EXPECT_THROW(flag_nonfinite(&odd, 1, StorageType::bf16, no_flags, nullptr), std::runtime_error);
  ScanTensor narrow = view(host, false);
  narrow.dim = 12;
  EXPECT_THROW(flag_nonfinite(&narrow, 1, StorageType::bf16, no_flags, nullptr), std::runtime_error);
  EXPECT_THROW(flag_nonfinite(&narrow, 9, StorageType::bf16, no_flags, nullptr), std::runtime_error);
}

}  // namespace
}  // namespace fc::kernels::cuda
