// rescale: FA4's selective rescaling. The running max of a query row is raised only when a key tile's
// max exceeds it by at least tau (log2 units); otherwise the exponentials run up to 2^tau against the
// stale max. Swept: tau from 0 (FA2: rescale whenever the max grows) up; recorded: the rescale count
// (the subject's `rescales` counter, per query row and per key tile after the first) and the forward's
// error against the oracle and the baseline. Subjects: those whose `tau` option is above 0 by default
// (cpu.fa4, cpu.fa4.emulated), or those named. fp16 stops at tau = 15: P up to 2^tau must fit fp16. Inputs: normal (logits with standard deviation 1) and logits:8, where the max
// moves more.
#include <cmath>

#include "experiments/catalog/catalog.hpp"
#include "experiments/catalog/error_sweep.hpp"

namespace fc::experiments {
namespace {

// FA4-style subjects: a tau option set above 0 by default. cpu.fa2 shares the implementation (its tau
// is 0) and would repeat cpu.fa4's sweep with other tiles; it runs only when named.
bool has_tau(const kernels::SubjectInfo& info) { return is_attention(info) && !info.option_value("tau").empty(); }
bool selects_by_default(const kernels::SubjectInfo& info) { return has_tau(info) && std::stod(info.option_value("tau")) > 0; }

}  // namespace

Experiment rescale_experiment() {
  return {"rescale", "FA4's rescale threshold tau swept: rescale count and forward error (subjects with a tau option)",
          [](const ExperimentContext& ctx) {
            const int n = ctx.scale == Scale::test ? 40 : ctx.scale == Scale::quick ? 1024 : 4096;
            const std::vector<double> taus = ctx.scale == Scale::test ? std::vector<double>{0, 8} : std::vector<double>{0, 1, 2, 4, 6, 8, 10, 12, 15};
            std::vector<WorkItem> items;
            for (const gradcheck::InputDistribution inputs : {gradcheck::InputDistribution{gradcheck::Distribution::normal, 1.0},
                                                              gradcheck::InputDistribution{gradcheck::Distribution::logits, 8.0}}) {
              for (double tau : taus) {
                for (kernels::Subject* s : select_subjects(ctx, ctx.subjects.empty() ? selects_by_default : has_tau)) {
                  for (Format f : {Format::bf16, Format::fp16}) {
                    if (!s->info().supports(f)) continue;
                    const gradcheck::Case c = sweep_case(s->info(), n, PrecisionPolicy::uniform(f), inputs, ctx.seed);
                    WorkItem item = error_point("rescale", *s, kernels::Op::fwd, c, "tau", tau);
                    item.run = [s, tau, c, measure = item.run] {
                      const std::string before = s->info().option_value("tau");
                      s->set_option("tau", std::to_string(tau));
                      std::vector<nlohmann::json> records;
                      try {
                        records = measure();
                      } catch (...) {
                        s->set_option("tau", before);
                        throw;
                      }
                      s->set_option("tau", before);
                      double rescales = 0;
                      for (const kernels::Counter& k : s->counters()) {
                        if (k.name == "rescales") rescales = k.value;
                      }
                      const double rows = static_cast<double>(c.shape.batch) * c.shape.heads_q * c.shape.seq_q;
                      // (cpu.fa4 tiles its keys by block_k_large_d above d = 128, as cuda.fa4 does at 256)
                      const std::string large_d = s->info().option_value("block_k_large_d");
                      const bool large = c.shape.head_dim > 128 && !large_d.empty() && large_d != "0";
                      const std::string block_k = large ? large_d : s->info().option_value("block_k");
                      const double tiles = block_k.empty() ? 1 : std::ceil(c.shape.seq_k / std::stod(block_k));
                      for (auto& r : records) {
                        r["counters"] = {{"rescales", rescales}};
                        r["rescales_per_row"] = rescales / rows;
                        r["key_tiles"] = tiles;
                        r["tau"] = tau;
                      }
                      return records;
                    };
                    items.push_back(std::move(item));
                  }
                }
              }
            }
            return items;
          }};
}

}  // namespace fc::experiments
