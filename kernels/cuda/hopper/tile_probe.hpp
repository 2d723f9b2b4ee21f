// The Hopper primitives (wgmma_tma.cuh, tensor_map.hpp) on one tile, for their GPU test: TMA loads a
// 64 x 64 bf16 A and B into 128-byte-swizzled shared memory, one warpgroup computes C = A B^T with
// four m64n64k16 wgmma steps, fp32 accumulators, and writes C; and the second product of attention with A
// in registers and an MN-major B (tile_product_64_pv). Throws std::runtime_error.
#pragma once

#include <cuda_runtime.h>

namespace fc::kernels::cuda::hopper {

// a, b: device row-major [64, 64] bf16 (16-byte aligned); c: device row-major [64, 64] fp32.
void tile_product_64(const void* a, const void* b, float* c, cudaStream_t stream);
// C = A V, FA3's second product (O += P V) with cuda.fa3's operands: A from registers, V [128 keys, 128]
// read as an MN-major B. a: device row-major [64, 128] bf16 (4-byte aligned); v: device row-major
// [128, 128] bf16 (16-byte aligned); c: device row-major [64, 128] fp32.
void tile_product_64_pv(const void* a, const void* v, float* c, cudaStream_t stream);

}  // namespace fc::kernels::cuda::hopper
