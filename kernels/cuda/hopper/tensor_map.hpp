// Host side of TMA: tensor maps (CUtensorMap) for the bulk tensor copy engine, made with the driver's
// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fc::kernels::cuda::hopper {

// A 2D map over a row-major [rows, cols] bf16 matrix (row stride `row_stride` elements, a multiple of
// 8), boxes of [box_rows, 64] elements (64 bf16 = 128 bytes, the 128-byte swizzle's span) written
// into shared memory with that swizzle; reads past the matrix fill zeros. Throws std::runtime_error
// naming the driver's error.
CUtensorMap make_tensor_map_bf16_sw128(const void* base, std::uint64_t rows, std::uint64_t cols, std::uint64_t row_stride,
                                       std::uint32_t box_rows);

}  // namespace fc::kernels::cuda::hopper
