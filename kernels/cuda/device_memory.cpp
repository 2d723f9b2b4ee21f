#include "kernels/cuda/device_memory.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "kernels/tensor_io.hpp"
#include "precision/format.hpp"

namespace fc::kernels::cuda {

void check_cuda(int e, const std::string& who, const std::string& what) {
  const auto err = static_cast<cudaError_t>(e);
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw SubjectError(who + ": " + what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

std::string device_unavailable_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
  }
  return count == 0 ? "no CUDA device present" : "";
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, const std::string& who, const std::string& what) : bytes_(bytes) {
  const cudaError_t e = cudaMalloc(&ptr_, std::max<std::size_t>(bytes, 16));
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::ostringstream m;
    m << who << ": out of GPU memory allocating " << static_cast<double>(bytes) / 1e9 << " GB for " << what;
    throw SubjectError(m.str());
  }
  check_cuda(e, who, "cudaMalloc for " + what);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_, bytes_ = o.bytes_;
    o.ptr_ = nullptr, o.bytes_ = 0;
  }
  return *this;
}

namespace {

std::size_t element_bytes(Format f) { return static_cast<std::size_t>(format_info(f).bits / 8); }

}  // namespace

void synchronize_device(const std::string& who, const std::string& what) { check_cuda(cudaDeviceSynchronize(), who, what); }

DeviceInput to_device(const TensorView& t, const std::string& who, const std::string& what) {
  const std::size_t eb = element_bytes(t.format);
  const std::int64_t align = static_cast<std::int64_t>(16 / eb);
  bool in_place = t.strides[3] == 1;
  std::int64_t span = 1;
  for (int i = 0; i < 3; ++i) {
    if (t.shape[i] > 1 && (t.strides[i] % align != 0 || t.strides[i] < 0)) in_place = false;
    span += (t.shape[i] - 1) * std::max<std::int64_t>(t.strides[i], 0);
  }
  span += t.shape[3] - 1;
  DeviceInput d;
  if (in_place) {
    d.buffer = DeviceBuffer(static_cast<std::size_t>(span) * eb, who, what);
    check_cuda(cudaMemcpy(d.buffer.get(), t.data, static_cast<std::size_t>(span) * eb, cudaMemcpyHostToDevice), who, "copying " + what);
    d.view = {d.buffer.get(), t.strides[0], t.strides[1], t.strides[2]};
    return d;
  }
  std::vector<unsigned char> packed(static_cast<std::size_t>(t.elements()) * eb);
  const auto* src = static_cast<const unsigned char*>(t.data);
  for_each_element(t, [&](std::int64_t i, std::int64_t off, auto...) { std::memcpy(&packed[i * eb], src + off * eb, eb); });
  d.buffer = DeviceBuffer(packed.size(), who, what);
  check_cuda(cudaMemcpy(d.buffer.get(), packed.data(), packed.size(), cudaMemcpyHostToDevice), who, "copying " + what);
  d.view = {d.buffer.get(), t.shape[1] * t.shape[2] * t.shape[3], t.shape[2] * t.shape[3], t.shape[3]};
  return d;
}

DeviceOutput device_output(const TensorView& t, const std::string& who, const std::string& what) {
  const std::size_t bytes = static_cast<std::size_t>(t.elements()) * element_bytes(t.format);
  DeviceOutput d;
  d.buffer = DeviceBuffer(bytes, who, what);
  check_cuda(cudaMemset(d.buffer.get(), 0xff, bytes), who, "poisoning " + what);
  d.view = {d.buffer.get(), t.shape[1] * t.shape[2] * t.shape[3], t.shape[2] * t.shape[3], t.shape[3]};
  return d;
}

void to_host(const DeviceOutput& d, const TensorView& t, const std::string& who, const std::string& what) {
  const std::size_t eb = element_bytes(t.format);
  std::vector<unsigned char> packed(static_cast<std::size_t>(t.elements()) * eb);
  check_cuda(cudaMemcpy(packed.data(), d.buffer.get(), packed.size(), cudaMemcpyDeviceToHost), who, "copying back " + what);
  auto* dst = static_cast<unsigned char*>(t.data);
  for_each_element(t, [&](std::int64_t i, std::int64_t off, auto...) { std::memcpy(dst + off * eb, &packed[i * eb], eb); });
}

}  // namespace fc::kernels::cuda
