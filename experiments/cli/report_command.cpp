// `flashcheck report [--out DIR] [--quick|--full]`: the main job. Runs every experiment into
// DIR/records/, then draws DIR/index.html and DIR/summary.md from those records with the Python
// package reports/flashcheck_report (matplotlib, in the project's .venv). `--records DIR` draws a
// report from records made elsewhere (the concatenated shards of a cluster run, say) without running.
// An existing, non-empty DIR is refused unless --overwrite.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "experiments/cli/commands.hpp"
#include "experiments/cli/experiment_options.hpp"
#include "experiments/cli/registry_options.hpp"
#include "experiments/progress.hpp"
#include "experiments/run_experiments.hpp"

namespace fc::cli {
namespace {

namespace fs = std::filesystem;

struct Request : ExperimentRequest {
  std::string records;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// $FLASHCHECK_PYTHON, else the project's .venv (tools/bootstrap.sh makes it), else python3 on PATH.
std::string python() {
  if (const char* p = std::getenv("FLASHCHECK_PYTHON"); p && *p) return p;
  const fs::path venv = fs::path(FLASHCHECK_SOURCE_DIR) / ".venv" / "bin" / "python";
  return fs::exists(venv) ? venv.string() : "python3";
}

// Draws the report; returns the renderer's exit status.
int render(const std::string& records, const std::string& out) {
  const std::string command = "MPLBACKEND=Agg PYTHONPATH=" + shell_quote(std::string(FLASHCHECK_SOURCE_DIR) + "/reports") + " " + shell_quote(python()) +
                              " -m flashcheck_report " + shell_quote(records) + " --out " + shell_quote(out);
  std::fflush(stdout);
  const int status = std::system(command.c_str());
  return status == -1 ? 1 : WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int run(const Request& req) {
  const std::string out = req.out_dir("report");
  if (fs::exists(out) && !fs::is_directory(out)) throw std::invalid_argument("--out " + out + " is a file");
  if (fs::exists(out) && !fs::is_empty(out) && !req.overwrite) {
    throw std::invalid_argument("--out " + out + " exists and is not empty; choose another directory or pass --overwrite");
  }
  fs::create_directories(out);
  const auto start = std::chrono::steady_clock::now();
  bool all_ran = true;
  std::string records = req.records;
  if (records.empty()) {
    records = (fs::path(out) / "records").string();
    const gradcheck::Registry registry = make_registry(req.plugins);
    const experiments::ExperimentContext ctx = req.context(registry);
    std::vector<const experiments::Experiment*> chosen;
    for (const auto& e : experiments::all_experiments()) chosen.push_back(&e);
    experiments::RunSettings settings;
    settings.out_dir = records;
    settings.overwrite = req.overwrite;
    std::printf("flashcheck report: %zu experiments, scale %s, seed %llu -> %s\n", chosen.size(), std::string(experiments::name(ctx.scale)).c_str(),
                static_cast<unsigned long long>(ctx.seed), out.c_str());
    std::fflush(stdout);
    const experiments::RunOutcome o = experiments::run_experiments(chosen, ctx, settings);
    std::printf("experiments: %d items, %d records, %d failed, %s; records in %s\n", o.items, o.records, o.failed_items,
                experiments::Progress::duration(o.seconds).c_str(), records.c_str());
    all_ran = o.failed_items == 0;
  } else if (!fs::is_directory(records)) {
    throw std::invalid_argument("--records " + records + " is not a directory");
  }
  if (const int status = render(records, out); status != 0) {
    throw std::runtime_error("drawing the report failed (status " + std::to_string(status) + "); the records are in " + records +
                             "; draw again with: PYTHONPATH=reports .venv/bin/python -m flashcheck_report " + records + " --out " + out);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("report: %s (%s in all)\n", (fs::path(out) / "index.html").string().c_str(), experiments::Progress::duration(seconds).c_str());
  return all_ran ? 0 : 1;
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto req = std::make_shared<Request>();
  CLI::App* cmd = app.add_subcommand("report", "Run the experiments and draw the HTML report (index.html, summary.md, figures)");
  add_experiment_options(cmd, *req);
  cmd->add_option("--records", req->records, "Draw the report from the JSON Lines in this directory instead of running the experiments");
  add_plugin_option(cmd, req->plugins);
  cmd->callback([req] {
    if (run(*req) != 0) throw CheckFailed("some experiment items failed (see the report)");
  });
}

}  // namespace fc::cli
