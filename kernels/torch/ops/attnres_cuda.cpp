// The Attention Residuals ops on CUDA tensors: cuda.attnres's kernels (kernels/cuda/attnres_kernels.hpp)
// on PyTorch's tensors in place (any strides with a unit stride along D; others are copied), outputs
// contiguous, rounded to nearest in the tensors' dtype (float32, bfloat16 or float16; fp16 rows without
// scales: o and h are convex combinations of inputs that were in range). Workspaces (dw's per-chunk
// partials) are PyTorch allocations.
#include "kernels/torch/ops/attnres_cuda.hpp"

#include <c10/core/DeviceGuard.h>
#include <torch/version.h>

#include <string>

#include "kernels/torch/ops/op_support.hpp"

#if FLASHCHECK_HAVE_CUDA && TORCH_VERSION_MAJOR >= 2

#include "kernels/cuda/attnres_kernels.hpp"
#include "kernels/torch/ops/cuda_launch.hpp"
#define FLASHCHECK_TORCH_CUDA_ATTNRES 1
#else
#define FLASHCHECK_TORCH_CUDA_ATTNRES 0
#endif

namespace fc::kernels::pt::ops {

#if FLASHCHECK_TORCH_CUDA_ATTNRES
namespace {

using cuda::AttnResIn;
using cuda::AttnResOut;
using cuda::AttnResParams;
using cuda::Elem;

Elem elem_of(const char* op, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return Elem::f32;
    case at::kBFloat16: return Elem::bf16;
    case at::kHalf: return Elem::f16;
    default:
      TORCH_CHECK(false, "flashcheck.", op, ": cuda.attnres computes in float32, bfloat16 or float16, got ", t.scalar_type(),
                  " (CPU tensors also take float64)");
  }
}

at::Tensor unit_stride(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// [outer, B, T, D] (or queries [S, D]: layer s at token s)
AttnResIn in4(const char* op, const at::Tensor& t) {
  AttnResIn x;
  x.data = t.data_ptr(), x.outer = t.stride(0), x.batch = t.stride(1), x.token = t.stride(2), x.type = elem_of(op, t);
  return x;
}
AttnResIn in_queries(const char* op, const at::Tensor& w) {
  AttnResIn x;
  x.data = w.data_ptr(), x.token = w.stride(0), x.type = elem_of(op, w);
  return x;
}
AttnResOut out(const char* op, at::Tensor& t) { return {t.data_ptr(), elem_of(op, t), nullptr}; }

AttnResParams params_of(const at::Tensor& per_token, const at::Tensor& queries, int64_t sources, double eps) {
  AttnResParams p;
  p.sources = static_cast<int>(sources), p.batch = static_cast<int>(per_token.size(1)), p.tokens = static_cast<int>(per_token.size(2));
  p.dim = static_cast<int>(per_token.size(3)), p.layers = static_cast<int>(queries.size(0)), p.eps = static_cast<float>(eps);
  return p;  // rounding: to nearest (no policy argument)
}

at::Tensor dw_workspace(const AttnResParams& p, const at::Tensor& like) {
  return at::empty({static_cast<std::int64_t>(cuda::attnres_dw_workspace_floats(p))}, like.options().dtype(at::kFloat));
}

// NaN and Inf in the inputs. The lane kernels find them in the entries they read anyway
// (cuda::attnres_checks_inputs): a 4-byte flag per AttnResInputCheck (one op's launch, or both phases of
// the block op), zeroed before the first launch and read back after the last, names the inputs that hold
// one. The block kernels do not: their inputs get a pass of their own first (check_all_finite). Either
// way the op raises an error that names the input.
using Named = std::initializer_list<std::pair<const at::Tensor*, const char*>>;
// Arms `check` for a launch of `phase`: p.nonfinite points at its flag, or, where that phase's kernels do
// not report, the inputs get a pass of their own now. Nothing while the checks are off.
void arm(AttnResInputCheck& check, AttnResParams& p, cuda::AttnResPhase phase, const at::Tensor& like, Named tensors) {
  if (!input_checks_enabled()) return;  // (p.nonfinite stays null: the kernels report nothing)
  if (!cuda::attnres_checks_inputs(p, phase)) {
    // An earlier phase's report first: its inputs come first, and a NaN of theirs may have reached this
    // phase's inputs (dh's NaN in d_o), which are then not the ones to name.
    check.finish();
    check_all_finite(check.op(), tensors);
    return;
  }
  if (!check.flag.defined()) check.flag = at::zeros({1}, like.options().dtype(at::kInt));
  p.nonfinite = reinterpret_cast<unsigned*>(check.flag.data_ptr<int>());
}

}  // namespace

void AttnResInputCheck::finish() {
  if (!flag.defined()) return;
  const auto bits = static_cast<unsigned>(flag.item<int>());  // (waits for the kernels)
  flag = at::Tensor();
  static const std::pair<unsigned, const char*> names[] = {
      {cuda::kNonfiniteValues, "values"}, {cuda::kNonfiniteQueries, "queries"}, {cuda::kNonfinitePartial, "partial"},
      {cuda::kNonfiniteO, "o"},           {cuda::kNonfiniteLse, "lse"},         {cuda::kNonfiniteDh, "dh"},
      {cuda::kNonfiniteDo, "d_o"},        {cuda::kNonfiniteDlse, "d_lse"}};
  for (const auto& [bit, what] : names) TORCH_CHECK((bits & bit) == 0, "flashcheck.", op_, ": ", what, " contains NaN or Inf");
}

std::tuple<at::Tensor, at::Tensor> attnres_phase1_forward_cuda(const at::Tensor& values_, const at::Tensor& queries_, double eps,
                                                               AttnResInputCheck* shared) {
  const char* op = "attnres_phase1_forward";
  const c10::DeviceGuard device(values_.device());
  const at::Tensor values = unit_stride(values_), queries = unit_stride(queries_);
  AttnResParams p = params_of(values, queries, values.size(0), eps);
  at::Tensor o = at::empty({p.layers, p.batch, p.tokens, p.dim}, values.options());
  at::Tensor lse = at::empty({p.layers, p.batch, p.tokens}, values.options().dtype(at::kFloat));
  p.values = in4(op, values), p.queries = in_queries(op, queries), p.o = out(op, o), p.lse = lse.data_ptr<float>();
  AttnResInputCheck own(op);  // (used where no check is shared)
  arm(shared != nullptr ? *shared : own, p, cuda::AttnResPhase::phase1_forward, values, {{&values, "values"}, {&queries, "queries"}});
  launch(op, [&] { cuda::attnres_phase1_forward(p, current_stream(values)); });
  if (shared == nullptr) own.finish();
  return {o, lse};
}

at::Tensor attnres_phase2_forward_cuda(const at::Tensor& o_, const at::Tensor& lse_, const at::Tensor& partial_, const at::Tensor& queries_,
                                       double eps, AttnResInputCheck* shared) {
  const char* op = "attnres_phase2_forward";
  const c10::DeviceGuard device(o_.device());
  const at::Tensor o = unit_stride(o_), lse = lse_.contiguous(), partial = unit_stride(partial_), queries = unit_stride(queries_);
  AttnResParams p = params_of(o, queries, 1, eps);
  at::Tensor h = at::empty(o.sizes(), o.options());
  p.o_in = in4(op, o), p.lse_in = lse.data_ptr<float>(), p.partial = in4(op, partial), p.queries = in_queries(op, queries);
  p.h = out(op, h);
  AttnResInputCheck own(op);  // (used where no check is shared)
  arm(shared != nullptr ? *shared : own, p, cuda::AttnResPhase::phase2_forward, o,
                                            {{&o, "o"}, {&lse, "lse"}, {&partial, "partial"}, {&queries, "queries"}});
  launch(op, [&] { cuda::attnres_phase2_forward(p, current_stream(o)); });
  if (shared == nullptr) own.finish();
  return h;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attnres_phase2_backward_cuda(const at::Tensor& o_, const at::Tensor& lse_,
                                                                                        const at::Tensor& partial_, const at::Tensor& queries_,
                                                                                        const at::Tensor& dh_, double eps,
                                                                                        AttnResInputCheck* shared) {
  const char* op = "attnres_phase2_backward";
  const c10::DeviceGuard device(o_.device());
  const at::Tensor o = unit_stride(o_), lse = lse_.contiguous(), partial = unit_stride(partial_), queries = unit_stride(queries_);
  const at::Tensor dh = unit_stride(dh_);
  AttnResParams p = params_of(o, queries, 1, eps);
  at::Tensor d_o = at::empty({p.layers, p.batch, p.tokens, p.dim}, o.options());
  at::Tensor d_lse = at::empty({p.layers, p.batch, p.tokens}, o.options().dtype(at::kFloat));
  at::Tensor du = at::empty(d_o.sizes(), o.options()), dw = at::empty({p.layers, p.dim}, o.options());
  at::Tensor partials = dw_workspace(p, o);
  p.o_in = in4(op, o), p.lse_in = lse.data_ptr<float>(), p.partial = in4(op, partial), p.queries = in_queries(op, queries);
  p.dh = in4(op, dh);
  p.d_o = d_o.data_ptr(), p.d_lse = d_lse.data_ptr<float>(), p.d_partial = out(op, du), p.d_queries = out(op, dw);
  p.d_values.type = p.d_partial.type;
  p.dw_phase2 = partials.data_ptr<float>();
  AttnResInputCheck own(op);  // (used where no check is shared)
  arm(shared != nullptr ? *shared : own, p, cuda::AttnResPhase::phase2_backward, o,
                                            {{&o, "o"}, {&lse, "lse"}, {&partial, "partial"}, {&queries, "queries"}, {&dh, "dh"}});
  launch(op, [&] { cuda::attnres_phase2_backward(p, current_stream(o)); });
  if (shared == nullptr) own.finish();
  return {d_o, d_lse, du, dw};
}

std::tuple<at::Tensor, at::Tensor> attnres_phase1_backward_cuda(const at::Tensor& values_, const at::Tensor& queries_, const at::Tensor& lse_,
                                                                const at::Tensor& d_o_, const at::Tensor& d_lse_, double eps,
                                                                AttnResInputCheck* shared) {
  const char* op = "attnres_phase1_backward";
  const c10::DeviceGuard device(values_.device());
  const at::Tensor values = unit_stride(values_), queries = unit_stride(queries_), lse = lse_.contiguous(), d_o = d_o_.contiguous();
  const at::Tensor d_lse = d_lse_.contiguous();
  AttnResParams p = params_of(values, queries, values.size(0), eps);
  at::Tensor dv = at::empty(values.sizes(), values.options()), dw = at::empty({p.layers, p.dim}, values.options());
  at::Tensor partials = dw_workspace(p, values);
  p.values = in4(op, values), p.queries = in_queries(op, queries), p.lse_in = lse.data_ptr<float>();
  p.d_o = const_cast<void*>(d_o.data_ptr()), p.d_lse = const_cast<float*>(d_lse.data_ptr<float>());  // (read only)
  p.d_values = out(op, dv), p.d_queries = out(op, dw), p.dw_phase1 = partials.data_ptr<float>();
  AttnResInputCheck own(op);  // (used where no check is shared)
  arm(shared != nullptr ? *shared : own, p, cuda::AttnResPhase::phase1_backward, values,
                                            {{&values, "values"}, {&queries, "queries"}, {&lse, "lse"}, {&d_o, "d_o"}, {&d_lse, "d_lse"}});
  launch(op, [&] { cuda::attnres_phase1_backward(p, current_stream(values)); });
  if (shared == nullptr) own.finish();
  return {dv, dw};
}

#else  // no CUDA kernels in this build (or libtorch < 2): a clear error

void AttnResInputCheck::finish() {}  // (nothing reports into a flag here)

std::tuple<at::Tensor, at::Tensor> attnres_phase1_forward_cuda(const at::Tensor&, const at::Tensor&, double, AttnResInputCheck*) {
  no_cuda_kernel("attnres_phase1_forward", "cuda.attnres");
}
std::tuple<at::Tensor, at::Tensor> attnres_phase1_backward_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                                const at::Tensor&, double, AttnResInputCheck*) {
  no_cuda_kernel("attnres_phase1_backward", "cuda.attnres");
}
at::Tensor attnres_phase2_forward_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, double, AttnResInputCheck*) {
  no_cuda_kernel("attnres_phase2_forward", "cuda.attnres");
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attnres_phase2_backward_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                                                        const at::Tensor&, const at::Tensor&, double,
                                                                                        AttnResInputCheck*) {
  no_cuda_kernel("attnres_phase2_backward", "cuda.attnres");
}

#endif

}  // namespace fc::kernels::pt::ops
