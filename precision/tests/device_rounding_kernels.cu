#include <cuda_runtime.h>

#include <stdexcept>

#include "precision/exp2_emulated.hpp"
#include "precision/tests/device_rounding_kernels.hpp"

namespace fc::testing {
namespace {

// One thread per element, in a grid-stride loop: the words depend on the element index only, so
// the thread layout (deliberately unlike the host's sequential loop) must not matter.
__global__ void round_kernel(const float* in, const double* in64, std::size_t n, Rounding mode, RandomStream stream,
                             std::uint32_t* words, bf16* b, fp16* h, fp16* h64) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    const std::uint32_t w = stream.word(i);
    words[i] = w;
    b[i] = round_to<bf16>(in[i], mode, w);
    h[i] = round_to<fp16>(in[i], mode, w);
    h64[i] = round_to<fp16>(in64[i], mode, w);
  }
}

__global__ void exp2_emulated_kernel(const float* in, std::size_t n, float* out) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) out[i] = exp2_emulated(in[i]);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
T* device_alloc(std::size_t n) {
  T* p = nullptr;
  check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
  return p;
}

}  // namespace

std::string cuda_device_unavailable_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(e);
  if (count == 0) return "no CUDA device present";
  return "";
}

DeviceRoundingResult round_on_device(const std::vector<float>& in, const std::vector<double>& in64, Rounding mode,
                                     RandomStream stream) {
  const std::size_t n = in.size();
  if (in64.size() != n) throw std::invalid_argument("round_on_device: input sizes differ");
  float* d_in = device_alloc<float>(n);
  double* d_in64 = device_alloc<double>(n);
  std::uint32_t* d_words = device_alloc<std::uint32_t>(n);
  bf16* d_b = device_alloc<bf16>(n);
  fp16* d_h = device_alloc<fp16>(n);
  fp16* d_h64 = device_alloc<fp16>(n);
  check(cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice), "copy in");
  check(cudaMemcpy(d_in64, in64.data(), n * sizeof(double), cudaMemcpyHostToDevice), "copy in64");
  round_kernel<<<97, 256>>>(d_in, d_in64, n, mode, stream, d_words, d_b, d_h, d_h64);
  check(cudaGetLastError(), "launch");
  DeviceRoundingResult r{std::vector<std::uint32_t>(n), std::vector<bf16>(n), std::vector<fp16>(n), std::vector<fp16>(n)};
  check(cudaMemcpy(r.words.data(), d_words, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost), "copy words");
  check(cudaMemcpy(r.bf16_from_float.data(), d_b, n * sizeof(bf16), cudaMemcpyDeviceToHost), "copy bf16");
  check(cudaMemcpy(r.fp16_from_float.data(), d_h, n * sizeof(fp16), cudaMemcpyDeviceToHost), "copy fp16");
  check(cudaMemcpy(r.fp16_from_double.data(), d_h64, n * sizeof(fp16), cudaMemcpyDeviceToHost), "copy fp16 from double");
  for (void* p : {static_cast<void*>(d_in), static_cast<void*>(d_in64), static_cast<void*>(d_words),
                  static_cast<void*>(d_b), static_cast<void*>(d_h), static_cast<void*>(d_h64)}) {
    cudaFree(p);
  }
  return r;
}

std::vector<float> exp2_emulated_on_device(const std::vector<float>& in) {
  const std::size_t n = in.size();
  float* d_in = device_alloc<float>(n);
  float* d_out = device_alloc<float>(n);
  check(cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice), "copy in");
  exp2_emulated_kernel<<<97, 256>>>(d_in, n, d_out);
  check(cudaGetLastError(), "launch");
  std::vector<float> out(n);
  check(cudaMemcpy(out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost), "copy out");
  cudaFree(d_in), cudaFree(d_out);
  return out;
}

}  // namespace fc::testing
