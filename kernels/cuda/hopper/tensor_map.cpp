#include "kernels/cuda/hopper/tensor_map.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace fc::kernels::cuda::hopper {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
      throw std::runtime_error(std::string("TMA: the driver has no cuTensorMapEncodeTiled (") + cudaGetErrorString(e) + ")");
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap make_tensor_map_bf16_sw128(const void* base, std::uint64_t rows, std::uint64_t cols, std::uint64_t row_stride,
                                       std::uint32_t box_rows) {
  if (row_stride % 8 != 0 || reinterpret_cast<std::uintptr_t>(base) % 16 != 0) {
    throw std::runtime_error("TMA: a bf16 matrix needs a 16-byte aligned base and a row stride that is a multiple of 8 elements");
  }
  if (box_rows < 1 || box_rows > 256) throw std::runtime_error("TMA: box rows must be 1..256");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_stride * 2};  // bytes between rows (dimension 0 is contiguous)
  const cuuint32_t box[2] = {64, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("TMA: cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r)));
  return map;
}

namespace {

// A 4D map over a [B, H, N, C] tensor of `element_bytes`-byte entries with element strides (batch, head, row),
// unit stride along C, boxes of box_cols x box_rows of one (b, h) written with `swizzle`. Rows past N and
// columns past C read as zeros, per head.
CUtensorMap encode_bhnd(CUtensorMapDataType type, unsigned element_bytes, const void* base, std::uint64_t batch, std::uint64_t heads, std::uint64_t rows,
                        std::uint64_t cols, std::int64_t batch_stride, std::int64_t head_stride, std::int64_t row_stride, std::uint32_t box_cols,
                        std::uint32_t box_rows, CUtensorMapSwizzle swizzle, const char* what) {
  const std::int64_t align = 16 / element_bytes;  // TMA: strides in bytes are multiples of 16
  for (const std::int64_t stride : {batch_stride, head_stride, row_stride}) {
    if (stride <= 0 || stride % align != 0) {
      throw std::runtime_error(std::string("TMA: every stride of a [B, H, N, D] ") + what + " tensor must be a positive multiple of " + std::to_string(align) +
                               " elements (16 bytes)");
    }
  }
  if (reinterpret_cast<std::uintptr_t>(base) % 16 != 0) throw std::runtime_error("TMA: the tensor's base must be 16-byte aligned");
  if (box_rows < 1 || box_rows > 256) throw std::runtime_error("TMA: box rows must be 1..256");
  CUtensorMap map{};
  const cuuint64_t dims[4] = {cols, rows, heads, batch};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row_stride) * element_bytes, static_cast<cuuint64_t>(head_stride) * element_bytes,
                                 static_cast<cuuint64_t>(batch_stride) * element_bytes};  // bytes, dimensions 1..3
  const cuuint32_t box[4] = {box_cols, box_rows, 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode_tiled()(&map, type, 4, const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("TMA: cuTensorMapEncodeTiled (4D) failed with CUresult " + std::to_string(static_cast<int>(r)));
  return map;
}

}  // namespace

CUtensorMap make_tensor_map_sw128_bhnd(Element16 element, const void* base, std::uint64_t batch, std::uint64_t heads, std::uint64_t rows, std::uint64_t dim,
                                       std::int64_t batch_stride, std::int64_t head_stride, std::int64_t row_stride, std::uint32_t box_rows) {
  const CUtensorMapDataType type = element == Element16::fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode_bhnd(type, 2, base, batch, heads, rows, dim, batch_stride, head_stride, row_stride, 64, box_rows, CU_TENSOR_MAP_SWIZZLE_128B, "16-bit");
}

CUtensorMap make_tensor_map_e4m3_bhnd(const void* base, std::uint64_t batch, std::uint64_t heads, std::uint64_t rows, std::uint64_t cols, std::int64_t batch_stride,
                                      std::int64_t head_stride, std::int64_t row_stride, std::uint32_t box_cols, std::uint32_t box_rows) {
  if (box_cols != 64 && box_cols != 128) throw std::runtime_error("TMA: an e4m3 box is 64 or 128 bytes wide (the 64- or 128-byte swizzle's span)");
  return encode_bhnd(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, base, batch, heads, rows, cols, batch_stride, head_stride, row_stride, box_cols, box_rows,
                     box_cols == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B, "e4m3");
}

CUtensorMap make_tensor_map_f32_sw128_bhnd(const float* base, std::uint64_t batch, std::uint64_t heads, std::uint64_t rows, std::uint64_t cols,
                                           std::int64_t batch_stride, std::int64_t head_stride, std::int64_t row_stride, std::uint32_t box_rows) {
  return encode_bhnd(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, batch, heads, rows, cols, batch_stride, head_stride, row_stride, 32, box_rows,
                     CU_TENSOR_MAP_SWIZZLE_128B, "fp32");
}

}  // namespace fc::kernels::cuda::hopper
