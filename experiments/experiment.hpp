// A named experiment: a plan of independent work items, each of which measures something and returns
// JSON Lines records (records.hpp). The plan is a fixed, ordered list that depends only on the
// context, never on the shard, so `--shard I/N` (gradcheck/shard.hpp) runs items i with i mod N = I
// and the shards' records concatenate into the whole run's.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gradcheck/registry.hpp"

namespace fc::experiments {

// How large the sweeps are. test: seconds, for the unit tests and CI; quick: the default report,
// <= 5 minutes on a 2-core CPU; full: larger sizes and more cases (and, once they exist, the GPU
// subjects).
enum class Scale { test, quick, full };
std::string_view name(Scale s);
Scale parse_scale(const std::string& text);  // throws std::invalid_argument

struct ExperimentContext {
  const gradcheck::Registry* registry = nullptr;
  std::vector<std::string> subjects;  // empty: each experiment's default subjects
  Scale scale = Scale::quick;
  std::uint64_t seed = 1;
};

struct WorkItem {
  std::string label;   // what it measures, for progress lines
  double cost = 1;     // relative estimate of its run time, for the ETA
  std::function<std::vector<nlohmann::json>()> run;
};

struct Experiment {
  std::string name;
  std::string description;  // one line: what it measures and how
  std::function<std::vector<WorkItem>(const ExperimentContext&)> plan;
};

// Every experiment, in the order `report` runs them (catalog.cpp: one line each).
const std::vector<Experiment>& all_experiments();
// nullptr when there is none of that name.
const Experiment* find_experiment(const std::string& name);

// The subjects an experiment runs: the context's named ones (each must exist: std::invalid_argument
// otherwise) or every registered one, kept when `eligible` says so.
std::vector<kernels::Subject*> select_subjects(const ExperimentContext& ctx, const std::function<bool(const kernels::SubjectInfo&)>& eligible);

}  // namespace fc::experiments
