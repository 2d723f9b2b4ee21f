// DeviceMonitor (device_monitor.hpp): NVML's SM clock, GPU power and clock-limit reasons, and RunTimer::time_each,
// which gives the bench each run's readings. Without NVML or a device the monitor says why, reads nothing and leaves
// no CUDA error behind (those tests run everywhere); on a GPU machine it must read plausible values (the GPU tests,
// which tools/gpu-check.sh runs as 16 shards at once: other shards may load the GPU meanwhile, so no test here
// compares readings taken at two moments).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/device_monitor.hpp"
#include "kernels/cuda/run_timer.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"

namespace fc::kernels::cuda {
namespace {

TEST(DeviceMonitor, WithoutTheLibraryReadsNothingAndSaysWhy) {
  const DeviceMonitor monitor("libflashcheck-no-such-nvml.so.1", "00000000:01:00.0");
  EXPECT_FALSE(monitor.available());
  EXPECT_NE(monitor.unavailable_reason().find("NVML not loaded (libflashcheck-no-such-nvml.so.1"), std::string::npos) << monitor.unavailable_reason();
  EXPECT_FALSE(monitor.sample());
}

TEST(DeviceMonitor, WithoutADeviceSaysSoAndLeavesNoCudaError) {
  if (device_unavailable_reason().empty()) GTEST_SKIP() << "a CUDA device is present: this is the machine-without-a-device case (CI)";
  // The CUDA error state is the same after the monitor's calls as before them: a later launch's check must not find
  // the monitor's failed cudaGetDevice. (Without a driver at all the runtime's error is sticky, the same before and
  // after; with a driver but no visible device it is cleared.)
  (void)cudaGetLastError();
  const cudaError_t before = cudaPeekAtLastError();
  const DeviceMonitor& monitor = DeviceMonitor::current();
  EXPECT_EQ(cudaPeekAtLastError(), before) << cudaGetErrorName(cudaPeekAtLastError()) << " against " << cudaGetErrorName(before);
  EXPECT_FALSE(monitor.available());
  EXPECT_NE(monitor.unavailable_reason().find("no CUDA device ("), std::string::npos) << monitor.unavailable_reason();
  EXPECT_FALSE(monitor.sample());
}

TEST(DeviceMonitor, NamesTheClockLimitsButIdle) {
  // (NVML's nvmlClocksEventReason* bits: 0x1 idle, 0x4 the software power cap, 0x20 software thermal slowdown)
  EXPECT_EQ(clock_limit_names(0x4), std::vector<std::string>{"power cap"});
  EXPECT_EQ(clock_limit_names(0x1 | 0x4 | 0x20), (std::vector<std::string>{"power cap", "thermal (software)"}));
  EXPECT_EQ(clock_limit_names(0), std::vector<std::string>{});
  EXPECT_EQ(clock_limit_names(std::uint64_t{1} << 40), std::vector<std::string>{"bit 40"});
}

// Device memory written over and over: load for the GPU (1 GiB at a few TB/s is a fraction of a millisecond a pass).
struct Load {
  static constexpr std::size_t kBytes = std::size_t{1} << 30;
  void* p = nullptr;
  Load() { EXPECT_EQ(cudaMalloc(&p, kBytes), cudaSuccess); }
  ~Load() { cudaFree(p); }
  void passes(int n) const {
    for (int i = 0; i < n; ++i) EXPECT_EQ(cudaMemsetAsync(p, i & 0xff, kBytes, nullptr), cudaSuccess);
  }
};

// (any SM clock of a CUDA GPU, and any power a data-centre GPU draws, lie well inside these ranges)
void expect_plausible(const DeviceSample& s) {
  EXPECT_GT(s.sm_clock_mhz, 100);
  EXPECT_LT(s.sm_clock_mhz, 5000);
  EXPECT_GT(s.power_w, 10) << "no instantaneous power (NVML_FI_DEV_POWER_INSTANT)";
  EXPECT_LT(s.power_w, 2000);
}

TEST(DeviceMonitor, ReadsTheClockAndThePowerOfTheDevice) {
  REQUIRE_GPU();
  const DeviceMonitor& monitor = DeviceMonitor::current();
  ASSERT_TRUE(monitor.available()) << monitor.unavailable_reason();
  const Load load;
  std::vector<DeviceSample> samples;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 0.3) {
    load.passes(50);
    const auto s = monitor.sample();  // (read while the passes run)
    ASSERT_TRUE(s);
    samples.push_back(*s);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  for (const DeviceSample& s : samples) expect_plausible(s);
  std::printf("DeviceMonitor: %zu samples under load: SM clock %.0f-%.0f MHz, power %.0f-%.0f W\n", samples.size(),
              std::min_element(samples.begin(), samples.end(), [](auto& a, auto& b) { return a.sm_clock_mhz < b.sm_clock_mhz; })->sm_clock_mhz,
              std::max_element(samples.begin(), samples.end(), [](auto& a, auto& b) { return a.sm_clock_mhz < b.sm_clock_mhz; })->sm_clock_mhz,
              std::min_element(samples.begin(), samples.end(), [](auto& a, auto& b) { return a.power_w < b.power_w; })->power_w,
              std::max_element(samples.begin(), samples.end(), [](auto& a, auto& b) { return a.power_w < b.power_w; })->power_w);
}

TEST(DeviceMonitor, ASampleCostsMicroseconds) {
  REQUIRE_GPU();
  const DeviceMonitor& monitor = DeviceMonitor::current();
  ASSERT_TRUE(monitor.available()) << monitor.unavailable_reason();
  // RunTimer reads a sample between each timed run's release and its wait: a slow one would leave the device idle
  // after the shortest runs (about 0.07 ms: the causal forward at N = 1024) and so change the duty cycle the power
  // controller sees. The fastest of 5 batches of 20, against a tenth of those runs (CPU contention from other shards
  // can slow one batch, not all).
  double fastest_us = 1e9;
  for (int batch = 0; batch < 5; ++batch) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(monitor.sample());
    fastest_us = std::min(fastest_us, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / 20);
  }
  std::printf("DeviceMonitor: a sample takes %.1f us\n", fastest_us);
  EXPECT_LT(fastest_us, 7.0);
}

TEST(RunTimer, TimeEachReadsTheDeviceAsEveryRunStarts) {
  REQUIRE_GPU();
  const Load load;
  RunTimer timer("test", nullptr);
  const auto run = [&] { load.passes(50); };  // (milliseconds a run)
  (void)timer.time(run);
  const Timing t = timer.time_each(5, run);
  ASSERT_EQ(t.milliseconds.size(), 5u);
  EXPECT_EQ(t.device_state_note, "");  // (every run's clock and power read)
  ASSERT_EQ(t.sm_clock_mhz.size(), 5u);
  ASSERT_EQ(t.power_w.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    DeviceSample s;
    s.sm_clock_mhz = t.sm_clock_mhz[i], s.power_w = t.power_w[i];
    expect_plausible(s);
  }
  std::printf("time_each: runs of %.2f ms at %.0f MHz, %.0f W\n", t.milliseconds[0], t.sm_clock_mhz[0], t.power_w[0]);
}

}  // namespace
}  // namespace fc::kernels::cuda
