// DeviceMonitor (device_monitor.hpp): NVML's SM clock, board power and clock-limit reasons, and RunTimer::time_each,
// which gives the bench each run's clock and the runs' median power. Without NVML or a device the monitor says why and
// reads nothing (those tests run everywhere); on a GPU machine it must read plausible values (the GPU tests).
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

TEST(DeviceMonitor, WithoutADeviceSaysSo) {
  const DeviceMonitor monitor("libnvidia-ml.so.1", "");
  EXPECT_FALSE(monitor.available());
  EXPECT_EQ(monitor.unavailable_reason(), "no CUDA device");
  EXPECT_FALSE(monitor.sample());
}

TEST(DeviceMonitor, NamesTheClockLimitsButIdle) {
  // (NVML's nvmlClocksEventReason* bits: 0x1 idle, 0x4 the software power cap, 0x20 software thermal slowdown)
  EXPECT_EQ(clock_limit_names(0x4), std::vector<std::string>{"power cap"});
  EXPECT_EQ(clock_limit_names(0x1 | 0x4 | 0x20), (std::vector<std::string>{"power cap", "thermal (software)"}));
  EXPECT_EQ(clock_limit_names(0), std::vector<std::string>{});
  EXPECT_EQ(clock_limit_names(std::uint64_t{1} << 40), std::vector<std::string>{"bit 40"});
}

// Device memory written over and over: load that raises the board's power (1 GiB at a few TB/s is a fraction of a
// millisecond a pass).
struct Load {
  static constexpr std::size_t kBytes = std::size_t{1} << 30;
  void* p = nullptr;
  Load() { EXPECT_EQ(cudaMalloc(&p, kBytes), cudaSuccess); }
  ~Load() { cudaFree(p); }
  void passes(int n) const {
    for (int i = 0; i < n; ++i) EXPECT_EQ(cudaMemsetAsync(p, i & 0xff, kBytes, nullptr), cudaSuccess);
  }
};

TEST(DeviceMonitor, ReadsTheClockAndTheEnergyOfTheDevice) {
  REQUIRE_GPU();
  const DeviceMonitor& monitor = DeviceMonitor::current();
  ASSERT_TRUE(monitor.available()) << monitor.unavailable_reason();
  const auto sample = monitor.sample();
  ASSERT_TRUE(sample);
  // (any SM clock of a CUDA GPU lies well inside this range)
  EXPECT_GT(sample->sm_clock_mhz, 100);
  EXPECT_LT(sample->sm_clock_mhz, 5000);
  // RunTimer reads a sample between each timed run's release and its wait: a slow read would leave the device idle
  // after short runs and so change the duty cycle the power controller sees. A tenth of the bench's shortest runs
  // (about 0.3 ms) bounds it.
  const auto read_start = std::chrono::steady_clock::now();
  constexpr int kReads = 100;
  for (int i = 0; i < kReads; ++i) ASSERT_TRUE(monitor.sample());
  const double read_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - read_start).count() / kReads;
  std::printf("DeviceMonitor: a sample takes %.1f us; SM clock %.0f MHz\n", read_us, sample->sm_clock_mhz);
  EXPECT_LT(read_us, 30.0);
  // The power: read idle-ish and again under load, where it must lie in a data-centre GPU's range and above the first.
  ASSERT_TRUE(std::isfinite(sample->power_w)) << "no instantaneous power (NVML_FI_DEV_POWER_INSTANT)";
  const Load load;
  std::vector<double> loaded;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 0.3) {
    load.passes(50);
    const auto s = monitor.sample();  // (read while the passes run)
    ASSERT_TRUE(s);
    loaded.push_back(s->power_w);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  const double most = *std::max_element(loaded.begin(), loaded.end());
  std::printf("DeviceMonitor: %.0f W before the load, up to %.0f W under it (%zu samples)\n", sample->power_w, most, loaded.size());
  // (any data-centre GPU draws more than 10 W and less than 2 kW; memsets over 1 GiB raise the draw above the first)
  EXPECT_GT(sample->power_w, 10);
  EXPECT_LT(most, 2000);
  EXPECT_GT(most, sample->power_w);
}

TEST(RunTimer, TimeEachGivesEveryRunsClockAndThePowerOfTheRuns) {
  REQUIRE_GPU();
  const Load load;
  RunTimer timer("test", nullptr);
  const auto run = [&] { load.passes(50); };  // (milliseconds a run)
  (void)timer.time(run);
  const Timing t = timer.time_each(5, run);
  ASSERT_EQ(t.milliseconds.size(), 5u);
  ASSERT_EQ(t.sm_clock_mhz.size(), 5u) << t.device_state_note;
  std::printf("time_each: runs of %.2f ms at %.0f MHz, %.0f W (%s)\n", t.milliseconds[0], t.sm_clock_mhz[0], t.power_w, t.device_state_note.c_str());
  for (double mhz : t.sm_clock_mhz) {
    EXPECT_GT(mhz, 100);
    EXPECT_LT(mhz, 5000);
  }
  EXPECT_EQ(t.device_state_note, "");  // (every run's clock and power read)
  EXPECT_GT(t.power_w, 10);
  EXPECT_LT(t.power_w, 2000);
  for (const std::string& limit : t.clock_limits) EXPECT_FALSE(limit.empty());
}

}  // namespace
}  // namespace fc::kernels::cuda
