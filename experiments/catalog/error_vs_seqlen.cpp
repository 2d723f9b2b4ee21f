// error-vs-seqlen: max and RMS error against the oracle, and the ratio to the same-format baseline,
// as the sequence grows; every attention subject, op and format (bf16, fp16, fp32). N runs over
// powers of two and numbers between them, so tail tiles are measured too.
#include "experiments/catalog/catalog.hpp"
#include "experiments/catalog/error_sweep.hpp"

namespace fc::experiments {

Experiment error_vs_seqlen_experiment() {
  return {"error-vs-seqlen", "error of O, L / dQ, dK, dV / dQ', ... against the oracle and the baseline vs N (normal inputs)",
          [](const ExperimentContext& ctx) {
            const std::vector<double> lengths = ctx.scale == Scale::test    ? std::vector<double>{16, 48}
                                                : ctx.scale == Scale::quick ? std::vector<double>{64, 100, 256, 400, 1024}
                                                                            : std::vector<double>{64, 100, 256, 400, 1024, 1536, 2048, 4096};
            return error_sweep(ctx, "error-vs-seqlen", "N", lengths,
                               [](double n) { return SweepPoint{static_cast<int>(n), {gradcheck::Distribution::normal, 1.0}}; });
          }};
}

}  // namespace fc::experiments
