// Launches of the Attention Residuals kernels (attnres_kernels.cuh), in order on one stream.
#include "kernels/cuda/attnres_kernels.hpp"

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
    throw std::runtime_error(std::string(name) + ": needs " + std::to_string(bytes) + " bytes of shared memory (N, S or D too large), the device has " +
                             std::to_string(limit));
  }
  if (bytes > 48 * 1024) allow_smem(kernel, static_cast<int>(bytes), name);
  return static_cast<int>(bytes);
}

}  // namespace

int attnres_chunks(const AttnResParams& p) { return (p.batch * p.tokens + kAttnResChunk - 1) / kAttnResChunk; }

void attnres_forward(const AttnResParams& p, cudaStream_t stream) {
  const int bt = p.batch * p.tokens;
  const int smem1 = smem_for(attnres_phase1_forward, kAttnResWarps + p.sources + static_cast<std::size_t>(p.layers) * p.sources,
                             "attnres phase 1 forward");
  attnres_phase1_forward<<<bt, kAttnResThreads, smem1, stream>>>(p);
  check_launch("attnres phase 1 forward");
  attnres_phase2_forward<<<dim3(bt, p.layers), kAttnResThreads, 0, stream>>>(p);
  check_launch("attnres phase 2 forward");
}

void attnres_backward(const AttnResParams& p, cudaStream_t stream) {
  const int chunks = attnres_chunks(p);
  const int smem2 = smem_for(attnres_phase2_backward, kAttnResWarps + static_cast<std::size_t>(p.dim), "attnres phase 2 backward");
  attnres_phase2_backward<<<dim3(chunks, p.layers), kAttnResThreads, smem2, stream>>>(p);
  check_launch("attnres phase 2 backward");
  const int smem1 = smem_for(attnres_phase1_backward, kAttnResWarps + p.sources + 4 * static_cast<std::size_t>(p.layers) * p.sources,
                             "attnres phase 1 backward");
  attnres_phase1_backward<<<chunks, kAttnResThreads, smem1, stream>>>(p);
  check_launch("attnres phase 1 backward");
  const std::int64_t n = static_cast<std::int64_t>(p.layers) * p.dim;
  attnres_dw_sum<<<static_cast<unsigned>((n + kAttnResThreads - 1) / kAttnResThreads), kAttnResThreads, 0, stream>>>(p, chunks);
  check_launch("attnres dw sum");
}

}  // namespace fc::kernels::cuda
