// `flashcheck oracle-check`: the oracle verifies itself on random small cases (oracle/self_check.hpp)
// and prints every agreement figure; exit 0 only if all hold. The last line is a one-line summary.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "experiments/cli/commands.hpp"
#include "oracle/self_check.hpp"

namespace fc::cli {
namespace {

struct OracleCheckRequest {
  int cases = 24;
  std::uint64_t seed = 1;
  bool verbose = false;
  std::vector<std::string> explicit_cases;
  std::vector<std::string> explicit_attnres_cases;
};

// One case of either family: its text and its agreements.
struct CaseRun {
  std::string text;
  std::function<std::vector<oracle::Agreement>()> check;
};

struct Worst {
  double value = 0, bound = 0, ratio = -1;
  std::string case_text;
  int failures = 0, count = 0;
};

int run(const OracleCheckRequest& req) {
  std::vector<CaseRun> cases;
  const auto add_attention = [&](const oracle::AttentionCase& c) {
    cases.push_back({c.to_string(), [c] { return oracle::check_attention(c); }});
  };
  const auto add_attnres = [&](const oracle::AttnResCase& c) {
    cases.push_back({c.to_string(), [c] { return oracle::check_attnres(c); }});
  };
  for (const std::string& text : req.explicit_cases) add_attention(oracle::AttentionCase::parse(text));
  for (const std::string& text : req.explicit_attnres_cases) add_attnres(oracle::AttnResCase::parse(text));
  for (int i = 0; i < req.cases; ++i) {
    add_attention(oracle::random_attention_case(req.seed + static_cast<std::uint64_t>(i)));
    add_attnres(oracle::random_attnres_case(req.seed + static_cast<std::uint64_t>(i)));
  }
  if (cases.empty()) throw std::invalid_argument("--cases: nothing to check");

  std::vector<std::pair<std::string, oracle::OracleType>> order;  // checks in first-seen order
  std::map<std::pair<std::string, oracle::OracleType>, Worst> worst;
  for (const CaseRun& c : cases) {
    for (const oracle::Agreement& a : c.check()) {
      const auto key = std::make_pair(a.check, a.type);
      if (!worst.count(key)) order.push_back(key);
      Worst& w = worst[key];
      ++w.count;
      if (!a.pass()) ++w.failures;
      const double ratio = std::isnan(a.value) ? INFINITY : a.value / a.bound;
      if (ratio > w.ratio) w = {a.value, a.bound, ratio, c.text, w.failures, w.count};
      if (req.verbose || !a.pass()) {
        std::printf("%-4s %-62s %-5s %11.4g u (bound %.4g u)  %s\n", a.pass() ? "ok" : "FAIL", a.check.c_str(),
                    std::string(oracle::name(a.type)).c_str(), a.value, a.bound, c.text.c_str());
      }
    }
  }

  std::printf("oracle-check: %d attention and %d Attention Residuals random cases (seed %llu)%s\n", req.cases, req.cases,
              static_cast<unsigned long long>(req.seed),
              req.explicit_cases.size() + req.explicit_attnres_cases.size() ? ", plus the given ones" : "");
  std::printf("%-62s %-5s %12s %12s %12s  %s\n", "check", "type", "worst (u)", "bound (u)", "worst/bound", "result");
  int failed_checks = 0;
  double worst_ratio = 0;
  for (const auto& key : order) {
    const Worst& w = worst[key];
    failed_checks += w.failures > 0;
    worst_ratio = std::max(worst_ratio, w.ratio);
    char result[64];
    std::snprintf(result, sizeof result, w.failures ? "FAIL (%d of %d cases)" : "ok", w.failures, w.count);
    std::printf("%-62s %-5s %12.4g %12.4g %12.3g  %s\n", key.first.c_str(), std::string(oracle::name(key.second)).c_str(),
                w.value, w.bound, w.ratio, result);
  }
  std::printf("\nvalue = |difference| / (u_type * magnitude of the summed terms); u_fp64 = 2^-53, u_quad = 2^-113, "
              "u_mp50 = 2^-168.\nBounds (n = d + dv + Nq + Nk + 8, A = 1 + largest logit magnitude):\n");
  std::vector<std::string> seen;
  for (const auto& key : order) {
    const std::string_view reason = oracle::bound_reason(key.first);
    const std::string r(reason);
    if (std::find(seen.begin(), seen.end(), r) != seen.end()) continue;
    seen.push_back(r);
    std::printf("  %s: %s\n", key.first.c_str(), r.c_str());
  }
  std::printf("oracle-check: %s: %zu of %zu checks hold over %zu cases (worst value/bound %.3g)\n",
              failed_checks ? "FAIL" : "PASS", order.size() - static_cast<std::size_t>(failed_checks), order.size(),
              cases.size(), worst_ratio);
  return failed_checks ? 1 : 0;
}

}  // namespace

void add_oracle_check_command(CLI::App& app) {
  auto req = std::make_shared<OracleCheckRequest>();
  auto result = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand("oracle-check", "Verify the oracle against itself: analytic vs autodiff vs finite "
                                                     "differences, double vs quad vs 50 digits");
  cmd->add_option("--cases", req->cases, "Number of random cases of each family (attention, AttnRes)")->capture_default_str()->check(at_least(0));
  cmd->add_option("--seed", req->seed, "Seed of the first random case")->capture_default_str();
  cmd->add_option("--case", req->explicit_cases, "A case to check as well, e.g. \"B=1 Hq=2 Hkv=1 Nq=3 Nk=5 d=4 dv=2 mask=causal_br scale=0.5 seed=7\"");
  cmd->add_option("--attnres-case", req->explicit_attnres_cases,
                  "An AttnRes case to check as well, e.g. \"N=3 B=1 T=2 D=8 S=2 eps=1e-06 seed=7\"");
  cmd->add_flag("--verbose", req->verbose, "Print every agreement of every case");
  cmd->callback([req] {
    if (run(*req) != 0) throw CheckFailed("oracle-check found agreements outside their bounds");
  });
}

}  // namespace fc::cli
