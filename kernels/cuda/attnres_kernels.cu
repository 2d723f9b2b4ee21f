// Launches of the Attention Residuals kernels (attnres_kernels.cuh), in order on one stream.
#include "kernels/cuda/attnres_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/attnres_kernels.cuh"
#include "kernels/cuda/kernel_launch.cuh"

namespace fc::kernels::cuda {
namespace {

// Dynamic shared memory of a kernel, checked against the device's opt-in limit (N and S are not
// bounded by the kernels, only by this).
template <class Kernel>
int smem_for(Kernel kernel, std::size_t floats, const char* name) {
  const std::size_t bytes = floats * sizeof(float);
  int device = 0, limit = 0;
  check_launch_result(cudaGetDevice(&device), name);
  check_launch_result(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), name);
  if (bytes > static_cast<std::size_t>(limit)) {
    throw std::runtime_error(std::string(name) + ": needs " + std::to_string(bytes) +
                             " bytes of shared memory (N x S or D too large), the device has " + std::to_string(limit));
  }
  if (bytes > 48 * 1024) allow_smem(kernel, static_cast<int>(bytes), name);
  return static_cast<int>(bytes);
}

void dw_sum(const AttnResParams& p, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(p.layers) * p.dim;
  attnres_dw_sum_kernel<<<static_cast<unsigned>((n + kAttnResThreads - 1) / kAttnResThreads), kAttnResThreads, 0, stream>>>(
      p, attnres_chunks(p));
  check_launch("attnres dw sum");
}

}  // namespace

int attnres_chunks(const AttnResParams& p) { return (p.batch * p.tokens + kAttnResChunk - 1) / kAttnResChunk; }

// Whether the warp-per-token phase-1 forward applies: D a multiple of 8, at most kAttnResFastMaxS
// layers, the queries in shared memory within 96 KiB, 16-byte aligned value rows and output.
bool fast_phase1(const AttnResParams& p) {
  const auto aligned = [](const void* x) { return reinterpret_cast<std::uintptr_t>(x) % 16 == 0; };
  const std::int64_t eb = p.values.type == Elem::f32 ? 4 : 2;
  const bool rows = (p.values.outer * eb) % 16 == 0 && (p.values.batch * eb) % 16 == 0 && (p.values.token * eb) % 16 == 0;
  const std::size_t smem = (static_cast<std::size_t>(p.layers) * p.dim + 2 * kAttnResFastWarps * p.layers * p.sources) * sizeof(float);
  return p.dim % 8 == 0 && p.layers <= kAttnResFastMaxS && smem <= 96 * 1024 && rows && aligned(p.values.data) && aligned(p.o.data);
}

void attnres_phase1_forward(const AttnResParams& p, cudaStream_t stream) {
  if (fast_phase1(p)) {
    const int smem = smem_for(attnres_phase1_forward_fast_kernel,
                              static_cast<std::size_t>(p.layers) * p.dim + 2 * kAttnResFastWarps * p.layers * p.sources,
                              "attnres phase 1 forward (warp per token)");
    int device = 0, sms = 0, per_sm = 0;
    check_launch_result(cudaGetDevice(&device), "attnres phase 1 forward");
    check_launch_result(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "attnres phase 1 forward");
    check_launch_result(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attnres_phase1_forward_fast_kernel, 32 * kAttnResFastWarps, smem),
                        "attnres phase 1 forward");
    const int tokens = p.batch * p.tokens, needed = (tokens + kAttnResFastWarps - 1) / kAttnResFastWarps;
    const int blocks = std::max(1, std::min(needed, sms * std::max(per_sm, 1)));
    attnres_phase1_forward_fast_kernel<<<blocks, 32 * kAttnResFastWarps, smem, stream>>>(p);
    check_launch("attnres phase 1 forward (warp per token)");
    return;
  }
  const int smem = smem_for(attnres_phase1_forward_kernel, kAttnResWarps + p.sources + static_cast<std::size_t>(p.layers) * p.sources,
                            "attnres phase 1 forward");
  attnres_phase1_forward_kernel<<<p.batch * p.tokens, kAttnResThreads, smem, stream>>>(p);
  check_launch("attnres phase 1 forward");
}

void attnres_phase2_forward(const AttnResParams& p, cudaStream_t stream) {
  attnres_phase2_forward_kernel<<<dim3(p.batch * p.tokens, p.layers), kAttnResThreads, 0, stream>>>(p);
  check_launch("attnres phase 2 forward");
}

void attnres_phase2_backward(const AttnResParams& p, cudaStream_t stream) {
  const int smem = smem_for(attnres_phase2_backward_kernel, kAttnResWarps + static_cast<std::size_t>(p.dim), "attnres phase 2 backward");
  attnres_phase2_backward_kernel<<<dim3(attnres_chunks(p), p.layers), kAttnResThreads, smem, stream>>>(p);
  check_launch("attnres phase 2 backward");
  if (p.dw_phase1 == nullptr) dw_sum(p, stream);  // (alone: d_queries is phase 2's part)
}

void attnres_phase1_backward(const AttnResParams& p, cudaStream_t stream) {
  const int smem = smem_for(attnres_phase1_backward_kernel, kAttnResWarps + p.sources + 4 * static_cast<std::size_t>(p.layers) * p.sources,
                            "attnres phase 1 backward");
  attnres_phase1_backward_kernel<<<attnres_chunks(p), kAttnResThreads, smem, stream>>>(p);
  check_launch("attnres phase 1 backward");
  dw_sum(p, stream);  // phase 1's part, plus phase 2's when p.dw_phase2 holds it
}

void attnres_forward(AttnResParams p, cudaStream_t stream) {
  attnres_phase1_forward(p, stream);
  // phase 2 reads phase 1's stored o (contiguous [S, B T, D], with its scales) and lse
  const std::int64_t D = p.dim;
  p.o_in.data = p.o.data, p.o_in.type = p.o.type, p.o_in.outer = static_cast<std::int64_t>(p.batch) * p.tokens * D;
  p.o_in.batch = p.tokens * D, p.o_in.token = D;
  p.o_in.scale = p.o.scale, p.o_in.scale_outer = static_cast<std::int64_t>(p.batch) * p.tokens, p.o_in.scale_batch = p.tokens;
  p.o_in.scale_token = 1;
  p.lse_in = p.lse;
  attnres_phase2_forward(p, stream);
}

void attnres_backward(const AttnResParams& p, cudaStream_t stream) {
  attnres_phase2_backward(p, stream);
  attnres_phase1_backward(p, stream);
}

}  // namespace fc::kernels::cuda
