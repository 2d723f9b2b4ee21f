#include "kernels/cuda/device_monitor.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

namespace fc::kernels::cuda {
namespace {

// NVML's C interface, the parts read here (nvml.h, which the toolkit here does not ship; the ABI is stable).
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;  // nvmlClockType_t NVML_CLOCK_SM
using Init = int (*)();
using ErrorString = const char* (*)(int);
using HandleByPciBusId = int (*)(const char*, void**);
constexpr unsigned kFieldPowerInstant = 186;  // NVML_FI_DEV_POWER_INSTANT: "current GPU power", in milliwatts
constexpr unsigned kScopeGpu = 0;             // a field's scope: the GPU as a whole

// nvmlFieldValue_t (40 bytes: the field, its scope, two timestamps, the value's type, the field's own return code, and
// the value as a union of 8 bytes)
struct FieldValue {
  std::uint32_t field_id = 0, scope_id = 0;
  std::int64_t timestamp = 0, latency_us = 0;
  int value_type = 0, nvml_return = 0;
  union {
    double d;
    unsigned ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    int si;
    unsigned short us;
  } value{};
};
static_assert(sizeof(FieldValue) == 40, "nvmlFieldValue_t is 40 bytes");

// A field's value as a double; NaN for a failed field or a type not expected here.
double field_number(const FieldValue& f) {
  if (f.nvml_return != kNvmlSuccess) return std::numeric_limits<double>::quiet_NaN();
  switch (f.value_type) {  // (nvmlValueType_t)
    case 0: return f.value.d;
    case 1: return f.value.ui;
    case 2: return static_cast<double>(f.value.ul);
    case 3: return static_cast<double>(f.value.ull);
    case 4: return static_cast<double>(f.value.sll);
    case 5: return f.value.si;
    case 6: return f.value.us;
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

std::string nvml_error(ErrorString error_string, int code) {
  const char* text = error_string != nullptr ? error_string(code) : nullptr;
  return text != nullptr ? std::string(text) : "NVML error " + std::to_string(code);
}

}  // namespace

DeviceMonitor::DeviceMonitor(const std::string& library, const std::string& pci_bus_id) {
  if (pci_bus_id.empty()) {
    reason_ = "no CUDA device";
    return;
  }
  // (never closed: the monitor lives as long as the process, and NVML's handles with the library)
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    reason_ = "NVML not loaded (" + library + ": " + (why != nullptr ? why : "dlopen failed") + ")";
    return;
  }
  const auto symbol = [&](const char* name) { return dlsym(lib, name); };
  const auto init = reinterpret_cast<Init>(symbol("nvmlInit_v2"));
  const auto error_string = reinterpret_cast<ErrorString>(symbol("nvmlErrorString"));
  const auto by_bus_id = reinterpret_cast<HandleByPciBusId>(symbol("nvmlDeviceGetHandleByPciBusId_v2"));
  clock_info_ = reinterpret_cast<ClockInfo>(symbol("nvmlDeviceGetClockInfo"));
  // (the reasons' older name, for drivers before the rename)
  event_reasons_ = reinterpret_cast<EventReasons>(symbol("nvmlDeviceGetCurrentClocksEventReasons"));
  if (event_reasons_ == nullptr) event_reasons_ = reinterpret_cast<EventReasons>(symbol("nvmlDeviceGetCurrentClocksThrottleReasons"));
  field_values_ = reinterpret_cast<FieldValues>(symbol("nvmlDeviceGetFieldValues"));
  if (init == nullptr || by_bus_id == nullptr || clock_info_ == nullptr) {
    reason_ = "NVML at " + library + " lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or nvmlDeviceGetClockInfo";
    return;
  }
  if (const int code = init(); code != kNvmlSuccess) {
    reason_ = "nvmlInit: " + nvml_error(error_string, code);
    return;
  }
  void* device = nullptr;
  if (const int code = by_bus_id(pci_bus_id.c_str(), &device); code != kNvmlSuccess || device == nullptr) {
    reason_ = "NVML has no device at PCI bus id " + pci_bus_id + ": " + nvml_error(error_string, code);
    return;
  }
  device_ = device;
}

const DeviceMonitor& DeviceMonitor::current() {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<DeviceMonitor>> monitors;  // CUDA device -> its monitor
  // (an error the caller left pending stays the caller's; one of the two calls below, on a machine without a device or
  // with too old a driver, is cleared, so that no later launch is blamed for it)
  const bool error_pending = cudaPeekAtLastError() != cudaSuccess;
  int device = -1;
  std::string bus_id, why;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    why = std::string("no CUDA device (") + cudaGetErrorName(e) + ")";
  } else {
    char text[32] = {};
    if (const cudaError_t b = cudaDeviceGetPCIBusId(text, sizeof text, device); b == cudaSuccess) {
      bus_id = text;
    } else {
      why = std::string("no PCI bus id for CUDA device ") + std::to_string(device) + " (" + cudaGetErrorName(b) + ")";
    }
  }
  if (!why.empty() && !error_pending) (void)cudaGetLastError();
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<DeviceMonitor>& monitor = monitors[device];
  if (!monitor) {
    monitor = std::make_unique<DeviceMonitor>("libnvidia-ml.so.1", bus_id);
    if (!why.empty()) monitor->reason_ = why;
  }
  return *monitor;
}

std::optional<DeviceSample> DeviceMonitor::sample() const {
  if (device_ == nullptr) return std::nullopt;
  unsigned mhz = 0;
  if (clock_info_(device_, kNvmlClockSm, &mhz) != kNvmlSuccess) return std::nullopt;
  DeviceSample s;
  s.sm_clock_mhz = mhz;
  unsigned long long reasons = 0;
  if (event_reasons_ != nullptr && event_reasons_(device_, &reasons) == kNvmlSuccess) s.clock_limits = reasons;
  FieldValue power;
  power.field_id = kFieldPowerInstant, power.scope_id = kScopeGpu;
  if (field_values_ != nullptr && field_values_(device_, 1, &power) == kNvmlSuccess) {
    // (the field's timestamp is the query's, not the reading's: on the H200 it was never older than 1 us, while the
    // reading rose from 130 to 600 W over 0.3 s of load; so no age is reported)
    s.power_w = field_number(power) * 1e-3;
  }
  return s;
}

std::vector<std::string> clock_limit_names(std::uint64_t reasons) {
  // (nvmlClocksEventReason*: bit 0 GpuIdle is left out, see the header)
  static const std::pair<std::uint64_t, const char*> kNames[] = {
      {0x2, "application clocks"}, {0x4, "power cap"},          {0x8, "hardware slowdown"}, {0x10, "sync boost"},
      {0x20, "thermal (software)"}, {0x40, "thermal (hardware)"}, {0x80, "power brake"},        {0x100, "display clocks"}};
  std::vector<std::string> names;
  std::uint64_t known = 0x1;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if (reasons & bit) names.emplace_back(name);
  }
  for (int bit = 0; bit < 64; ++bit) {
    if ((reasons >> bit & 1) != 0 && (known >> bit & 1) == 0) names.push_back("bit " + std::to_string(bit));
  }
  return names;
}

}  // namespace fc::kernels::cuda
