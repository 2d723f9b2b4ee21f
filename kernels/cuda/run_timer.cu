#include "kernels/cuda/run_timer.hpp"

#include <atomic>
#include <cstdint>
#include <sstream>
#include <utility>

#include "kernels/cuda/device_memory.hpp"

namespace fc::kernels::cuda {
namespace {

__device__ inline std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until the host sets flags[0], or gives up after limit_ns and sets flags[1]. (volatile: every poll reads
// the host's memory; the sleep keeps the polls to about one a microsecond)
__global__ void hold_stream(volatile int* flags, long long limit_ns) {
  const std::uint64_t t0 = global_ns();
  while (flags[0] == 0) {
    if (static_cast<long long>(global_ns() - t0) > limit_ns) {
      flags[1] = 1;
      return;
    }
    __nanosleep(1000);
  }
}

// The hold limit in ns, refused outside (0, 60000] ms before it is converted (NaN and inf included).
long long checked_limit_ns(const std::string& who, double ms) {
  if (!(ms > 0 && ms <= 60000)) throw SubjectError(who + ": the timer's hold limit must lie in (0, 60000] ms, got " + std::to_string(ms));
  return static_cast<long long>(ms * 1e6);
}

}  // namespace

RunTimer::RunTimer(std::string who, cudaStream_t stream, double hold_limit_ms)
    : who_(std::move(who)), stream_(stream), hold_limit_ns_(checked_limit_ns(who_, hold_limit_ms)), monitor_(&DeviceMonitor::current()) {
  try {
    void* flags = nullptr;
    check_cuda(cudaHostAlloc(&flags, 2 * sizeof(int), cudaHostAllocMapped), who_, "allocating the timer's host flags");
    host_flags_ = static_cast<volatile int*>(flags);
    host_flags_[0] = 1;
    host_flags_[1] = 0;
    check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flags_), flags, 0), who_, "mapping the timer's host flags");
    check_cuda(cudaEventCreate(&start_), who_, "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop_), who_, "cudaEventCreate");
  } catch (...) {
    free_all();
    throw;
  }
}

RunTimer::~RunTimer() {
  if (host_flags_ != nullptr) {
    release();
    cudaStreamSynchronize(stream_);  // (a hold still queued reads the flags until it ends; its errors are not ours to report here)
  }
  free_all();
}

void RunTimer::free_all() {
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
  if (host_flags_) cudaFreeHost(const_cast<int*>(host_flags_));
  start_ = stop_ = nullptr, host_flags_ = nullptr;
}

void RunTimer::begin() {
  check_cuda(cudaGetLastError(), who_, "a launch before the timed run");  // (not to be blamed on the hold below)
  host_flags_[0] = 0;
  host_flags_[1] = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  hold_stream<<<1, 1, 0, stream_>>>(device_flags_, hold_limit_ns_);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) {
    release();
    check_cuda(launched, who_, "launching the timer's hold");
  }
  const cudaError_t recorded = cudaEventRecord(start_, stream_);
  if (recorded != cudaSuccess) {
    abandon();  // (the hold must not outlive this run: it would give up during the next one)
    check_cuda(recorded, who_, "cudaEventRecord");
  }
}

void RunTimer::abandon() {
  release();
  cudaStreamSynchronize(stream_);  // (the run's own error, if any, is the one being reported)
}

void RunTimer::release() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  host_flags_[0] = 1;
}

double RunTimer::end() {
  const cudaError_t recorded = cudaEventRecord(stop_, stream_);
  release();
  check_cuda(recorded, who_, "cudaEventRecord");
  // (read as the run starts, while the host would wait anyway: the clock the power controller set for it, which
  // moves on a scale of milliseconds)
  if (sampling_) last_sample_ = monitor_->sample();
  check_cuda(cudaEventSynchronize(stop_), who_, "timed run");
  if (host_flags_[1] != 0) {
    std::ostringstream limit;
    limit << static_cast<double>(hold_limit_ns_) / 1e6;
    throw SubjectError(who_ + ": timed run: the device waited more than " + limit.str() +
                       " ms for the host to enqueue it (a run that synchronizes with the device inside it, a kernel launched for "
                       "the first time, whose module CUDA loads then, or a host stalled that long): its device time cannot be "
                       "told apart from the host's");
  }
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, start_, stop_), who_, "cudaEventElapsedTime");
  return ms;
}

void RunTimer::describe_device_state(Timing& t, std::uint64_t limits) const {
  if (!monitor_->available()) {
    t.device_state_note = "no clock or power readings: " + monitor_->unavailable_reason();
    return;
  }
  t.clock_limits = clock_limit_names(limits);
  const std::size_t runs = t.milliseconds.size();
  const auto gap = [&](const std::vector<double>& read, const char* what) {
    if (read.size() == runs) return;
    t.device_state_note += std::string(t.device_state_note.empty() ? "" : "; ") + what + " read for " + std::to_string(read.size()) + " of " + std::to_string(runs) + " runs";
  };
  gap(t.sm_clock_mhz, "the SM clock"), gap(t.power_w, "the power");
}

}  // namespace fc::kernels::cuda
