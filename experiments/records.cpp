#include "experiments/records.hpp"

#include <chrono>
#include <cstdio>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "experiments/build_info.hpp"

namespace fc::experiments {

nlohmann::json number(double x) {
  if (std::isfinite(x)) return x;
  if (std::isnan(x)) return "nan";
  return x > 0 ? "inf" : "-inf";
}

std::string cpu_device_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return "cpu: " + line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "cpu";
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string device_of(const kernels::SubjectInfo& info) {
  if (!info.device.empty()) return info.device;
  if (info.name.rfind("cpu.", 0) == 0 || info.name.rfind("plugin.", 0) == 0 || info.name == "torch.math") return cpu_device_name();
  return "unknown";
}

std::string compact(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

nlohmann::json experiment_record(const std::string& experiment, nlohmann::json record, const std::string& x_name, double x) {
  record["kind"] = "experiment";
  record["experiment"] = experiment;
  record["x"] = {{"name", x_name}, {"value", number(x)}};
  return record;
}

nlohmann::json record_header(const std::string& kind, const std::string& device) {
  const BuildInfo& b = build_info();
  return {{"schema", kRecordSchemaVersion},
          {"kind", kind},
          {"device", device},
          {"commit", std::string(b.commit) + (b.dirty ? "-dirty" : "")},
          {"version", b.version},
          {"time", utc_now()}};
}

namespace {

nlohmann::json metrics(const ErrorMetrics& m) {
  return {{"max_abs", number(m.max_abs)},
          {"rms", number(m.rms)},
          {"mean_signed", number(m.mean_signed)},
          {"max_rel", number(m.max_rel)},
          {"relative_floor", number(m.relative_floor)},
          {"max_ulp", number(m.max_ulp)},
          {"cosine", number(m.cosine)},
          {"reference_max_abs", number(m.reference_max_abs)},
          {"reference_rms", number(m.reference_rms)},
          {"count", m.count},
          {"nonfinite_mismatch", m.nonfinite_mismatch}};
}

}  // namespace

nlohmann::json check_record(const gradcheck::CaseReport& r, const std::string& subject, const std::string& device) {
  nlohmann::json j = record_header("check", device);
  j["subject"] = subject;
  j["family"] = std::string(kernels::name(r.family));
  j["op"] = std::string(kernels::name(r.op));
  j["policy"] = r.policy().to_string();
  j["dtype"] = std::string(name(r.policy().format(r.family == kernels::Family::attention ? Role::q : Role::v)));
  if (r.family == kernels::Family::attention) {
    const auto& s = r.c.shape;
    j["shape"] = {{"B", s.batch}, {"Hq", s.heads_q}, {"Hkv", s.heads_kv}, {"Nq", s.seq_q}, {"Nk", s.seq_k}, {"d", s.head_dim}, {"dv", s.head_dim_v}};
    j["mask"] = std::string(kernels::name(r.c.mask));
    j["scale"] = r.c.scale;
    j["inputs"] = r.c.inputs.to_string();
    j["layout"] = std::string(gradcheck::name(r.c.layout));
    j["seed"] = r.c.seed;
  } else {
    const auto& s = r.attnres.shape;
    j["shape"] = {{"N", s.sources}, {"B", s.batch}, {"T", s.tokens}, {"D", s.dim}, {"S", s.layers}};
    j["eps"] = s.eps;
    j["mask"] = "none";
    j["inputs"] = r.attnres.inputs.to_string();
    j["seed"] = r.attnres.seed;
  }
  j["case"] = r.case_text();
  j["oracle"] = std::string(oracle::name(r.oracle_type));
  j["rho"] = r.options.rho;
  j["floor_u"] = r.options.floor_u;
  j["verdict"] = !r.discarded.empty() ? "discarded" : r.pass ? "pass" : "fail";
  if (!r.discarded.empty()) j["discarded"] = r.discarded;
  j["weak_tensors"] = r.weak_tensors;
  j["worst_ratio"] = number(r.worst_ratio);
  j["worst_ulp"] = number(r.worst_ulp);
  j["seconds"] = r.seconds;
  if (!r.error.empty()) j["error"] = r.error;
  nlohmann::json tensors = nlohmann::json::object();
  for (const gradcheck::TensorVerdict& v : r.tensors) {
    tensors[v.tensor] = {{"format", std::string(name(v.format))}, {"subject", metrics(v.subject)}, {"baseline", metrics(v.baseline)},
                         {"floor", number(v.floor)}, {"ratio", number(v.ratio)}, {"baseline_usable", v.baseline_usable},
                         {"discriminating", v.discriminating}, {"pass", v.pass}};
  }
  j["tensors"] = tensors;
  nlohmann::json properties = nlohmann::json::array();
  for (const gradcheck::PropertyCheck& p : r.properties) {
    properties.push_back({{"name", p.name}, {"pass", p.pass}, {"skipped", p.skipped}, {"detail", p.detail}});
  }
  j["properties"] = properties;
  return j;
}

RecordWriter::RecordWriter(const std::string& path, bool overwrite) : path_(path) {
  if (std::filesystem::exists(path) && !overwrite) {
    throw std::invalid_argument(path + " exists; choose another file or pass --overwrite");
  }
  if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty()) std::filesystem::create_directories(dir);
  out_.open(path, std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot write " + path);
}

void RecordWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << "\n";
  out_.flush();
  if (!out_) throw std::runtime_error("writing " + path_ + " failed");
}

}  // namespace fc::experiments
