// error-vs-flatness: error against the oracle as the softmax goes from nearly uniform (logits with
// standard deviation 0.01) to nearly one-hot (64): Q and K are drawn so that the logits s q.k have
// the swept standard deviation T (inputs logits:T), V and the cotangents N(0, 1).
#include "experiments/catalog/catalog.hpp"
#include "experiments/catalog/error_sweep.hpp"

namespace fc::experiments {

Experiment error_vs_flatness_experiment() {
  return {"error-vs-flatness", "error against the oracle and the baseline vs the logits' standard deviation T (softmax temperature)",
          [](const ExperimentContext& ctx) {
            const int n = ctx.scale == Scale::test ? 24 : ctx.scale == Scale::quick ? 256 : 1024;
            const std::vector<double> temperatures = ctx.scale == Scale::test    ? std::vector<double>{0.01, 16}
                                                     : ctx.scale == Scale::quick ? std::vector<double>{0.01, 0.1, 1, 4, 16, 64}
                                                                                 : std::vector<double>{0.01, 0.03, 0.1, 0.3, 1, 2, 4, 8, 16, 32, 64};
            return error_sweep(ctx, "error-vs-flatness", "logit_sigma", temperatures,
                               [n](double t) { return SweepPoint{n, {gradcheck::Distribution::logits, t}}; });
          }};
}

}  // namespace fc::experiments
