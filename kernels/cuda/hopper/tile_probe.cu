#include "kernels/cuda/hopper/tile_probe.hpp"

#include <cstdint>

#include "kernels/cuda/hopper/tensor_map.hpp"
#include "kernels/cuda/hopper/wgmma_tma.cuh"
#include "kernels/cuda/kernel_launch.cuh"

namespace fc::kernels::cuda::hopper {
namespace {

constexpr int kTile = 64;
constexpr unsigned kTileBytes = kTile * kTile * 2;

// one warpgroup; shared: A then B, each 8 KiB and 1024-byte aligned (the swizzle atom)
__global__ void __launch_bounds__(128) tile_product_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                                                           float* c) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t{1023});
  unsigned char* a = smem;
  unsigned char* b = smem + kTileBytes;
  __shared__ alignas(8) std::uint64_t full;
  if (threadIdx.x == 0) {
    mbarrier_init(&full, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&full, 2 * kTileBytes);
    tma_load_2d(a, &a_map, &full, 0, 0);
    tma_load_2d(b, &b_map, &full, 0, 0);
  }
  mbarrier_wait(&full, 0);
  float d[32];
#pragma unroll
  for (float& x : d) x = 0.f;
  const std::uint64_t da = wgmma_descriptor_sw128(a), db = wgmma_descriptor_sw128(b);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) wgmma_m64n64k16_bf16(d, wgmma_descriptor_advance(da, k), wgmma_descriptor_advance(db, k), k > 0);
  wgmma_commit();
  wgmma_wait<0>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kTile / 8; ++j) {
    const int row = 16 * warp + lane / 4, col = 8 * j + 2 * (lane % 4);
    c[row * kTile + col] = d[4 * j], c[row * kTile + col + 1] = d[4 * j + 1];
    c[(row + 8) * kTile + col] = d[4 * j + 2], c[(row + 8) * kTile + col + 1] = d[4 * j + 3];
  }
}

}  // namespace

void tile_product_64(const void* a, const void* b, float* c, cudaStream_t stream) {
  const CUtensorMap a_map = make_tensor_map_bf16_sw128(a, kTile, kTile, kTile, kTile);
  const CUtensorMap b_map = make_tensor_map_bf16_sw128(b, kTile, kTile, kTile, kTile);
  tile_product_kernel<<<1, 128, 2 * kTileBytes + 1024, stream>>>(a_map, b_map, c);
  check_launch("hopper tile product (TMA + wgmma)");
}

}  // namespace fc::kernels::cuda::hopper
