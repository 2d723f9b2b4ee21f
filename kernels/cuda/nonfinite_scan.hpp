// One pass over several 16-bit [B, H, N, D] tensors that flags each one holding a NaN or an Inf: the input check of
// the PyTorch attention ops on CUDA tensors (kernels/torch/ops/attention_cuda.cpp). One launch for all of them,
// reading each element once (PyTorch's isfinite(t).all() took 5 kernels a tensor: 0.33 ms of a 4.7 ms HVP, H200).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

// A tensor of `type` with unit stride along D, a 16-byte aligned base and row, head and batch strides that are
// multiples of 8 elements (what the kernels read in place), D a multiple of 8.
struct ScanTensor {
  const void* data = nullptr;
  std::int64_t batch = 0, head = 0, row = 0;  // element strides
  int batches = 0, heads = 0, rows = 0, dim = 0;
};

constexpr int kMaxScanTensors = 8;

// flags[i] (device memory, or mapped pinned host memory through its device pointer; zeroed by the caller) becomes
// nonzero where tensors[i] holds a NaN or an Inf; count <= kMaxScanTensors, every tensor of `type`. Throws
// std::runtime_error on a launch error or a tensor outside the contract.
void flag_nonfinite(const ScanTensor* tensors, int count, StorageType type, unsigned* flags, cudaStream_t stream);

}  // namespace fc::kernels::cuda
