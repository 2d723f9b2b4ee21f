// JSON Lines records (DESIGN.md): one object per measured case, with the schema version, what was
// run (subject, op, policy, shape, mask, seed, ...), what was measured (metrics, verdict), the oracle
// precision, the device, the build commit and the time. Reports read only these files.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "gradcheck/checks.hpp"

namespace fc::experiments {

inline constexpr int kRecordSchemaVersion = 1;

// A number for JSON: finite values as numbers, non-finite ones as the strings "inf", "-inf", "nan"
// (JSON has no such numbers; null would lose which one it was).
nlohmann::json number(double x);

// The device a CPU subject ran on: "cpu: <model name>" (from /proc/cpuinfo where available).
std::string cpu_device_name();
// UTC time in ISO 8601, e.g. "2026-11-22T10:04:05Z".
std::string utc_now();

// The fields every record carries: schema, device, commit, time.
nlohmann::json record_header(const std::string& kind, const std::string& device);

// The device a subject runs on: what its SubjectInfo::device says (the GPU's name for cuda.* and
// torch.sdpa.*), else the CPU's model name for cpu.*, plugin.* (plugins run on the host unless they
// say otherwise) and torch.math; "unknown" otherwise.
std::string device_of(const kernels::SubjectInfo& info);

// x as printf's %g writes it (labels, file names).
std::string compact(double x);

// An experiment's record: `record` (a check_record, say) marked kind "experiment", with the
// experiment's name and the swept variable x = {"name": x_name, "value": x}.
nlohmann::json experiment_record(const std::string& experiment, nlohmann::json record, const std::string& x_name, double x);

// One `flashcheck check` case.
nlohmann::json check_record(const gradcheck::CaseReport& report, const std::string& subject, const std::string& device);

// Appends records to a JSON Lines file. Refuses an existing file unless `overwrite`.
class RecordWriter {
 public:
  RecordWriter(const std::string& path, bool overwrite);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace fc::experiments
