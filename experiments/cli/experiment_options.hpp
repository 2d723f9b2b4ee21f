// Options shared by `flashcheck experiment` and `flashcheck report`: which subjects, how large, the
// seed, the output directory (default reports/out/<kind>-<UTC time>, never an existing one).
#pragma once

#include <CLI/CLI.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "experiments/experiment.hpp"
#include "experiments/records.hpp"

namespace fc::cli {

struct ExperimentRequest {
  std::vector<std::string> subjects;  // comma-separated or repeated
  std::string scale = "quick";
  bool quick = false, full = false;
  std::uint64_t seed = 1;
  std::string out;
  bool overwrite = false;
  std::vector<std::string> plugins;

  std::vector<std::string> subject_names() const {
    std::vector<std::string> names;
    for (const std::string& list : subjects) {
      std::stringstream items(list);
      for (std::string item; std::getline(items, item, ',');) {
        if (!item.empty()) names.push_back(item);
      }
    }
    return names;
  }
  experiments::Scale chosen_scale() const {
    if (quick && full) throw std::invalid_argument("--quick and --full exclude each other");
    return full ? experiments::Scale::full : quick ? experiments::Scale::quick : experiments::parse_scale(scale);
  }
  // What the experiments see: the registry (which must outlive the context), subjects, scale, seed.
  experiments::ExperimentContext context(const gradcheck::Registry& registry) const {
    experiments::ExperimentContext ctx;
    ctx.registry = &registry;
    ctx.subjects = subject_names();
    ctx.scale = chosen_scale();
    ctx.seed = seed;
    return ctx;
  }
  // --out, or reports/out/<kind>-<YYYYmmdd-HHMMSS> under the source tree
  std::string out_dir(const std::string& kind) const {
    if (!out.empty()) return out;
    std::string t = experiments::utc_now();  // 2026-11-22T10:04:05Z
    std::string stamp;
    for (char c : t) {
      if (c == 'T') stamp += '-';
      else if (c != '-' && c != ':' && c != 'Z') stamp += c;
    }
    return std::string(FLASHCHECK_SOURCE_DIR) + "/reports/out/" + kind + "-" + stamp;
  }
};

inline void add_experiment_options(CLI::App* cmd, ExperimentRequest& r) {
  cmd->add_option("--subjects", r.subjects, "Only these subjects (comma-separated or repeated; default: each experiment's own)");
  cmd->add_option("--scale", r.scale, "Sizes: test (seconds), quick (minutes on a 2-core CPU), full")->capture_default_str();
  cmd->add_flag("--quick", r.quick, "Same as --scale quick");
  cmd->add_flag("--full", r.full, "Same as --scale full");
  cmd->add_option("--seed", r.seed, "Seed of every case and draw")->capture_default_str();
  cmd->add_option("--out", r.out, "Output directory (default reports/out/<kind>-<UTC time>)");
  cmd->add_flag("--overwrite", r.overwrite, "Replace existing files in --out");
}

}  // namespace fc::cli
