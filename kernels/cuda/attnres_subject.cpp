// cuda.attnres: the Attention Residuals kernels (attnres_kernels.hpp) as a harness subject, family
// attnres. The call's host tensors go to the device in their storage formats (role v: values and
// partial sums; q: pseudo-queries; o: o and h, fp16 with per-row scales; dout: dh; grad: the
// gradients; statistics fp32), the kernels run, the outputs come back. Accumulation is fp32.
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "kernels/attnres_call.hpp"
#include "kernels/cuda/attnres_kernels.hpp"
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/tensor_io.hpp"

namespace fc::kernels::cuda {
namespace {

Elem elem_of(Format f) { return f == Format::bf16 ? Elem::bf16 : f == Format::fp16 ? Elem::f16 : Elem::f32; }

AttnResIn input(const DeviceInput& d, Format f, const DeviceInput* scale = nullptr) {
  AttnResIn x;
  x.data = d.view.data, x.outer = d.view.batch, x.batch = d.view.head, x.token = d.view.row, x.type = elem_of(f);
  if (scale) {
    x.scale = static_cast<const float*>(scale->view.data);
    x.scale_outer = scale->view.batch, x.scale_batch = scale->view.head, x.scale_token = scale->view.row;
  }
  return x;
}

// An output and, for scaled rows, its scales (device_output poisons both with NaN).
struct Output {
  DeviceOutput values, scales;
  AttnResOut view;
};
Output output(const TensorView& t, const TensorView& scale, const std::string& who, const std::string& what) {
  Output o;
  o.values = device_output(t, who, what);
  o.view.data = o.values.view.data, o.view.type = elem_of(t.format);
  if (!scale.empty()) {
    o.scales = device_output(scale, who, what + " scales");
    o.view.scale = static_cast<float*>(o.scales.view.data);
  }
  return o;
}
void output_to_host(const Output& o, const TensorView& t, const TensorView& scale, const std::string& who, const std::string& what) {
  to_host(o.values, t, who, what);
  if (!scale.empty()) to_host(o.scales, scale, who, what + " scales");
}

class CudaAttnRes final : public Subject {
 public:
  CudaAttnRes() {
    info_.name = "cuda.attnres";
    info_.description =
        "Attention Residuals on CUDA cores: phase 1 (softmax over N sources, RMS-normalised keys) and phase 2 (merge of the "
        "partial sum), fwd and bwd, cpu.attnres's rounding points; fp16 rows with per-row scales, RN or SR; dw without atomics";
    info_.family = Family::attnres;
    info_.ops = {Op::fwd, Op::bwd};
    info_.formats = {Format::bf16, Format::fp16, Format::fp32};
    info_.accumulate_formats = {Format::fp32};
    info_.max_head_dim = 8192;
    info_.masks = {Mask::none};
    info_.gqa = false;
    info_.stochastic_rounding = true;
    info_.deterministic = true;
    info_.host_allocations_counted = false;  // device memory
    info_.device = device_name();
  }
  const SubjectInfo& info() const override { return info_; }

  void run_attnres(Op op, const AttnResCall& c) override {
    validate_attnres_call(info_, op, c);
    const std::string& who = info_.name;
    const PrecisionPolicy& pol = c.policy;
    if (pol.format(Role::stats) != Format::fp32) throw SubjectError(who + ": keeps lse in fp32");
    require_finite(c.values, who, "values");
    require_finite(c.partial, who, "partial");
    require_finite(c.queries, who, "queries");
    if (op == Op::bwd) {
      require_finite(c.o, who, "o");
      require_finite(c.lse, who, "lse");
      require_finite(c.dh, who, "dh");
    }
    const AttnResShape& sh = c.shape;
    const std::size_t rows = static_cast<std::size_t>(sh.layers) * sh.batch * sh.tokens;
    AttnResParams p;
    p.sources = sh.sources, p.batch = sh.batch, p.tokens = sh.tokens, p.dim = sh.dim, p.layers = sh.layers;
    p.eps = static_cast<float>(sh.eps);
    p.rounding = {pol.rounding == Rounding::stochastic, pol.seed};
    p.o_stream = pol.stream(Role::o).stream, p.h_stream = attnres_h_stream(pol).stream, p.d_o_stream = attnres_d_o_stream(pol).stream;
    p.d_values_stream = pol.stream(Role::grad).stream, p.d_partial_stream = attnres_d_partial_stream(pol).stream;
    p.d_queries_stream = attnres_d_queries_stream(pol).stream;
    const DeviceInput values = to_device(c.values, who, "values"), partial = to_device(c.partial, who, "partial");
    const DeviceInput queries = to_device(c.queries, who, "queries");
    p.values = input(values, pol.format(Role::v)), p.partial = input(partial, pol.format(Role::v));
    p.queries = input(queries, pol.format(Role::q));
    p.queries.token = queries.view.row;  // [1, 1, S, D]: layer s's row

    if (op == Op::fwd) {
      Output o = output(c.out_o, c.out_o_scale, who, "o"), h = output(c.out_h, c.out_h_scale, who, "h");
      DeviceBuffer lse(rows * sizeof(float), who, "lse");
      p.o = o.view, p.h = h.view, p.lse = static_cast<float*>(lse.get());
      run_kernels(who, "forward", [&] { attnres_forward(p, nullptr); });
      output_to_host(o, c.out_o, c.out_o_scale, who, "o");
      output_to_host(h, c.out_h, c.out_h_scale, who, "h");
      std::vector<float> l(rows);
      check_cuda(cudaMemcpy(l.data(), lse.get(), l.size() * sizeof(float), cudaMemcpyDeviceToHost), who, "copying back lse");
      write_from(c.out_lse, std::span<const float>(l), Rounding::nearest_even);
      return;
    }
    const DeviceInput o_in = to_device(c.o, who, "o"), dh = to_device(c.dh, who, "dh");
    DeviceInput o_scale;
    if (!c.o_scale.empty()) o_scale = to_device(c.o_scale, who, "o scales");
    p.o_in = input(o_in, pol.format(Role::o), c.o_scale.empty() ? nullptr : &o_scale);
    p.dh = input(dh, pol.format(Role::dout));
    const std::vector<float> l = read_as_float(c.lse);
    DeviceBuffer lse(rows * sizeof(float), who, "lse");
    check_cuda(cudaMemcpy(lse.get(), l.data(), l.size() * sizeof(float), cudaMemcpyHostToDevice), who, "copying lse");
    p.lse_in = static_cast<const float*>(lse.get());
    Output dv = output(c.d_values, {}, who, "d_values"), du = output(c.d_partial, {}, who, "d_partial");
    Output dw = output(c.d_queries, {}, who, "d_queries");
    p.d_values = dv.view, p.d_partial = du.view, p.d_queries = dw.view;
    const Format g = pol.format(Role::grad);
    const std::size_t partials = attnres_dw_workspace_floats(p);
    DeviceBuffer d_o(rows * sh.dim * (g == Format::fp32 ? 4 : 2), who, "do"), d_lse(rows * sizeof(float), who, "dlse");
    // (both phases' dw partials: attnres_backward sums them into d_queries once, phase 2's then phase 1's)
    DeviceBuffer dw2(partials * sizeof(float), who, "dw partials (phase 2)"), dw1(partials * sizeof(float), who, "dw partials (phase 1)");
    p.d_o = d_o.get(), p.d_lse = static_cast<float*>(d_lse.get());
    p.dw_phase2 = static_cast<float*>(dw2.get()), p.dw_phase1 = static_cast<float*>(dw1.get());
    run_kernels(who, "backward", [&] { attnres_backward(p, nullptr); });
    output_to_host(dv, c.d_values, {}, who, "d_values");
    output_to_host(du, c.d_partial, {}, who, "d_partial");
    output_to_host(dw, c.d_queries, {}, who, "d_queries");
  }

 private:
  SubjectInfo info_;
};

}  // namespace

std::unique_ptr<Subject> make_cuda_attnres() { return std::make_unique<CudaAttnRes>(); }

}  // namespace fc::kernels::cuda
