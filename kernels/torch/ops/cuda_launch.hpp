// What the CUDA ops share (attention_cuda.cpp, attnres_cuda.cpp; included only where libtorch >= 2 and
// the CUDA kernels are built): the current stream of a tensor's device, and kernel launches whose
// std::runtime_error (a failed launch, unsupported shape, shared memory) becomes a TORCH_CHECK naming
// the op.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <cuda_runtime.h>

#include <stdexcept>

namespace fc::kernels::pt::ops {

inline cudaStream_t current_stream(const at::Tensor& t) {
  const c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  return static_cast<cudaStream_t>(guard.getStream(t.device()).native_handle());
}

template <class F>
void launch(const char* op, F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "flashcheck.", op, ": ", e.what());
  }
}

}  // namespace fc::kernels::pt::ops
