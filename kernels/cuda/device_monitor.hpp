// The device's SM clock, GPU power and clock-limit reasons, read from NVML (the driver's management library).
//
// Why the bench reads them: on an H200 both our forwards and cuDNN's run at the card's 700 W limit, where the power
// controller, not the cycle count alone, sets the speed (kernels/cuda/NOTES.md, "The forward against cuDNN's
// kernel"). A TFLOP/s figure then mixes two things a kernel researcher wants apart: work per clock and the clock the
// kernel's power draw leaves it. So RunTimer::time_each (run_timer.hpp) samples the monitor as each timed run starts.
//
// What a sample holds. The SM clock is the one the power controller has set, which moves on a scale of milliseconds.
// The power is NVML's latest "instantaneous" reading (field NVML_FI_DEV_POWER_INSTANT). It trails the load: on the
// H200, 5 runs of 12 ms right after idle read about 123 W, and under steady load the reading climbed from 130 to 600 W
// over 0.3 s. So it describes a run only after sustained load of the same kind: the bench's warm-up of 0.5 s or more
// a subject. The other power sources are coarser still: the plain power query averages over the last second on Ampere
// and later, and the energy counter advances in steps (a window of 18 ms of runs read 0 J or about 66 J).
//
// NVML is opened at run time (dlopen of libnvidia-ml.so.1, installed with the driver), so nothing links against it
// and a machine without a driver (CI) builds and runs the same binaries: there the monitor is unavailable and says why.
// Reading never throws: a reading that fails is absent, and the bench says why instead of giving a number.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace fc::kernels::cuda {

struct DeviceSample {
  double sm_clock_mhz = 0;
  double power_w = std::numeric_limits<double>::quiet_NaN();         // NVML's latest GPU power reading; NaN where refused
  std::uint64_t clock_limits = 0;                                     // NVML's clock event reasons at the sample (clock_limit_names)
};

class DeviceMonitor {
 public:
  // The monitor of the current CUDA device, opened on first use and kept for the process (one per device).
  static const DeviceMonitor& current();

  bool available() const { return device_ != nullptr; }
  // Why it is not available ("" when it is): no driver library, no CUDA device, NVML's own error.
  const std::string& unavailable_reason() const { return reason_; }
  // The SM clock, the latest power reading and the clock-limit reasons; nothing when unavailable or when NVML refuses
  // the clock.
  std::optional<DeviceSample> sample() const;

  // (exposed for the tests: a monitor of the device with this PCI bus id, through the library at `library`)
  DeviceMonitor(const std::string& library, const std::string& pci_bus_id);
  DeviceMonitor(const DeviceMonitor&) = delete;
  DeviceMonitor& operator=(const DeviceMonitor&) = delete;

 private:
  using ClockInfo = int (*)(void*, int, unsigned*);
  using EventReasons = int (*)(void*, unsigned long long*);
  using FieldValues = int (*)(void*, int, void*);
  void* device_ = nullptr;  // nvmlDevice_t
  ClockInfo clock_info_ = nullptr;
  EventReasons event_reasons_ = nullptr;
  FieldValues field_values_ = nullptr;
  std::string reason_;
};

// The names of the set bits of NVML's clock event reasons ("power cap", "thermal (software)", ...), in bit order;
// unknown bits as "bit N". "idle" (nothing running) is left out: the driver's reasons trail the load as its power
// reading does, so a sample as a run starts can still show the gap before it.
std::vector<std::string> clock_limit_names(std::uint64_t reasons);

}  // namespace fc::kernels::cuda
