// Property runs: N generated cases of one op against one subject; the first failure is shrunk
// (rapidcheck's shrink tree, greedily: the first smaller case that still fails, repeated) to a
// minimal case.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "gradcheck/checks.hpp"
#include "gradcheck/generators.hpp"
#include "gradcheck/shard.hpp"

namespace fc::gradcheck {

struct RunOptions {
  kernels::Op op = kernels::Op::fwd;
  PrecisionPolicy policy;
  int cases = 100;
  std::uint64_t seed = 1;
  VerdictOptions verdict;
  GeneratorLimits limits;
  int max_shrink_steps = 300;  // cases tried while shrinking
  bool stop_at_first_failure = true;
  Shard shard;  // this run checks only the cases i (0 <= i < cases) that the shard owns
};

struct Failure {
  int case_index = 0;  // 0-based: the number of cases that passed before it
  std::string original;  // case texts (Case or AttnResCase, by the subject's family)
  std::string minimal;
  int shrink_steps = 0;
  CaseReport report;  // of the minimal case
};

struct RunSummary {
  int cases = 0;  // checked (a shard's share)
  int passed = 0;
  int discarded = 0;  // cases without a verdict (the exact result outside the format's range)
  int weak = 0;       // judged cases where some output's verdict was not discriminating (checks.hpp)
  double worst_ratio = 0;
  double worst_ulp = 0;
  double seconds = 0;
  std::optional<Failure> failure;
};

// Cases come from the generator of the subject's family (attention: case_generator and check_case;
// attnres: attnres_case_generator and check_attnres_case).
// on_case sees every case's report as it completes (the shrinking steps' too are not reported).
RunSummary run_cases(kernels::Subject& subject, const RunOptions& options,
                     const std::function<void(const CaseReport&)>& on_case = {});

}  // namespace fc::gradcheck
