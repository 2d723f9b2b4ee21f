// `flashcheck experiment NAME... [--subjects ...] [--out DIR] [--shard I/N]`: runs named experiments
// and writes their JSON Lines records; `flashcheck experiment --list` lists them.
#include <cstdio>
#include <memory>

#include "experiments/cli/commands.hpp"
#include "experiments/cli/experiment_options.hpp"
#include "experiments/cli/registry_options.hpp"
#include "experiments/progress.hpp"
#include "experiments/run_experiments.hpp"

namespace fc::cli {
namespace {

struct Request : ExperimentRequest {
  std::vector<std::string> names;
  bool list = false;
  std::string shard = "0/1";
};

void print_list() {
  std::printf("%-18s %s\n", "experiment", "what it measures");
  for (const experiments::Experiment& e : experiments::all_experiments()) std::printf("%-18s %s\n", e.name.c_str(), e.description.c_str());
  std::printf("(`flashcheck experiment all` runs every one; `flashcheck report` runs them and draws the report)\n");
}

int run(const Request& req) {
  if (req.list) {
    print_list();
    return 0;
  }
  if (req.names.empty()) throw std::invalid_argument("name an experiment (flashcheck experiment --list), or `all`");
  std::vector<const experiments::Experiment*> chosen;
  for (const std::string& n : req.names) {
    if (n == "all") {
      for (const auto& e : experiments::all_experiments()) chosen.push_back(&e);
      continue;
    }
    const experiments::Experiment* e = experiments::find_experiment(n);
    if (!e) throw std::invalid_argument("no experiment '" + n + "' (flashcheck experiment --list)");
    chosen.push_back(e);
  }
  const gradcheck::Registry registry = make_registry(req.plugins);
  const experiments::ExperimentContext ctx = req.context(registry);
  experiments::RunSettings settings;
  settings.out_dir = req.out_dir("experiments");
  settings.shard = gradcheck::Shard::parse(req.shard);
  settings.overwrite = req.overwrite;
  std::printf("flashcheck experiment: %zu experiment(s), scale %s, seed %llu, shard %s -> %s\n", chosen.size(),
              std::string(experiments::name(ctx.scale)).c_str(), static_cast<unsigned long long>(ctx.seed), settings.shard.to_string().c_str(),
              settings.out_dir.c_str());
  std::fflush(stdout);
  const experiments::RunOutcome o = experiments::run_experiments(chosen, ctx, settings);
  for (const std::string& f : o.files) std::printf("records: %s\n", f.c_str());
  std::printf("experiment: %d items, %d records, %d failed, %s\n", o.items, o.records, o.failed_items,
              experiments::Progress::duration(o.seconds).c_str());
  return o.failed_items == 0 ? 0 : 1;
}

}  // namespace

void add_experiment_command(CLI::App& app) {
  auto req = std::make_shared<Request>();
  CLI::App* cmd = app.add_subcommand("experiment", "Run named precision and memory experiments; JSON Lines records (--list shows them)");
  cmd->add_option("name", req->names, "Experiment names, or `all`");
  cmd->add_flag("--list", req->list, "List the experiments");
  add_experiment_options(cmd, *req);
  cmd->add_option("--shard", req->shard, "Run shard I of N (0 <= I < N) of the work; the shards' records concatenate")->capture_default_str();
  add_plugin_option(cmd, req->plugins);
  cmd->callback([req] {
    if (run(*req) != 0) throw CheckFailed("some experiment items failed (see the records' \"error\")");
  });
}

}  // namespace fc::cli
