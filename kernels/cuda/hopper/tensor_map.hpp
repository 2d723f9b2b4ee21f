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

// The 16-bit element types a 128-byte-swizzled tile holds (64 per row).
enum class Element16 { bf16, fp16 };

// A [B, H, N, D] 16-bit tensor with element strides (batch, head, row) and unit stride along D (every
// stride a multiple of 8, the base 16-byte aligned), boxes of 64 along D x box_rows along N of one (b, h):
// rows past N read as zeros, per head (a tile never reads another head's rows).
CUtensorMap make_tensor_map_sw128_bhnd(Element16 element, const void* base, std::uint64_t batch, std::uint64_t heads, std::uint64_t rows, std::uint64_t dim,
                                            std::int64_t batch_stride, std::int64_t head_stride, std::int64_t row_stride,
                                            std::uint32_t box_rows);

// A [B, H, N, C] e4m3 tensor (one byte per entry; every stride a multiple of 16, the base 16-byte aligned),
// boxes of box_cols (64 or 128 bytes: written with the 64- or 128-byte swizzle, the span of one row) x box_rows
// of one (b, h); entries past N or C read as zeros, per head. cuda.fa3.fp8's Q and K ([.., N, d]) and V^T
// ([.., d, keys]).
CUtensorMap make_tensor_map_e4m3_bhnd(const void* base, std::uint64_t batch, std::uint64_t heads, std::uint64_t rows, std::uint64_t cols, std::int64_t batch_stride,
                                      std::int64_t head_stride, std::int64_t row_stride, std::uint32_t box_cols, std::uint32_t box_rows);

// A [B, H, N, C] fp32 tensor (every stride a multiple of 4, the base 16-byte aligned), boxes of 32 along C (128
// bytes, the 128-byte swizzle's span) x box_rows along N of one (b, h); entries past N are neither read nor written
// (per head). cuda.fa3's fused backward adds dQ's partials into its accumulator through it (a TMA reduction).
CUtensorMap make_tensor_map_f32_sw128_bhnd(const float* base, std::uint64_t batch, std::uint64_t heads, std::uint64_t rows, std::uint64_t cols,
                                           std::int64_t batch_stride, std::int64_t head_stride, std::int64_t row_stride, std::uint32_t box_rows);

}  // namespace fc::kernels::cuda::hopper
