// attnres-error: Attention Residuals' error against the oracle per precision policy (issue 10):
//   flatness  the softmax over the N sources from nearly uniform (logit standard deviation 0.01) to
//             nearly one-hot (64): pseudo-queries scaled so the logits r_i (w . v_i) have that spread
//             (inputs logits:T), N = 4
//   sources   N from 1 to 32 source blocks at logit spread 1
// for every attnres subject (cpu.attnres; cuda.attnres where a GPU is present), fwd and bwd, and the
// policies fp32, bf16, fp16, bf16 values with fp16 o and h (per-row scales), and the 16-bit ones with
// stochastic rounding (the same seed): RN against SR, whose mean signed error (the bias) the records
// carry per output. B = 1, T = 64 tokens (a full 64-token chunk), D = 64, S = 2 layers.
#include <exception>

#include "experiments/catalog/catalog.hpp"
#include "experiments/records.hpp"
#include "gradcheck/attnres_checks.hpp"

namespace fc::experiments {
namespace {

bool is_attnres(const kernels::SubjectInfo& info) { return info.family == kernels::Family::attnres; }

// Whether the subject takes the policy: validate_policy's rules (rounding, accumulation), and every
// format the AttnRes roles store (validate_policy looks at q's only). A policy it refuses is left out
// of the plan rather than recorded as a failed item.
bool accepts(const kernels::SubjectInfo& info, const PrecisionPolicy& p) {
  try {
    kernels::validate_policy(info, p);
  } catch (const std::exception&) {
    return false;
  }
  for (Role r : {Role::v, Role::o, Role::dout, Role::grad}) {
    if (!info.supports(p.format(r))) return false;
  }
  return true;
}

WorkItem attnres_point(kernels::Subject& subject, kernels::Op op, const gradcheck::AttnResCase& c, const std::string& sweep,
                       const std::string& x_name, double x) {
  WorkItem item;
  item.label = subject.info().name + " " + std::string(kernels::name(op)) + " " + c.policy.to_string() + " " + x_name + "=" + compact(x);
  const auto& s = c.shape;
  item.cost = 1e4 + static_cast<double>(s.sources + s.layers) * s.batch * s.tokens * s.dim * (op == kernels::Op::fwd ? 1 : 3);
  item.run = [&subject, op, c, sweep, x_name, x] {
    gradcheck::VerdictOptions options;
    options.oracle_only = true;
    const gradcheck::CaseReport r = gradcheck::check_attnres_case(subject, c, op, options);
    nlohmann::json j = experiment_record("attnres-error", check_record(r, subject.info().name, device_of(subject.info())), x_name, x);
    j["sweep"] = sweep;
    return std::vector<nlohmann::json>{std::move(j)};
  };
  return item;
}

}  // namespace

Experiment attnres_error_experiment() {
  return {"attnres-error", "Attention Residuals: error against the oracle per policy (RN and SR) vs softmax flatness and vs the number of sources",
          [](const ExperimentContext& ctx) {
            const std::vector<double> spreads = ctx.scale == Scale::test    ? std::vector<double>{0.01, 16}
                                                : ctx.scale == Scale::quick ? std::vector<double>{0.01, 0.1, 1, 4, 16, 64}
                                                                            : std::vector<double>{0.01, 0.03, 0.1, 0.3, 1, 2, 4, 8, 16, 32, 64};
            const std::vector<int> sources = ctx.scale == Scale::test ? std::vector<int>{1, 8} : std::vector<int>{1, 2, 4, 8, 16, 32};
            const int tokens = ctx.scale == Scale::test ? 16 : 64;
            const std::string seed = std::to_string(ctx.seed);
            std::vector<std::string> policies = {"fp32", "bf16", "fp16", "bf16,o=fp16"};
            for (const char* p : {"bf16", "fp16", "bf16,o=fp16"}) policies.push_back(std::string(p) + ",round=sr,seed=" + seed);
            std::vector<WorkItem> items;
            for (kernels::Subject* subject : select_subjects(ctx, is_attnres)) {
              for (const std::string& text : policies) {
                const PrecisionPolicy policy = PrecisionPolicy::parse(text);
                if (!accepts(subject->info(), policy)) continue;
                const auto make = [&](int n, double spread) {
                  gradcheck::AttnResCase c;
                  c.shape = {n, 1, tokens, 64, 2, 1e-6};
                  c.policy = policy;
                  c.inputs = {gradcheck::Distribution::logits, spread};
                  c.seed = ctx.seed;  // the same inputs for every subject and policy at a point
                  return c;
                };
                for (kernels::Op op : {kernels::Op::fwd, kernels::Op::bwd}) {
                  for (double t : spreads) items.push_back(attnres_point(*subject, op, make(4, t), "flatness", "logit_sigma", t));
                  for (int n : sources) items.push_back(attnres_point(*subject, op, make(n, 1.0), "sources", "N", n));
                }
              }
            }
            return items;
          }};
}

}  // namespace fc::experiments
