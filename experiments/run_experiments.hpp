// Runs experiments: plans each, runs the items the shard owns (progress on stderr), writes each
// experiment's records to DIR/<name>.jsonl (DIR/<name>.shard-I-of-N.jsonl for a shard, so the shards of
// one run can share a directory) and a closing `run` record to DIR/run[.shard-I-of-N].jsonl (scale,
// seed, experiments, shard, the verdict's defaults, the oracle ladder, the duration). An item that
// throws is recorded as a record with an "error" and counted; the others go on.
#pragma once

#include <string>
#include <vector>

#include "experiments/experiment.hpp"
#include "gradcheck/shard.hpp"

namespace fc::experiments {

struct RunSettings {
  std::string out_dir;
  gradcheck::Shard shard;
  bool overwrite = false;  // replace existing record files of the same names
};

struct RunOutcome {
  int items = 0;         // run by this shard
  int records = 0;
  int failed_items = 0;  // that threw
  double seconds = 0;
  std::vector<std::string> files;
};

// Throws std::invalid_argument before running anything when a record file exists (and not
// overwrite) or an experiment has nothing to run for the context's subjects.
RunOutcome run_experiments(const std::vector<const Experiment*>& experiments, const ExperimentContext& ctx, const RunSettings& settings);

}  // namespace fc::experiments
