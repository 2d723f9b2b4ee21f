// Device memory for one call of a CUDA subject, and the moves of strided host tensors to and from it.
// Every CUDA failure becomes a SubjectError naming the subject and what it was doing ("out of GPU
// memory: 2.1 GB for dQ"), never a crash.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention_call.hpp"
#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

// Throws SubjectError("<who>: <what>: <CUDA error>") unless e is cudaSuccess (e is a cudaError_t).
void check_cuda(int e, const std::string& who, const std::string& what);

// Runs f, which launches kernels and throws std::runtime_error for a failed launch, then waits for the
// device: either failure becomes a SubjectError("<who>: <what>: ...").
void synchronize_device(const std::string& who, const std::string& what);
template <class F>
void run_kernels(const std::string& who, const std::string& what, F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    throw SubjectError(who + ": " + what + ": " + e.what());
  }
  synchronize_device(who, what + " kernels");
}

// Why no CUDA subject can run here ("" when a device is present).
std::string device_unavailable_reason();

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, const std::string& who, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Device words a forward's kernels take zeroed (cuda.fa4's rescale count, the persistent scheduler's work
// counter of cuda.fa3, cuda.fa4 and cuda.fa3.fp8): one allocation, made at the first call and cleared on the
// call's stream before each launch.
class ZeroedDeviceWords {
 public:
  explicit ZeroedDeviceWords(std::size_t bytes) : bytes_(bytes) {}
  ~ZeroedDeviceWords() {
    if (data_ != nullptr) cudaFree(data_);
  }
  ZeroedDeviceWords(const ZeroedDeviceWords&) = delete;
  ZeroedDeviceWords& operator=(const ZeroedDeviceWords&) = delete;

  unsigned char* cleared(cudaStream_t stream, const std::string& who) {
    if (data_ == nullptr) check_cuda(cudaMalloc(&data_, bytes_), who, "allocating its device counters");
    check_cuda(cudaMemsetAsync(data_, 0, bytes_, stream), who, "clearing its device counters");
    return static_cast<unsigned char*>(data_);
  }
  const void* data() const { return data_; }  // (nullptr before the first call)

 private:
  std::size_t bytes_;
  void* data_ = nullptr;
};

// A host input on the device. A view with a unit stride along D and strides that keep rows 16-byte
// aligned is copied as the memory it spans and keeps its strides (so the kernels' strided reads are
// what the harness's [B, N, H, D] layout exercises); any other view is packed to contiguous
// [B, H, N, D] first.
struct DeviceInput {
  DeviceBuffer buffer;
  Strided view;
};
DeviceInput to_device(const TensorView& t, const std::string& who, const std::string& what);

// A contiguous [B, H, N, D] device output of t's shape and format, filled with NaN (all bits set), so
// an entry a kernel never writes fails the harness's checks as it would on the host.
struct DeviceOutput {
  DeviceBuffer buffer;
  StridedOut view;
};
DeviceOutput device_output(const TensorView& t, const std::string& who, const std::string& what);
// Copies a device output back into the (possibly strided) host view.
void to_host(const DeviceOutput& d, const TensorView& t, const std::string& who, const std::string& what);

}  // namespace fc::kernels::cuda
