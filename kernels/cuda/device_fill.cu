#include "kernels/cuda/device_fill.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/tile_primitives.cuh"
#include "precision/philox.hpp"

namespace fc::kernels::cuda {
namespace {

template <class T>
__global__ void fill_normal_kernel(T* data, std::size_t n, RandomStream random) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    // Box-Muller on two words of element i; u1 in (0, 1] so the log is finite
    const float u1 = (static_cast<float>(random.word(i, 0)) + 1.f) * 2.3283064e-10f;
    const float u2 = static_cast<float>(random.word(i, 1)) * 2.3283064e-10f;
    const float x = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    if constexpr (Storage<T>::is_bf16) {
      data[i] = __float2bfloat16_rn(x);
    } else {
      data[i] = __float2half_rn(x);
    }
  }
}

}  // namespace

void fill_normal(void* data, std::size_t n, StorageType type, std::uint64_t seed, std::uint32_t stream) {
  const RandomStream random{seed, stream};
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096));
  if (type == StorageType::bf16) {
    fill_normal_kernel<<<blocks, 256>>>(static_cast<__nv_bfloat16*>(data), n, random);
  } else {
    fill_normal_kernel<<<blocks, 256>>>(static_cast<__half*>(data), n, random);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("fill_normal: ") + cudaGetErrorString(e));
}

}  // namespace fc::kernels::cuda
