// `flashcheck check`: property-based checking of one subject against the oracle, per op and format.
// Exit 0 if every case passes, 1 on a failure (the shrunk case, a command reproducing it, and an entry
// in the regression corpus), 2 on a usage error.
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/cli/commands.hpp"
#include "experiments/cli/registry_options.hpp"
#include "experiments/records.hpp"
#include "gradcheck/attnres_checks.hpp"
#include "gradcheck/corpus.hpp"
#include "gradcheck/runner.hpp"
#include "oracle/ladder.hpp"

namespace fc::cli {
namespace {

struct CheckRequest {
  std::string subject;
  std::string op = "all";
  std::vector<std::string> dtypes;
  std::string policy;
  int cases = 100;
  std::uint64_t seed = 1;
  std::string json;
  bool overwrite = false;
  std::vector<std::string> plugins;
  double rho = 2.0;
  double floor_u = 1.0;
  std::vector<std::string> case_texts;
  int max_seq = 160;
  int max_head_dim = 128;
  bool no_corpus = false;
  std::string corpus;
  std::string shard = "0/1";
};

std::string quote(const std::string& s) { return "\"" + s + "\""; }

// Round-trips: 17 significant digits at most, fewer when they suffice.
std::string shortest_text(double x) {
  for (int digits = 1; digits <= 17; ++digits) {
    std::ostringstream s;
    s.precision(digits);
    s << x;
    if (std::stod(s.str()) == x) return s.str();
  }
  return std::to_string(x);
}

// Runs a validation, turning a subject's refusal into a usage error (exit 2) that points at `list`.
template <class F>
void usage_check(F&& validate) {
  try {
    validate();
  } catch (const kernels::SubjectError& e) {
    throw std::invalid_argument(std::string(e.what()) + " (flashcheck list shows what each subject supports)");
  }
}

void print_case(const gradcheck::CaseReport& r) {
  std::printf("  case  %s\n  op %s, oracle %s: %s (%.3f s)\n", r.case_text().c_str(), std::string(kernels::name(r.op)).c_str(),
              std::string(oracle::name(r.oracle_type)).c_str(), !r.discarded.empty() ? "discarded" : r.pass ? "pass" : "FAIL", r.seconds);
  if (!r.discarded.empty()) std::printf("  discarded: %s\n", r.discarded.c_str());
  if (!r.error.empty()) std::printf("  subject error: %s\n", r.error.c_str());
  std::printf("  %-5s %-5s %12s %12s %12s %10s %10s %9s  %s\n", "out", "fmt", "max err", "baseline", "floor", "ratio", "max ULP",
              "cosine", "verdict");
  for (const auto& v : r.tensors) {
    std::printf("  %-5s %-5s %12.4g %12.4g %12.4g %10.3g %10.3g %9.6f  %s\n", v.tensor.c_str(), std::string(name(v.format)).c_str(),
                v.subject.max_abs, v.baseline.max_abs, v.floor, v.ratio, v.subject.max_ulp, v.subject.cosine,
                !v.pass ? "FAIL" : v.discriminating ? "ok" : "ok (weak: floor >= 1/4 of max |exact|)");
  }
  for (const auto& p : r.properties) {
    std::printf("  %-12s %s: %s\n", p.name.c_str(), p.skipped ? "skipped" : (p.pass ? "ok" : "FAIL"), p.detail.c_str());
  }
}

int run(const CheckRequest& req) {
  gradcheck::Registry registry = make_registry(req.plugins);
  kernels::Subject* subject = registry.find(req.subject);
  if (!subject) {
    std::string names;
    for (const auto* s : registry.subjects()) names += " " + s->info().name;
    throw std::invalid_argument("--subject: no subject '" + req.subject + "'; known:" + names + " (flashcheck list)");
  }
  const kernels::SubjectInfo& info = subject->info();
  std::vector<kernels::Op> ops;
  if (req.op == "all") {
    ops = info.ops;
  } else {
    const kernels::Op op = req.op == "fwd" ? kernels::Op::fwd : req.op == "bwd" ? kernels::Op::bwd : req.op == "bwdbwd" ? kernels::Op::bwdbwd
                                                                                                                        : throw std::invalid_argument("--op: '" + req.op + "' (fwd, bwd, bwdbwd, all)");
    if (!info.supports(op)) throw std::invalid_argument(info.name + " does not implement " + req.op);
    ops = {op};
  }
  const gradcheck::VerdictOptions verdict{req.rho, req.floor_u};
  if (!(req.rho >= 1) || !(req.floor_u >= 0) || !std::isfinite(req.rho) || !std::isfinite(req.floor_u)) {
    throw std::invalid_argument("--rho must be >= 1 and --floor-u >= 0, both finite");
  }
  const gradcheck::Shard shard = gradcheck::Shard::parse(req.shard);
  if (!shard.whole() && !req.case_texts.empty()) throw std::invalid_argument("--shard splits generated cases; --case runs exactly the cases given");
  const std::string device = experiments::cpu_device_name();
  std::optional<experiments::RecordWriter> records;
  if (!req.json.empty()) records.emplace(req.json, req.overwrite);

  // Explicit cases: each run once, reported in full. One outside the subject's declared support is a
  // usage error (exit 2), not a failure of the subject.
  if (!req.case_texts.empty()) {
    // parse and validate every case first: a bad one is a usage error before anything runs
    for (const std::string& text : req.case_texts) {
      if (info.family == kernels::Family::attnres) {
        const gradcheck::AttnResCase c = gradcheck::AttnResCase::parse(text);
        usage_check([&] {
          kernels::validate_policy(info, c.policy);
          for (kernels::Op op : ops) kernels::validate_attnres_problem(info, op, c.shape);
        });
      } else {
        const gradcheck::Case c = gradcheck::Case::parse(text);
        usage_check([&] {
          kernels::validate_policy(info, c.policy);
          for (kernels::Op op : ops) kernels::validate_problem(info, op, c.shape, c.mask, c.scale);
        });
      }
    }
    bool all = true;
    for (const std::string& text : req.case_texts) {
      for (kernels::Op op : ops) {
        const gradcheck::CaseReport r = gradcheck::check_case_text(*subject, text, op, verdict);
        print_case(r);
        if (records) records->write(experiments::check_record(r, info.name, device));
        all = all && r.pass;
      }
    }
    std::printf("check: %s\n", all ? "PASS" : "FAIL");
    return all ? 0 : 1;
  }

  std::vector<PrecisionPolicy> policies;
  if (!req.policy.empty()) {
    policies.push_back(PrecisionPolicy::parse(req.policy));
  } else if (req.dtypes.empty()) {
    for (Format f : info.formats) policies.push_back(PrecisionPolicy::uniform(f));
  } else {
    for (const std::string& list : req.dtypes) {
      std::stringstream items(list);
      for (std::string item; std::getline(items, item, ',');) {
        const auto f = parse_format(item);
        if (!f) throw std::invalid_argument("--dtype: unknown format '" + item + "'");
        policies.push_back(PrecisionPolicy::uniform(*f));
      }
    }
  }
  for (const PrecisionPolicy& p : policies) usage_check([&] { kernels::validate_policy(info, p); });

  std::printf("flashcheck check: %s, %d cases per op and policy, seed %llu%s\n", info.name.c_str(), req.cases,
              static_cast<unsigned long long>(req.seed), shard.whole() ? "" : (", shard " + shard.to_string() + ": the cases i with i mod " +
                                                                              std::to_string(shard.count) + " = " + std::to_string(shard.index)).c_str());
  std::printf("verdict: err <= rho x err(same-format baseline) + floor, rho = %g, floor = %g (u_t + u_acc (sqrt(L) + A)) M (rounding noise, checks.hpp); err = max abs error "
              "against the oracle\n", req.rho, req.floor_u);
  std::printf("%-7s %-28s %-6s %6s %7s %9s %5s %15s %10s %8s\n", "op", "policy", "oracle", "cases", "passed", "discarded",
              "weak", "worst err/base", "worst ULP", "cases/s");
  std::printf("(err/base: the subject's max error over max(the baseline's, the floor); worst ULP: in the output's format, at the "
              "scale of the summed terms;\n weak: passed cases where some output's floor is >= 1/4 of its largest exact value, so its verdict "
              "could not tell a wrong answer from a right one)\n");
  std::vector<std::string> failures;
  int total = 0, passed = 0, discarded = 0, weak = 0;
  double seconds = 0;
  for (kernels::Op op : ops) {
    for (const PrecisionPolicy& policy : policies) {
      gradcheck::RunOptions o;
      o.op = op, o.policy = policy, o.cases = req.cases, o.seed = req.seed, o.verdict = verdict;
      o.limits.max_seq = req.max_seq;
      o.limits.max_head_dim = req.max_head_dim;
      o.shard = shard;
      const gradcheck::RunSummary s = gradcheck::run_cases(*subject, o, [&](const gradcheck::CaseReport& r) {
        if (records) records->write(experiments::check_record(r, info.name, device));
      });
      total += s.cases, passed += s.passed, discarded += s.discarded, weak += s.weak, seconds += s.seconds;
      std::printf("%-7s %-28s %-6s %6d %7d %9d %5d %15.3g %10.3g %8.1f\n", std::string(kernels::name(op)).c_str(),
                  policy.to_string().c_str(), std::string(oracle::name(oracle::oracle_type_for(policy))).c_str(), s.cases, s.passed,
                  s.discarded, s.weak, s.worst_ratio, s.worst_ulp, s.cases / std::max(s.seconds, 1e-9));
      std::fflush(stdout);
      if (!s.failure) continue;
      const gradcheck::Failure& f = *s.failure;
      std::ostringstream msg;
      msg << "FAIL " << kernels::name(op) << " " << policy.to_string() << ": case " << f.case_index + 1 << " of " << req.cases
          << " failed; shrunk in " << f.shrink_steps << " steps to the minimal case below\n";
      std::printf("\n%s", msg.str().c_str());
      print_case(f.report);
      std::string repro = "flashcheck check --subject " + info.name + " --op " + std::string(kernels::name(op)) + " --case " + quote(f.minimal);
      for (const std::string& p : req.plugins) repro += " --plugin " + p;
      // the verdict's parameters when not the defaults, so the reproduction judges the same way
      const gradcheck::VerdictOptions defaults;
      if (req.rho != defaults.rho) repro += " --rho " + shortest_text(req.rho);
      if (req.floor_u != defaults.floor_u) repro += " --floor-u " + shortest_text(req.floor_u);
      std::printf("  reproduce: %s\n", repro.c_str());
      if (!req.no_corpus && registry.is_builtin(info.name)) {
        const std::string path = req.corpus.empty() ? gradcheck::default_corpus_path() : req.corpus;
        gradcheck::append_corpus(path, info.name, op, f.minimal, "found by flashcheck check, seed " + std::to_string(req.seed));
        std::printf("  added to the regression corpus %s\n", path.c_str());
      }
      std::printf("\n");
      failures.push_back(std::string(kernels::name(op)) + " " + policy.to_string());
    }
  }
  if (records) std::printf("records: %s\n", records->path().c_str());
  std::printf("check: %s: %d of %d cases passed, %d discarded (outside the format's range), %d weak, %zu op/policy "
              "combinations failed; %.1f s, %.1f cases/s\n",
              failures.empty() ? "PASS" : "FAIL", passed, total, discarded, weak, failures.size(), seconds, total / std::max(seconds, 1e-9));
  return failures.empty() ? 0 : 1;
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto req = std::make_shared<CheckRequest>();
  CLI::App* cmd = app.add_subcommand("check", "Check a subject (attention or AttnRes) against the oracle on generated cases (fwd, bwd, bwdbwd)");
  cmd->add_option("--subject", req->subject, "Subject name (flashcheck list)")->required();
  cmd->add_option("--op", req->op, "fwd, bwd, bwdbwd or all (the subject's ops)")->capture_default_str();
  cmd->add_option("--dtype", req->dtypes, "Storage formats, comma-separated or repeated (default: all the subject's)");
  cmd->add_option("--policy", req->policy, "A full precision policy instead of --dtype, e.g. bf16,o=fp32,round=sr,seed=7");
  cmd->add_option("--cases", req->cases, "Cases per op and policy")->capture_default_str()->check(at_least(1));
  cmd->add_option("--seed", req->seed, "Seed of the case generator")->capture_default_str();
  cmd->add_option("--json", req->json, "Write one JSON Lines record per case to this file");
  cmd->add_flag("--overwrite", req->overwrite, "Replace an existing --json file");
  add_plugin_option(cmd, req->plugins);
  cmd->add_option("--rho", req->rho, "Verdict: how many times the baseline's error the subject may make")->capture_default_str();
  cmd->add_option("--floor-u", req->floor_u, "Verdict: absolute floor in units of (u_t + u_acc (sqrt(L) + A)) M, the rounding noise of a correct implementation")->capture_default_str();
  cmd->add_option("--case", req->case_texts, "Run exactly this case (as printed by a failure) instead of generated ones; repeatable");
  cmd->add_option("--max-seq", req->max_seq, "Longest sequence the generator draws")->capture_default_str()->check(at_least(1));
  cmd->add_option("--max-head-dim", req->max_head_dim, "Largest head dim the generator draws (within the subject's own)")->capture_default_str()->check(at_least(1));
  cmd->add_option("--shard", req->shard, "Check shard I of N (0 <= I < N) of the generated cases: case i when i mod N = I; the shards' --json records concatenate")
      ->capture_default_str();
  cmd->add_flag("--no-corpus", req->no_corpus, "Do not add failures to the regression corpus");
  cmd->add_option("--corpus", req->corpus, "Regression corpus file to append failures to (default: the repository's)");
  cmd->callback([req] {
    if (run(*req) != 0) throw CheckFailed("check found failures");
  });
}

}  // namespace fc::cli
