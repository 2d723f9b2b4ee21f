// Host-side launch helpers shared by the kernel families' .cu files: launch checks that throw
// std::runtime_error naming the kernel, the shared-memory opt-in, the dispatch on the head dim, and
// the launches of the backward's small kernels (delta, dq_convert) that FA1 and FA2 share.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/fa2_backward.cuh"

namespace fc::kernels::cuda {

inline void check_launch_result(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
inline void check_launch(const char* kernel) { check_launch_result(cudaGetLastError(), kernel); }
// The current device's SM count.
inline int device_sm_count(const char* what) {
  int device = 0, sms = 0;
  check_launch_result(cudaGetDevice(&device), what);
  check_launch_result(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), what);
  return sms;
}

// sm_90's opt-in shared memory per block, dynamic and static together (227 KiB). The launchers whose
// dynamic size is a constant assert their dynamic bytes against it at compile time; the static part (the
// mbarriers and small arrays: 1104 bytes in cuda.fa3's fused backward, whose total is 944 bytes under the
// limit) is left to cudaFuncSetAttribute's check at run time.
constexpr std::size_t kSm90SharedBytesPerBlock = 232448;

template <class Kernel>
void allow_smem(Kernel kernel, int bytes, const char* name) {
  check_launch_result(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), name);
}

template <class Params, class F64, class F128>
void by_head_dim(const char* family, const Params& p, F64 f64, F128 f128) {
  switch (p.shape.head_dim) {
    case 64: return f64();
    case 128: return f128();
    default:
      throw std::runtime_error(std::string(family) + ": head dim " + std::to_string(p.shape.head_dim) + " is not compiled (64, 128)");
  }
}

// D (delta_kernel); with zero_dq_accum also p.dq_accum's zeros, in the same pass (for the backwards that
// sum dQ in fp32: fa1's sequential pass, fa2.fast's and fa3's fused one).
template <class T>
void launch_delta(const BackwardParams& p, cudaStream_t stream, const char* name, bool zero_dq_accum = false) {
  const int rows = p.shape.batch * p.shape.heads_q * p.shape.seq_q, per_block = rows_per_block(p.shape.head_dim / 8);
  const int blocks = (rows + per_block - 1) / per_block;
  if (zero_dq_accum) {
    if (p.dq_accum == nullptr || reinterpret_cast<std::uintptr_t>(p.dq_accum) % 16 != 0) {
      throw std::runtime_error(std::string(name) + ": the fp32 dQ accumulator must be given and 16-byte aligned");
    }
    delta_kernel<T, true><<<blocks, kConvertThreads, 0, stream>>>(p);
  } else {
    delta_kernel<T, false><<<blocks, kConvertThreads, 0, stream>>>(p);
  }
  check_launch(name);
}

template <class T>
void launch_dq_convert(const BackwardParams& p, float factor, cudaStream_t stream, const char* name) {
  const int rows = p.shape.batch * p.shape.heads_q * p.shape.seq_q, per_block = rows_per_block(p.shape.head_dim / 4);
  dq_convert_kernel<T><<<(rows + per_block - 1) / per_block, kConvertThreads, 0, stream>>>(p, factor);
  check_launch(name);
}

}  // namespace fc::kernels::cuda
