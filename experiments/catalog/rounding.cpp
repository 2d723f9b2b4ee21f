// rounding: round-to-nearest (RN) against stochastic rounding (SR), in two settings.
//
// Long accumulations: sum n terms, the running sum rounded to the format after every addition, RN or
// SR with Philox bits. Three kinds of terms (each first rounded to the format):
//   constant    n copies of one c drawn from [1/2, 1) per trial. While the sum stays in one binade its
//               spacing h is fixed and c mod h is too, so every RN rounding makes the same error: RN's
//               errors add up linearly, relative error ~ n u, the worst case of recursive summation.
//               (c changes per trial, so the sign does too: this shows growth, not bias.)
//   uniform     n terms drawn from [0, 1). RN's errors are then nearly independent, ~ sqrt(n) u.
//   increments  1 plus n increments drawn from [0, u): each is below half an ulp of the sum, so RN
//               returns the sum unchanged every time (stagnation, as with small updates to a large
//               weight): a bias of -n u / 2 on average. SR moves up with probability increment / ulp
//               and stays unbiased.
// SR's errors are unbiased and independent whatever the terms, so its relative error grows like
// sqrt(n) u (Connolly, Higham and Mary 2021). Recorded per (terms, format, rounding, n) over R
// trials: the mean signed relative error (the bias), the RMS and the largest relative error, and the
// worst-case bound n' u' / (1 - n' u') of recursive summation with n' additions, u' = u for RN and 2u
// for SR (an SR rounding moves by less than one ulp): a record's verdict is whether the largest error
// respects it. The report fits the slopes. Lengths stop where n u reaches 1/2, where the bound and
// the power laws stop holding.
//
// Outputs: a subject's forward and backward with the policy's outputs rounded RN and SR (the same
// fp32 accumulation), error and bias of the stored outputs vs N (cpu.fa2 unless --subjects says).
#include <array>
#include <cmath>

#include "experiments/catalog/catalog.hpp"
#include "experiments/catalog/error_sweep.hpp"
#include "experiments/records.hpp"
#include "precision/convert.hpp"
#include "precision/philox.hpp"

namespace fc::experiments {
namespace {

constexpr std::uint32_t kStreamTerms = 300, kStreamRounding = 301;

enum class Terms { constant, uniform, increments };
constexpr std::array<Terms, 3> kAllTerms = {Terms::constant, Terms::uniform, Terms::increments};

const char* name(Terms t) { return t == Terms::constant ? "constant" : t == Terms::uniform ? "uniform" : "increments"; }
const char* description(Terms t) {
  return t == Terms::constant ? "n copies of c ~ U[1/2, 1)" : t == Terms::uniform ? "n terms ~ U[0, 1)" : "1 + n increments ~ U[0, u)";
}

nlohmann::json accumulation_record(Terms kind, Format f, Rounding mode, int n, int trials, std::uint64_t seed) {
  const double u = unit_roundoff(f);
  double sum_signed = 0, sum_sq = 0, worst = 0;
  for (int t = 0; t < trials; ++t) {
    const RandomStream terms{seed + static_cast<std::uint64_t>(t), kStreamTerms}, bits{seed + static_cast<std::uint64_t>(t), kStreamRounding};
    // exact: the terms are 8..24-bit numbers whose sum (< 2^21 of them, within 2^-30..2^21) fits fp64's 53 bits
    const double c = round_to_format(0.5 + static_cast<double>(terms.word(0, 1)) / 8589934592.0, f);
    double acc = kind == Terms::increments ? 1.0 : 0.0, exact = acc;
    for (int i = 0; i < n; ++i) {
      const double r = static_cast<double>(terms.word(static_cast<std::uint64_t>(i))) / 4294967296.0;  // [0, 1)
      const double term = kind == Terms::constant ? c : round_to_format(kind == Terms::uniform ? r : r * u, f);
      exact += term;
      acc = (i == 0 && kind != Terms::increments) ? term : round_to_format(acc + term, f, mode, bits.word(static_cast<std::uint64_t>(i)));
    }
    const double rel = (acc - exact) / exact;
    sum_signed += rel, sum_sq += rel * rel, worst = std::max(worst, std::fabs(rel));
  }
  const int additions = kind == Terms::increments ? n : n - 1;
  const double u_mode = mode == Rounding::stochastic ? 2 * u : u;
  const double bound = additions * u_mode / (1 - additions * u_mode);
  nlohmann::json j = record_header("experiment", cpu_device_name());
  j["experiment"] = "rounding";
  j["part"] = "accumulation";
  j["subject"] = "precision.sum";
  j["op"] = "sum";
  j["policy"] = std::string(name(f)) + ",round=" + std::string(name(mode));
  j["dtype"] = std::string(name(f));
  j["rounding"] = std::string(name(mode));
  j["shape"] = {{"n", n}};
  j["mask"] = "none";
  j["terms"] = name(kind);
  j["inputs"] = description(kind);
  j["seed"] = seed;
  j["trials"] = trials;
  j["oracle"] = "fp64 (exact)";
  j["x"] = {{"name", "n"}, {"value", n}};
  j["unit_roundoff"] = u;
  j["metrics"] = {{"mean_signed_rel", number(sum_signed / trials)}, {"rms_rel", number(std::sqrt(sum_sq / trials))}, {"max_rel", number(worst)},
                  {"bound_rel", number(bound)}};
  j["verdict"] = worst <= bound ? "pass" : "fail";
  return j;
}

}  // namespace

Experiment rounding_experiment() {
  return {"rounding", "RN vs SR: bias and growth of the error of long sums (fitted slopes), and of a subject's stored outputs vs N",
          [](const ExperimentContext& ctx) {
            std::vector<WorkItem> items;
            const int trials = ctx.scale == Scale::test ? 8 : ctx.scale == Scale::quick ? 64 : 256;
            for (Format f : {Format::bf16, Format::fp16, Format::fp32}) {
              const int top = ctx.scale == Scale::test ? 6 : f == Format::fp32 ? (ctx.scale == Scale::quick ? 16 : 20) : 30;
              for (int k = 3; k <= top; ++k) {
                const int n = 1 << k;
                if (n * unit_roundoff(f) > 0.5) break;
                for (Terms kind : kAllTerms) {
                  for (Rounding mode : {Rounding::nearest_even, Rounding::stochastic}) {
                    items.push_back({std::string("sum of ") + name(kind) + " terms " + std::string(name(f)) + " " +
                                         std::string(name(mode)) + " n=" + std::to_string(n),
                                     static_cast<double>(n) * trials * 2,
                                     [=, seed = ctx.seed] { return std::vector{accumulation_record(kind, f, mode, n, trials, seed)}; }});
                  }
                }
              }
            }
            // outputs: cpu.fa2 unless subjects were named
            std::vector<kernels::Subject*> subjects = select_subjects(ctx, [&](const kernels::SubjectInfo& i) {
              return is_attention(i) && (!ctx.subjects.empty() || i.name == "cpu.fa2");
            });
            const std::vector<int> lengths = ctx.scale == Scale::test ? std::vector<int>{16, 40} : ctx.scale == Scale::quick ? std::vector<int>{64, 256, 1024}
                                                                                                                       : std::vector<int>{64, 256, 1024, 2048};
            for (kernels::Subject* s : subjects) {
              for (Format f : {Format::bf16, Format::fp16}) {
                if (!s->info().supports(f)) continue;
                for (const char* round : {"rn", "sr"}) {
                  const PrecisionPolicy policy = PrecisionPolicy::parse(std::string(name(f)) + ",round=" + round);
                  for (int n : lengths) {
                    for (kernels::Op op : {kernels::Op::fwd, kernels::Op::bwd}) {
                      if (!s->info().supports(op)) continue;
                      WorkItem item = error_point("rounding", *s, op, sweep_case(s->info(), n, policy, {gradcheck::Distribution::normal, 1.0}, ctx.seed), "N", n);
                      item.run = [run = item.run] {
                        auto records = run();
                        for (auto& r : records) r["part"] = "outputs";
                        return records;
                      };
                      items.push_back(std::move(item));
                    }
                  }
                }
              }
            }
            return items;
          }};
}

}  // namespace fc::experiments
