#include "kernels/cpu/attnres.hpp"

#include <span>
#include <type_traits>
#include <vector>

#include "kernels/cpu/attnres_phases.hpp"
#include "kernels/cpu/storage_rounding.hpp"
#include "kernels/tensor_io.hpp"

namespace fc::kernels::cpu {
namespace {

template <class A>
std::vector<A> read_rows(const TensorView& t, const TensorView& scale) {
  if constexpr (std::is_same_v<A, double>) {
    return read_rows_as_double(t, scale);
  } else {
    return read_rows_as_float(t, scale);
  }
}

attnres::Dims dims_of(const AttnResShape& s) { return {s.sources, s.batch * s.tokens, s.dim, s.layers, s.eps}; }

std::size_t rows_of(const attnres::Dims& d) { return static_cast<std::size_t>(d.layers) * d.tokens; }

template <class A>
void forward(const AttnResCall& call) {
  const attnres::Dims dims = dims_of(call.shape);
  const PrecisionPolicy& pol = call.policy;
  const std::vector<A> v = read_rows<A>(call.values, {}), u = read_rows<A>(call.partial, {}), w = read_rows<A>(call.queries, {});
  std::vector<A> o(rows_of(dims) * dims.dim), lse(rows_of(dims));
  attnres::phase1_forward(dims, v.data(), w.data(), o.data(), lse.data());
  write_rows_from(call.out_o, call.out_o_scale, std::span<const A>(o), pol.rounding, pol.stream(Role::o));
  write_from(call.out_lse, std::span<const A>(lse), pol.rounding, pol.stream(Role::stats));

  // Phase 2, as its own kernel would: from the stored o and lse.
  const std::vector<A> o_stored = read_rows<A>(call.out_o, call.out_o_scale), lse_stored = read_rows<A>(call.out_lse, {});
  std::vector<A> h(o.size());
  attnres::phase2_forward(dims, o_stored.data(), lse_stored.data(), u.data(), w.data(), h.data());
  write_rows_from(call.out_h, call.out_h_scale, std::span<const A>(h), pol.rounding, attnres_h_stream(pol));
}

template <class A>
void backward(const AttnResCall& call) {
  const attnres::Dims dims = dims_of(call.shape);
  const PrecisionPolicy& pol = call.policy;
  const std::vector<A> v = read_rows<A>(call.values, {}), u = read_rows<A>(call.partial, {}), w = read_rows<A>(call.queries, {});
  const std::vector<A> o = read_rows<A>(call.o, call.o_scale), lse = read_rows<A>(call.lse, {}), dh = read_rows<A>(call.dh, {});
  std::vector<A> d_o(o.size()), dlse(lse.size()), du(o.size()), dw(w.size()), dw_phase1(w.size());
  attnres::phase2_backward(dims, o.data(), lse.data(), u.data(), w.data(), dh.data(), d_o.data(), dlse.data(), du.data(), dw.data());
  // do crosses from the phase-2 to the phase-1 backward kernel through memory, in the gradient format.
  round_to_storage(d_o.data(), d_o.size(), pol.format(Role::grad), pol.rounding, attnres_d_o_stream(pol));
  std::vector<A> dv(v.size());
  attnres::phase1_backward(dims, v.data(), w.data(), lse.data(), d_o.data(), dlse.data(), dv.data(), dw_phase1.data());
  for (std::size_t j = 0; j < dw.size(); ++j) dw[j] += dw_phase1[j];  // phase 2's part, then phase 1's
  write_from(call.d_values, std::span<const A>(dv), pol.rounding, pol.stream(Role::grad));
  write_from(call.d_partial, std::span<const A>(du), pol.rounding, attnres_d_partial_stream(pol));
  write_from(call.d_queries, std::span<const A>(dw), pol.rounding, attnres_d_queries_stream(pol));
}

class CpuAttnRes final : public Subject {
 public:
  CpuAttnRes() {
    info_.name = "cpu.attnres";
    info_.description =
        "Attention Residuals, phase 1 (softmax over N sources, RMS-normalised keys) and phase 2 (merge of the partial sum), "
        "fwd and bwd; o and h stored per policy (fp16 with per-row scales), RN or SR; dw without atomics";
    info_.family = Family::attnres;
    info_.ops = {Op::fwd, Op::bwd};
    info_.formats = {Format::bf16, Format::fp16, Format::fp32, Format::fp64};
    info_.max_head_dim = 8192;
    info_.masks = {Mask::none};
    info_.gqa = false;
    info_.stochastic_rounding = true;
    info_.deterministic = true;
  }
  const SubjectInfo& info() const override { return info_; }

  void run_attnres(Op op, const AttnResCall& call) override {
    validate_attnres_call(info_, op, call);
    const std::string& who = info_.name;
    require_finite(call.values, who, "values");
    require_finite(call.partial, who, "partial");
    require_finite(call.queries, who, "queries");
    if (op == Op::bwd) {
      require_finite(call.o, who, "o");
      require_finite(call.lse, who, "lse");
      require_finite(call.dh, who, "dh");
    }
    const bool wide = call.policy.accumulate == Format::fp64;
    if (op == Op::fwd) {
      wide ? forward<double>(call) : forward<float>(call);
    } else {
      wide ? backward<double>(call) : backward<float>(call);
    }
  }

 private:
  SubjectInfo info_;
};

}  // namespace

std::unique_ptr<Subject> make_cpu_attnres() { return std::make_unique<CpuAttnRes>(); }

}  // namespace fc::kernels::cpu
