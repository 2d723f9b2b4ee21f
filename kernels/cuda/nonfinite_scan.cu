// flag_nonfinite (nonfinite_scan.hpp): a grid-stride pass per tensor (blockIdx.y) over 16-byte chunks of its rows.
#include "kernels/cuda/nonfinite_scan.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cuda/kernel_launch.cuh"

namespace fc::kernels::cuda {
namespace {

struct ScanList {
  ScanTensor t[kMaxScanTensors];
};

// A 16-bit value is NaN or Inf exactly when its exponent field is all ones: 0x7f80 in bf16, 0x7c00 in fp16.
__device__ inline bool any_nonfinite(uint4 v, std::uint32_t exponent) {
  const std::uint32_t words[4] = {v.x, v.y, v.z, v.w};
  bool bad = false;
#pragma unroll
  for (std::uint32_t w : words) bad |= (w & exponent) == exponent || ((w >> 16) & exponent) == exponent;
  return bad;
}

__global__ void flag_nonfinite_kernel(const ScanList list, std::uint32_t exponent, unsigned* flags) {
  const ScanTensor& x = list.t[blockIdx.y];
  const int chunks = x.dim / 8;  // 16-byte chunks a row
  const std::int64_t items = static_cast<std::int64_t>(x.batches) * x.heads * x.rows * chunks;
  bool bad = false;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < items; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / chunks, c = i % chunks;  // row r of the B H N rows
    const std::int64_t n = r % x.rows, bh = r / x.rows, h = bh % x.heads, b = bh / x.heads;
    const auto* p = static_cast<const unsigned short*>(x.data) + b * x.batch + h * x.head + n * x.row + 8 * c;
    bad |= any_nonfinite(__ldg(reinterpret_cast<const uint4*>(p)), exponent);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) flags[blockIdx.y] = 1;
}

}  // namespace

void flag_nonfinite(const ScanTensor* tensors, int count, StorageType type, unsigned* flags, cudaStream_t stream) {
  if (count < 1 || count > kMaxScanTensors) throw std::runtime_error("flag_nonfinite: 1 to 8 tensors, got " + std::to_string(count));
  ScanList list;
  for (int i = 0; i < count; ++i) {
    const ScanTensor& x = tensors[i];
    const bool aligned = reinterpret_cast<std::uintptr_t>(x.data) % 16 == 0 && x.batch % 8 == 0 && x.head % 8 == 0 && x.row % 8 == 0;
    if (!aligned || x.dim % 8 != 0 || x.dim < 8 || x.batches < 1 || x.heads < 1 || x.rows < 1) {
      throw std::runtime_error("flag_nonfinite: tensor " + std::to_string(i) + " is not a 16-byte aligned [B, H, N, D] with D a multiple of 8");
    }
    list.t[i] = x;
  }
  // 2 blocks of 256 threads per SM and tensor (132 SMs on an H100 / H200), a grid-stride loop beyond that
  const dim3 grid(264, count);
  flag_nonfinite_kernel<<<grid, 256, 0, stream>>>(list, type == StorageType::fp16 ? 0x7c00u : 0x7f80u, flags);
  check_launch("flag_nonfinite");
}

}  // namespace fc::kernels::cuda
