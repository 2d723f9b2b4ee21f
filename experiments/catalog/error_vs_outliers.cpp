// error-vs-outliers: the harness's outlier mix, N(0, 1) + N(0, 100) x Bernoulli(p) in Q, K and V (the
// distribution of the FA3 paper's accuracy experiment at p = 0.001), with the outlier rate p swept
// from none to one entry in ten.
#include "experiments/catalog/catalog.hpp"
#include "experiments/catalog/error_sweep.hpp"

namespace fc::experiments {

Experiment error_vs_outliers_experiment() {
  return {"error-vs-outliers", "error against the oracle and the baseline vs the rate p of N(0, 100) outliers added to N(0, 1) inputs",
          [](const ExperimentContext& ctx) {
            const int n = ctx.scale == Scale::test ? 24 : ctx.scale == Scale::quick ? 256 : 1024;
            const std::vector<double> rates = ctx.scale == Scale::test ? std::vector<double>{0, 0.01} : std::vector<double>{0, 1e-4, 1e-3, 1e-2, 1e-1};
            return error_sweep(ctx, "error-vs-outliers", "outlier_rate", rates, [n](double p) {
              gradcheck::InputDistribution inputs{gradcheck::Distribution::outliers, 1.0};
              inputs.outlier_rate = p;
              return SweepPoint{n, inputs};
            });
          }};
}

}  // namespace fc::experiments
