// The Hopper tools' first step (softmax-probe, wgmma-queue-probe, cudnn-fp8-reference): device 0 must be a Hopper GPU
// (sm_90a, what their kernels are built for); otherwise a clear message on stderr and exit status 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace fc::kernels::cuda::tools {

inline cudaDeviceProp hopper_device_or_exit(const char* tool) {
  int devices = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "%s: no CUDA device\n", tool);
    std::exit(1);
  }
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, 0); e != cudaSuccess) {
    std::fprintf(stderr, "%s: cudaGetDeviceProperties: %s\n", tool, cudaGetErrorString(e));
    std::exit(1);
  }
  if (prop.major != 9) {
    std::fprintf(stderr, "%s: needs a Hopper GPU (sm_90a); device 0 is %s (sm_%d%d)\n", tool, prop.name, prop.major, prop.minor);
    std::exit(1);
  }
  return prop;
}

}  // namespace fc::kernels::cuda::tools
