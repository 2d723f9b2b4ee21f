// The device's SM clock, clock-limit reasons and energy counter, read from NVML (the driver's management library).
//
// Why the bench reads them: on an H200 both our forwards and cuDNN's run at the card's 700 W limit, where the power
// controller, not the cycle count alone, sets the speed (kernels/cuda/NOTES.md, "The forward against cuDNN's
// kernel"). A TFLOP/s figure then mixes two things a kernel researcher wants apart: work per clock and the clock the
// kernel's power draw leaves it. So every timed run records the SM clock as it starts, and the timed runs together
// the board's mean power (RunTimer::time_each, run_timer.hpp).
//
// NVML is opened at run time (dlopen of libnvidia-ml.so.1, installed with the driver), so nothing links against it
// and a machine without a driver (CI) builds and runs the same binaries: there the monitor is unavailable and says why.
// Reading never throws: a reading that fails is absent, and the bench prints the reason instead of a number.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fc::kernels::cuda {

struct DeviceSample {
  double sm_clock_mhz = 0;
  std::uint64_t clock_limits = 0;  // NVML's clock event reasons at the sample (clock_limit_names)
};

class DeviceMonitor {
 public:
  // The monitor of the current CUDA device, opened on first use and kept for the process (one per device).
  static const DeviceMonitor& current();

  bool available() const { return device_ != nullptr; }
  // Why it is not available ("" when it is): no driver library, no CUDA device, NVML's own error.
  const std::string& unavailable_reason() const { return reason_; }
  // The SM clock and the clock-limit reasons now; nothing when unavailable or when NVML refuses the query.
  std::optional<DeviceSample> sample() const;
  // The board's energy counter (joules since the driver loaded); nothing when unavailable or not supported.
  std::optional<double> energy_joules() const;

  // (exposed for the tests: a monitor of the device with this PCI bus id, through the library at `library`)
  DeviceMonitor(const std::string& library, const std::string& pci_bus_id);
  DeviceMonitor(const DeviceMonitor&) = delete;
  DeviceMonitor& operator=(const DeviceMonitor&) = delete;

 private:
  using ClockInfo = int (*)(void*, int, unsigned*);
  using EventReasons = int (*)(void*, unsigned long long*);
  using Energy = int (*)(void*, unsigned long long*);
  void* device_ = nullptr;  // nvmlDevice_t
  ClockInfo clock_info_ = nullptr;
  EventReasons event_reasons_ = nullptr;
  Energy energy_ = nullptr;
  std::string reason_;
};

// The names of the set bits of NVML's clock event reasons ("power cap", "thermal (software)", ...), in bit order;
// unknown bits as "bit N". "idle" (nothing running) is left out: a sample between two runs shows it.
std::vector<std::string> clock_limit_names(std::uint64_t reasons);

}  // namespace fc::kernels::cuda
