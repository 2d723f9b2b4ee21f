#include "kernels/cuda/hopper/tile_probe.hpp"

#include <cstdint>
#include <stdexcept>

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

// C (64 x 128) = A (64 x 128) V (128 x 128): FA3's O += P V on one tile of 128 keys, with cuda.fa3's exact
// operands. A comes from global memory straight into registers in the A fragment layout (as P comes from
// S's accumulators); V's two 64-wide column boxes of 128 rows by TMA into 128-byte-swizzled shared memory
// (16 KiB each, 1024-byte aligned), read as one MN-major B (wgmma_descriptor_sw128_mn, n block 16 KiB);
// eight m64n128k16 steps. One warpgroup.
constexpr int kKeys = 128;
constexpr unsigned kVBox = kKeys * 128;  // bytes: 128 rows x 64 bf16
__global__ void __launch_bounds__(128) tile_pv_kernel(const std::uint16_t* a, const __grid_constant__ CUtensorMap v_map, float* c) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* v = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t{1023});
  __shared__ alignas(8) std::uint64_t full;
  if (threadIdx.x == 0) {
    mbarrier_init(&full, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&full, 2 * kVBox);
    tma_load_2d(v, &v_map, &full, 0, 0);           // d 0 .. 63
    tma_load_2d(v + kVBox, &v_map, &full, 64, 0);  // d 64 .. 127
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // A's fragments of the 8 k-steps: (row 16 w + g [+ 8], cols 16 k + 2 t [+ 8], pairs)
  std::uint32_t frag[8][4];
  const auto pair = [&](int row, int col) { return *reinterpret_cast<const std::uint32_t*>(a + row * kKeys + col); };
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int row = 16 * warp + g, col = 16 * k + 2 * t;
    frag[k][0] = pair(row, col), frag[k][1] = pair(row + 8, col), frag[k][2] = pair(row, col + 8), frag[k][3] = pair(row + 8, col + 8);
  }
  mbarrier_wait(&full, 0);
  float d[64];
#pragma unroll
  for (float& x : d) x = 0.f;
  const std::uint64_t dv = wgmma_descriptor_sw128_mn(v, kVBox);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < 8; ++k) wgmma_m64n128k16_rs_tn<false>(d, frag[k], wgmma_descriptor_advance_mn(dv, k), k > 0);
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * t;
    c[row * 128 + col] = d[4 * j], c[row * 128 + col + 1] = d[4 * j + 1];
    c[(row + 8) * 128 + col] = d[4 * j + 2], c[(row + 8) * 128 + col + 1] = d[4 * j + 3];
  }
}

}  // namespace

void tile_product_64_pv(const void* a, const void* v, float* c, cudaStream_t stream) {
  const CUtensorMap v_map = make_tensor_map_bf16_sw128(v, kKeys, 128, 128, kKeys);
  constexpr int smem = 2 * kVBox + 1024;
  static const cudaError_t attribute = cudaFuncSetAttribute(tile_pv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attribute != cudaSuccess) throw std::runtime_error("hopper tile product P V: 33 KiB of shared memory refused");
  tile_pv_kernel<<<1, 128, smem, stream>>>(static_cast<const std::uint16_t*>(a), v_map, c);
  check_launch("hopper tile product P V (wgmma, A from registers, MN-major B)");
}

void tile_product_64(const void* a, const void* b, float* c, cudaStream_t stream) {
  const CUtensorMap a_map = make_tensor_map_bf16_sw128(a, kTile, kTile, kTile, kTile);
  const CUtensorMap b_map = make_tensor_map_bf16_sw128(b, kTile, kTile, kTile, kTile);
  tile_product_kernel<<<1, 128, 2 * kTileBytes + 1024, stream>>>(a_map, b_map, c);
  check_launch("hopper tile product (TMA + wgmma)");
}

}  // namespace fc::kernels::cuda::hopper
