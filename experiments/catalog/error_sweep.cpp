#include "experiments/catalog/error_sweep.hpp"

#include <algorithm>
#include <cmath>

#include "experiments/records.hpp"
#include "gradcheck/checks.hpp"

namespace fc::experiments {

std::vector<Format> sweep_formats(const kernels::SubjectInfo& info) {
  std::vector<Format> formats;
  for (Format f : {Format::bf16, Format::fp16, Format::fp32}) {
    if (info.supports(f)) formats.push_back(f);
  }
  return formats;
}

bool is_attention(const kernels::SubjectInfo& info) { return info.family == kernels::Family::attention; }

gradcheck::Case sweep_case(const kernels::SubjectInfo& info, int n, const PrecisionPolicy& policy, const gradcheck::InputDistribution& inputs,
                           std::uint64_t seed) {
  int d = 64;
  if (!info.head_dims.empty() && std::find(info.head_dims.begin(), info.head_dims.end(), 64) == info.head_dims.end()) {
    d = *std::min_element(info.head_dims.begin(), info.head_dims.end());
  }
  gradcheck::Case c;
  c.shape = {1, 2, 2, n, n, d, d};
  c.mask = kernels::Mask::none;
  c.scale = 1 / std::sqrt(static_cast<double>(d));
  c.policy = policy;
  c.inputs = inputs;
  c.seed = seed;
  return c;
}

double error_point_cost(kernels::Op op, const gradcheck::Case& c) {
  const auto& s = c.shape;
  const double work = static_cast<double>(s.batch) * s.heads_q * s.seq_q * s.seq_k * (s.head_dim + s.head_dim_v);
  const double per_op = op == kernels::Op::fwd ? 1.0 : op == kernels::Op::bwd ? 3.0 : 6.0;
  return 1e4 + per_op * work;
}

WorkItem error_point(const std::string& experiment, kernels::Subject& subject, kernels::Op op, const gradcheck::Case& c,
                     const std::string& x_name, double x) {
  WorkItem item;
  item.label = subject.info().name + " " + std::string(kernels::name(op)) + " " + c.policy.to_string() + " " + x_name + "=" + compact(x);
  item.cost = error_point_cost(op, c);
  item.run = [&subject, op, c, experiment, x_name, x] {
    gradcheck::VerdictOptions options;
    options.oracle_only = true;
    const gradcheck::CaseReport r = gradcheck::check_case(subject, c, op, options);
    nlohmann::json j = check_record(r, subject.info().name, device_of(subject.info()));
    return std::vector<nlohmann::json>{experiment_record(experiment, std::move(j), x_name, x)};
  };
  return item;
}

std::vector<WorkItem> error_sweep(const ExperimentContext& ctx, const std::string& experiment, const std::string& x_name,
                                  const std::vector<double>& xs, const std::function<SweepPoint(double)>& point) {
  const std::vector<kernels::Subject*> subjects = select_subjects(ctx, is_attention);
  std::vector<WorkItem> items;
  for (double x : xs) {
    const SweepPoint at = point(x);
    for (kernels::Subject* s : subjects) {
      for (Format f : sweep_formats(s->info())) {
        for (kernels::Op op : s->info().ops) {
          items.push_back(error_point(experiment, *s, op, sweep_case(s->info(), at.n, PrecisionPolicy::uniform(f), at.inputs, ctx.seed), x_name, x));
        }
      }
    }
  }
  return items;
}

}  // namespace fc::experiments
