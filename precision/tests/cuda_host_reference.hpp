// CUDA's own host-side conversions (cuda_bf16.h, cuda_fp16.h) as a second independent reference,
// when the toolkit's headers are present (FLASHCHECK_HAVE_CUDA_HEADERS). They canonicalise NaN to
// 0x7fff, so callers compare NaN results by class, not by payload.
#pragma once

#if FLASHCHECK_HAVE_CUDA_HEADERS
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fc::testing::cuda_host {

inline std::uint16_t bf16_rn(float x) { return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x; }
inline std::uint16_t bf16_rz(float x) { return __nv_bfloat16_raw(__float2bfloat16_rz(x)).x; }
inline std::uint16_t fp16_rn(float x) { return __half_raw(__float2half_rn(x)).x; }
inline std::uint16_t fp16_rz(float x) { return __half_raw(__float2half_rz(x)).x; }
inline std::uint16_t bf16_from_double(double x) { return __nv_bfloat16_raw(__double2bfloat16(x)).x; }
inline std::uint16_t fp16_from_double(double x) { return __half_raw(__double2half(x)).x; }
inline float bf16_to_float(std::uint16_t b) {
  __nv_bfloat16_raw r;
  r.x = b;
  return __bfloat162float(__nv_bfloat16(r));
}
inline float fp16_to_float(std::uint16_t b) {
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

}  // namespace fc::testing::cuda_host
#endif
