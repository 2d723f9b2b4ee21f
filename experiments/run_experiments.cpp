#include "experiments/run_experiments.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "experiments/progress.hpp"
#include "experiments/records.hpp"
#include "gradcheck/verdict.hpp"
#include "oracle/ladder.hpp"

namespace fc::experiments {
namespace {

std::string file_for(const RunSettings& s, const std::string& stem) {
  const std::string suffix = s.shard.whole() ? "" : ".shard-" + std::to_string(s.shard.index) + "-of-" + std::to_string(s.shard.count);
  return (std::filesystem::path(s.out_dir) / (stem + suffix + ".jsonl")).string();
}

}  // namespace

RunOutcome run_experiments(const std::vector<const Experiment*>& experiments, const ExperimentContext& ctx, const RunSettings& settings) {
  const auto start = std::chrono::steady_clock::now();
  struct Planned {
    const Experiment* experiment;
    std::vector<WorkItem> items;  // this shard's
    std::string file;
  };
  std::vector<Planned> plans;
  double total_cost = 0;
  int total_items = 0;
  for (const Experiment* e : experiments) {
    std::vector<WorkItem> all = e->plan(ctx);
    if (all.empty()) throw std::invalid_argument(e->name + ": nothing to run for the subjects given (flashcheck experiment --list says what each needs)");
    Planned p{e, {}, file_for(settings, e->name)};
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (settings.shard.owns(i)) p.items.push_back(std::move(all[i]));
    }
    for (const WorkItem& w : p.items) total_cost += w.cost;
    total_items += static_cast<int>(p.items.size());
    plans.push_back(std::move(p));
  }
  const std::string run_file = file_for(settings, "run");
  // refuse existing files before anything runs
  for (const Planned& p : plans) {
    if (std::filesystem::exists(p.file) && !settings.overwrite) throw std::invalid_argument(p.file + " exists; choose another --out or pass --overwrite");
  }
  if (std::filesystem::exists(run_file) && !settings.overwrite) throw std::invalid_argument(run_file + " exists; choose another --out or pass --overwrite");

  RunOutcome outcome;
  Progress progress("experiments", total_cost, total_items);
  nlohmann::json names = nlohmann::json::array();
  for (Planned& p : plans) {
    names.push_back(p.experiment->name);
    RecordWriter writer(p.file, settings.overwrite);
    outcome.files.push_back(p.file);
    for (WorkItem& w : p.items) {
      try {
        for (const nlohmann::json& r : w.run()) {
          nlohmann::json record = r;
          if (!settings.shard.whole()) record["shard"] = settings.shard.to_string();
          writer.write(record);
          ++outcome.records;
        }
      } catch (const std::exception& e) {
        nlohmann::json record = record_header("experiment", "unknown");
        record["experiment"] = p.experiment->name;
        record["item"] = w.label;
        record["verdict"] = "error";
        record["error"] = e.what();
        writer.write(record);
        ++outcome.failed_items;
        std::fprintf(stderr, "\n%s: %s: %s\n", p.experiment->name.c_str(), w.label.c_str(), e.what());
      }
      ++outcome.items;
      progress.done(w.cost, p.experiment->name + ": " + w.label);
    }
  }
  progress.finish();
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::json run = record_header("run", cpu_device_name());
  run["scale"] = std::string(name(ctx.scale));
  run["seed"] = ctx.seed;
  run["experiments"] = names;
  run["subjects"] = ctx.subjects;
  run["shard"] = settings.shard.to_string();
  const gradcheck::VerdictOptions verdict;
  run["rho"] = verdict.rho;
  run["floor_u"] = verdict.floor_u;
  for (Format f : kAllFormats) {
    run["oracle_ladder"][std::string(name(f))] = std::string(oracle::name(oracle::oracle_type_for(PrecisionPolicy::uniform(f))));
  }
  run["items"] = outcome.items;
  run["records"] = outcome.records;
  run["failed_items"] = outcome.failed_items;
  run["seconds"] = outcome.seconds;
  RecordWriter(run_file, settings.overwrite).write(run);
  outcome.files.push_back(run_file);
  return outcome;
}

}  // namespace fc::experiments
