// memory-scaling: peak memory of a forward, a forward + backward, and a full Hessian-vector product
// (forward, backward, double backward) vs N, for every attention subject; cpu.naive is plain
// attention (it materialises [Nq, Nk]), the control that shows quadratic growth. The report fits the
// exponent on log-log: about 1 for flash subjects, 2 for plain attention.
//
// Measured on the host by the counting allocator (memory_counter.hpp): the peak of the bytes
// allocated during the sequence beyond those live before it, that is every output and saved tensor
// (O, L, gradients, second-order outputs) and the subject's own workspace; the inputs Q, K, V and the
// cotangents exist before and are not counted. Subjects whose memory the counter cannot see
// (SubjectInfo::host_allocations_counted false: torch.* allocate through ATen's allocator) are left
// out rather than reported as using nothing. GPU subjects (issue 8) report their device allocator's
// peak instead.
#include "experiments/catalog/catalog.hpp"
#include "experiments/catalog/error_sweep.hpp"
#include "experiments/records.hpp"
#include "gradcheck/caller.hpp"
#include "kernels/memory_counter.hpp"

namespace fc::experiments {
namespace {

enum class Sequence { fwd, fwd_bwd, hvp };
const char* name(Sequence s) { return s == Sequence::fwd ? "fwd" : s == Sequence::fwd_bwd ? "fwd+bwd" : "hvp"; }

nlohmann::json measure(kernels::Subject& s, Sequence seq, const gradcheck::Case& c) {
  const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
  gradcheck::Caller call(s, c);
  kernels::memory::reset_peak();
  const long long before = kernels::memory::live_bytes();
  {
    const gradcheck::Outputs f = call.fwd(in.q, in.k, in.v);
    if (seq != Sequence::fwd) {
      const gradcheck::Outputs g = call.bwd(in.q, in.k, in.v, f, in.dout);
      if (seq == Sequence::hvp) {
        const gradcheck::Outputs h = call.bwdbwd(in.q, in.k, in.v, f, in.dout, in.ddq, in.ddk, in.ddv);
      }
    }
  }
  const long long peak = kernels::memory::peak_bytes() - before;
  const auto bytes = [](const gradcheck::Tensor& t) { return static_cast<long long>(t.view().elements()) * (format_info(t.view().format).bits / 8); };
  nlohmann::json j = record_header("experiment", device_of(s.info()));
  j["experiment"] = "memory-scaling";
  j["subject"] = s.info().name;
  j["family"] = "attention";
  j["op"] = name(seq);
  j["policy"] = c.policy.to_string();
  j["dtype"] = std::string(fc::name(c.policy.format(Role::q)));
  const auto& sh = c.shape;
  j["shape"] = {{"B", sh.batch}, {"Hq", sh.heads_q}, {"Hkv", sh.heads_kv}, {"Nq", sh.seq_q}, {"Nk", sh.seq_k}, {"d", sh.head_dim}, {"dv", sh.head_dim_v}};
  j["mask"] = std::string(kernels::name(c.mask));
  j["inputs"] = c.inputs.to_string();
  j["seed"] = c.seed;
  j["oracle"] = "none";
  j["method"] = "host counting allocator: peak bytes allocated during the sequence, inputs excluded";
  j["x"] = {{"name", "N"}, {"value", sh.seq_q}};
  j["metrics"] = {{"peak_bytes", peak}, {"input_bytes", bytes(in.q) + bytes(in.k) + bytes(in.v)}};
  j["verdict"] = "measured";
  return j;
}

}  // namespace

Experiment memory_scaling_experiment() {
  return {"memory-scaling", "peak memory of fwd, fwd+bwd and a Hessian-vector product vs N (counting allocator on the host)",
          [](const ExperimentContext& ctx) {
            const std::vector<int> lengths = ctx.scale == Scale::test    ? std::vector<int>{64, 128}
                                             : ctx.scale == Scale::quick ? std::vector<int>{256, 512, 1024, 2048}
                                                                         : std::vector<int>{256, 512, 1024, 2048, 4096, 8192};
            std::vector<WorkItem> items;
            const auto measurable = [](const kernels::SubjectInfo& i) { return is_attention(i) && i.host_allocations_counted; };
            for (kernels::Subject* s : select_subjects(ctx, measurable)) {
              const kernels::SubjectInfo& info = s->info();
              const Format f = info.supports(Format::fp32) ? Format::fp32 : info.formats.front();
              for (Sequence seq : {Sequence::fwd, Sequence::fwd_bwd, Sequence::hvp}) {
                if (seq != Sequence::fwd && !info.supports(kernels::Op::bwd)) continue;
                if (seq == Sequence::hvp && !info.supports(kernels::Op::bwdbwd)) continue;
                for (int n : lengths) {
                  const gradcheck::Case c = sweep_case(info, n, PrecisionPolicy::uniform(f), {gradcheck::Distribution::normal, 1.0}, ctx.seed);
                  // the cost in error_point_cost's units (no oracle here)
                  const double per = seq == Sequence::fwd ? 1 : seq == Sequence::fwd_bwd ? 3 : 8;
                  items.push_back({info.name + " " + name(seq) + " N=" + std::to_string(n), per * n * static_cast<double>(n) * 128,
                                   [s, seq, c] { return std::vector{measure(*s, seq, c)}; }});
                }
              }
            }
            return items;
          }};
}

}  // namespace fc::experiments
