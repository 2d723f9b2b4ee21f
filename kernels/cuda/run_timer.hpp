// Device time of one run of a subject's launches, without the host's time to enqueue them.
//
// Device events recorded around a run on an idle stream time whatever the device waits for between them, the
// host's work between launches included (tensor maps, attribute calls, PyTorch's autograd and allocator): the
// start event completes at once, and a launch the host issues late leaves the device idle inside the timed region.
// On the H200 that added 0.2-0.25 ms of PyTorch's autograd work to each of cuDNN's 4k backward runs, whose device
// work takes 2.6 ms (kernels/cuda/NOTES.md, "The bench's clock"). RunTimer holds the stream first: a one-thread kernel
// polls a flag in mapped host memory, the start event, the run's launches and the stop event queue up behind it, and
// the host releases it once the stop event is enqueued, so the events see the device's work alone (nvbench's blocking
// kernel does the same). Only the timer's stream is held: work a run puts on another non-blocking stream is not timed.
//
// A run that waits for the device inside it (a synchronizing copy, cudaDeviceSynchronize) would wait for the hold:
// the hold gives up after hold_limit_ms and the run's time is refused with a SubjectError saying why. So does the first
// launch of a kernel: CUDA loads a module when its kernel is first launched (lazy loading, the default), and the load
// waits for the device (H200: refused for every subject with no warm-up run). Time only runs that were run before.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention_call.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/device_monitor.hpp"

namespace fc::kernels::cuda {

class RunTimer {
 public:
  RunTimer(std::string who, cudaStream_t stream, double hold_limit_ms = 1000);
  ~RunTimer();
  RunTimer(const RunTimer&) = delete;
  RunTimer& operator=(const RunTimer&) = delete;

  // The device milliseconds of run(), which enqueues work on the stream (and throws std::runtime_error for a
  // failed launch: rethrown as a SubjectError naming who).
  template <class F>
  double time(F&& run) {
    begin();
    try {
      run();
    } catch (const std::runtime_error& e) {
      abandon();
      throw SubjectError(who_ + ": timed run: " + e.what());
    } catch (...) {
      abandon();
      throw;
    }
    return end();
  }

  // `repeats` timed runs of `run` (time above), with the device's state as each started (Timing's sm_clock_mhz,
  // power_w and clock_limits; device_monitor.hpp).
  template <class F>
  Timing time_each(int repeats, F&& run) {
    Timing t;
    std::uint64_t limits = 0;
    sampling_ = true;
    for (int i = 0; i < repeats; ++i) {
      last_sample_.reset();
      try {
        t.milliseconds.push_back(time(run));
      } catch (...) {
        sampling_ = false;
        throw;
      }
      if (!last_sample_) continue;
      t.sm_clock_mhz.push_back(last_sample_->sm_clock_mhz), limits |= last_sample_->clock_limits;
      if (std::isfinite(last_sample_->power_w)) t.power_w.push_back(last_sample_->power_w);
    }
    sampling_ = false;
    describe_device_state(t, limits);
    return t;
  }

 private:
  void begin();    // the hold, then the start event
  double end();    // the stop event, the release, (in time_each) a sample of the device, the wait; the elapsed time
  void release();  // lets the hold kernel finish
  void abandon();  // a run that threw: the release, then the wait for what it enqueued, so the timer can be reused
  void free_all();

  // Timing's clock_limits and device_state_note from the runs' samples.
  void describe_device_state(Timing& t, std::uint64_t limits) const;

  std::string who_;
  cudaStream_t stream_;
  long long hold_limit_ns_;
  const DeviceMonitor* monitor_;  // (after the hold limit: a limit out of range is refused before any CUDA or NVML call)
  bool sampling_ = false;         // time_each's runs: end() samples the monitor
  std::optional<DeviceSample> last_sample_;  // (the last sampled run's; nothing where it could not be read)
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  volatile int* host_flags_ = nullptr;  // mapped pinned memory: [0] released by the host, [1] the hold gave up
  int* device_flags_ = nullptr;
};

// Device times of `run` in milliseconds, one per repeat, with the device's state while they ran (RunTimer::time_each),
// after untimed runs (each waited for): `warmup` of them (at least one, which loads the kernels' modules, above), and
// more until `warmup_seconds` have passed since the first began. A failure becomes a SubjectError naming `who`. The
// CUDA subjects launch on the legacy default stream.
template <class F>
Timing time_runs(const std::string& who, int warmup, double warmup_seconds, int repeats, F&& run) {
  RunTimer timer(who, nullptr);  // (first: its set-up, NVML's included, leaves no idle gap between warm-up and timed runs)
  const auto start = std::chrono::steady_clock::now();
  const auto warm_enough = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= warmup_seconds; };
  for (int i = 0; i < std::max(1, warmup) || !warm_enough(); ++i) run_kernels(who, "warm-up", run);
  return timer.time_each(repeats, run);
}

}  // namespace fc::kernels::cuda
