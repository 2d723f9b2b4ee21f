#include "experiments/catalog/catalog.hpp"

#include <stdexcept>

namespace fc::experiments {

std::string_view name(Scale s) {
  switch (s) {
    case Scale::test: return "test";
    case Scale::quick: return "quick";
    case Scale::full: return "full";
  }
  return "?";
}

Scale parse_scale(const std::string& text) {
  if (text == "test") return Scale::test;
  if (text == "quick") return Scale::quick;
  if (text == "full") return Scale::full;
  throw std::invalid_argument("--scale: '" + text + "' (test, quick, full)");
}

const std::vector<Experiment>& all_experiments() {
  static const std::vector<Experiment> experiments = {
      error_vs_seqlen_experiment(), error_vs_flatness_experiment(), error_vs_outliers_experiment(), rounding_experiment(),
      rescale_experiment(),         memory_scaling_experiment(),    gradcheck_matrix_experiment(), attnres_error_experiment(),
      fa3_accuracy_experiment(),
  };
  return experiments;
}

const Experiment* find_experiment(const std::string& name) {
  for (const Experiment& e : all_experiments()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::vector<kernels::Subject*> select_subjects(const ExperimentContext& ctx, const std::function<bool(const kernels::SubjectInfo&)>& eligible) {
  std::vector<kernels::Subject*> chosen;
  if (ctx.subjects.empty()) {
    for (kernels::Subject* s : ctx.registry->subjects()) {
      if (eligible(s->info())) chosen.push_back(s);
    }
    return chosen;
  }
  for (const std::string& n : ctx.subjects) {
    kernels::Subject* s = ctx.registry->find(n);
    if (!s) throw std::invalid_argument("--subjects: no subject '" + n + "' (flashcheck list)");
    if (eligible(s->info())) chosen.push_back(s);
  }
  return chosen;
}

}  // namespace fc::experiments
