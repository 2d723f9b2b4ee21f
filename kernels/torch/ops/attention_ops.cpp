// The attention ops of the `flashcheck` PyTorch library (python: torch.ops.flashcheck.*):
//   attention_forward(q, k, v, ...)                      -> (o, lse)
//   attention_backward(q, k, v, o, lse, dout, ...)       -> (dq, dk, dv)
//   attention_double_backward(q, k, v, o, lse, dout, ddq?, ddk?, ddv?, ...) -> (dq2, dk2, dv2, ddo)
//   attention(q, k, v, ...)                              -> o, differentiable twice (attention_autograd.cpp)
// Tensors are [B, H, N, D] (SDPA's layout), any strides on the CPU. `kernel` names the backend's
// variant: forward and backward "fa2" (also "fa3", "fa3.fused"; on the CPU "fa1", "fa4", "naive"), double backward "hog" (also
// "hog.2pass"; on the CPU "naive"); CPU tensors run cpu.<kernel>, CUDA tensors cuda.<kernel>. `policy` is a
// flashcheck policy text ("bf16,round=sr,seed=7"); by default the uniform policy of q's dtype.
#include <torch/library.h>

#include <tuple>

#include "kernels/torch/ops/attention_ops.hpp"
#include "kernels/torch/ops/op_support.hpp"
#include "kernels/torch/tensor_bridge.hpp"

namespace fc::kernels::pt::ops {

// The problem a call describes, checked: shapes, dtypes per policy, one device, finite values.
Problem check_problem(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, c10::string_view mask,
                      const c10::optional<double>& scale, const c10::optional<c10::string_view>& policy) {
  TORCH_CHECK(q.defined() && q.dim() == 4, "flashcheck.", op, ": q must be [B, H, N, D], got ",
              q.defined() ? q.sizes() : at::IntArrayRef{});
  Problem p{{}, parse_mask(mask), scale_for(q, scale), policy_for(q, policy)};
  check_tensor(op, "q", q, 4, dtype_of(p.policy.format(Role::q)), q.device());
  check_tensor(op, "k", k, 4, dtype_of(p.policy.format(Role::k)), q.device());
  check_tensor(op, "v", v, 4, dtype_of(p.policy.format(Role::v)), q.device());
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0), "flashcheck.", op, ": batch sizes differ: q ", q.sizes(),
              ", k ", k.sizes(), ", v ", v.sizes());
  TORCH_CHECK(k.size(3) == q.size(3), "flashcheck.", op, ": q and k head dims differ: q ", q.sizes(), ", k ", k.sizes());
  TORCH_CHECK(v.size(1) == k.size(1) && v.size(2) == k.size(2), "flashcheck.", op,
              ": k and v must have the same heads and sequence length: k ", k.sizes(), ", v ", v.sizes());
  TORCH_CHECK(q.size(1) % k.size(1) == 0, "flashcheck.", op, ": query heads (", q.size(1),
              ") must be a multiple of key/value heads (", k.size(1), ") for GQA");
  p.shape = {static_cast<int>(q.size(0)), static_cast<int>(q.size(1)), static_cast<int>(k.size(1)), static_cast<int>(q.size(2)),
             static_cast<int>(k.size(2)), static_cast<int>(q.size(3)), static_cast<int>(v.size(3))};
  return p;
}

// lse: [B, H, N] in the statistics format, as attention_forward returns it.
void check_saved(const char* op, const Problem& p, const at::Tensor& q, const at::Tensor& o, const at::Tensor& lse,
                 const at::Tensor& dout) {
  const auto& s = p.shape;
  check_tensor(op, "o", o, 4, dtype_of(p.policy.format(Role::o)), q.device());
  check_same_shape(op, "o", o, {s.batch, s.heads_q, s.seq_q, s.head_dim_v});
  check_tensor(op, "lse", lse, 3, dtype_of(p.policy.format(Role::stats)), q.device());
  check_same_shape(op, "lse", lse, {s.batch, s.heads_q, s.seq_q});
  check_tensor(op, "dout", dout, 4, dtype_of(p.policy.format(Role::dout)), q.device());
  check_same_shape(op, "dout", dout, {s.batch, s.heads_q, s.seq_q, s.head_dim_v});
}

namespace {

at::Tensor empty_like_shape(const at::Tensor& like, at::IntArrayRef shape, Format f) {
  return at::empty(shape, like.options().dtype(dtype_of(f)));
}

AttentionCall call_of(const Problem& p) {
  AttentionCall c;
  c.shape = p.shape, c.mask = p.mask, c.scale = p.scale, c.policy = p.policy;
  return c;
}

std::string subject_for(const at::Tensor& q, c10::string_view kernel) {
  return (q.is_cuda() ? "cuda." : "cpu.") + std::string(kernel.data(), kernel.size());
}
// The forward's and backward's (these are the CPU ops): "fa3.fused" is cuda.fa3 with its fused backward on CUDA
// tensors, and cpu.fa3 here, whose one backward has the rounding points of both CUDA forms (they differ in the order
// dQ's partials are summed).
std::string first_order_subject_for(const at::Tensor& q, c10::string_view kernel) {
  return kernel == "fa3.fused" ? "cpu.fa3" : subject_for(q, kernel);
}

std::tuple<at::Tensor, at::Tensor> forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, c10::string_view mask,
                                               c10::optional<double> scale, c10::string_view kernel,
                                               c10::optional<c10::string_view> policy) {
  const Problem p = check_problem("attention_forward", q, k, v, mask, scale, policy);
  const auto& s = p.shape;
  at::Tensor o = empty_like_shape(q, {s.batch, s.heads_q, s.seq_q, s.head_dim_v}, p.policy.format(Role::o));
  at::Tensor lse = empty_like_shape(q, {s.batch, s.heads_q, s.seq_q}, p.policy.format(Role::stats));
  AttentionCall c = call_of(p);
  c.q = view_of(q), c.k = view_of(k), c.v = view_of(v), c.out_o = view_of(o), c.out_lse = view_with_trailing_unit(lse);
  run_subject("attention_forward", first_order_subject_for(q, kernel), [&](Subject& subject) {
    if (!subject.info().returns_lse) throw SubjectError(subject.info().name + " does not return the log-sum-exp the backward needs");
    subject.run(Op::fwd, c);
  });
  return {o, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                            const at::Tensor& o, const at::Tensor& lse, const at::Tensor& dout,
                                                            c10::string_view mask, c10::optional<double> scale,
                                                            c10::string_view kernel, c10::optional<c10::string_view> policy) {
  const Problem p = check_problem("attention_backward", q, k, v, mask, scale, policy);
  check_saved("attention_backward", p, q, o, lse, dout);
  const Format g = p.policy.format(Role::grad);
  at::Tensor dq = empty_like_shape(q, q.sizes(), g), dk = empty_like_shape(q, k.sizes(), g), dv = empty_like_shape(q, v.sizes(), g);
  AttentionCall c = call_of(p);
  c.q = view_of(q), c.k = view_of(k), c.v = view_of(v), c.o = view_of(o), c.lse = view_with_trailing_unit(lse), c.dout = view_of(dout);
  c.dq = view_of(dq), c.dk = view_of(dk), c.dv = view_of(dv);
  run_subject("attention_backward", first_order_subject_for(q, kernel), [&](Subject& subject) { subject.run(Op::bwd, c); });
  return {dq, dk, dv};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> double_backward_cpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse, const at::Tensor& dout,
    const c10::optional<at::Tensor>& ddq, const c10::optional<at::Tensor>& ddk, const c10::optional<at::Tensor>& ddv,
    c10::string_view mask, c10::optional<double> scale, c10::string_view kernel, c10::optional<c10::string_view> policy) {
  const char* op = "attention_double_backward";
  const Problem p = check_problem(op, q, k, v, mask, scale, policy);
  check_saved(op, p, q, o, lse, dout);
  // An absent cotangent is zero (autograd passes none for an unused first-order gradient).
  const auto cotangent = [&](const c10::optional<at::Tensor>& t, const at::Tensor& like, const char* what) {
    const at::ScalarType dtype = dtype_of(p.policy.format(Role::dout));
    if (!t || !t->defined()) return at::zeros(like.sizes(), like.options().dtype(dtype));
    check_tensor(op, what, *t, 4, dtype, q.device());
    check_same_shape(op, what, *t, like.sizes());
    return *t;
  };
  const at::Tensor ddq_ = cotangent(ddq, q, "ddq"), ddk_ = cotangent(ddk, k, "ddk"), ddv_ = cotangent(ddv, v, "ddv");
  const Format g = p.policy.format(Role::grad);
  at::Tensor dq2 = empty_like_shape(q, q.sizes(), g), dk2 = empty_like_shape(q, k.sizes(), g), dv2 = empty_like_shape(q, v.sizes(), g);
  at::Tensor ddo = empty_like_shape(q, dout.sizes(), g);
  AttentionCall c = call_of(p);
  c.q = view_of(q), c.k = view_of(k), c.v = view_of(v), c.o = view_of(o), c.lse = view_with_trailing_unit(lse), c.dout = view_of(dout);
  c.ddq = view_of(ddq_), c.ddk = view_of(ddk_), c.ddv = view_of(ddv_);
  c.dq2 = view_of(dq2), c.dk2 = view_of(dk2), c.dv2 = view_of(dv2), c.ddo = view_of(ddo);
  run_subject(op, subject_for(q, kernel), [&](Subject& subject) { subject.run(Op::bwdbwd, c); });
  return {dq2, dk2, dv2, ddo};
}

}  // namespace
}  // namespace fc::kernels::pt::ops

TORCH_LIBRARY(flashcheck, m) {
  m.def("attention_forward(Tensor q, Tensor k, Tensor v, str mask='none', float? scale=None, str kernel='fa2', "
        "str? policy=None) -> (Tensor, Tensor)");
  m.def("attention_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor dout, str mask='none', "
        "float? scale=None, str kernel='fa2', str? policy=None) -> (Tensor, Tensor, Tensor)");
  m.def("attention_double_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor dout, Tensor? ddq, "
        "Tensor? ddk, Tensor? ddv, str mask='none', float? scale=None, str kernel='hog', str? policy=None) "
        "-> (Tensor, Tensor, Tensor, Tensor)");
  fc::kernels::pt::ops::define_attention_autograd(m);
  fc::kernels::pt::ops::define_attnres_ops(m);
  // The CUDA ops' input checks on or off (op_support.hpp); returns the previous setting.
  m.def("set_input_checks(bool enabled) -> bool", [](bool enabled) { return fc::kernels::pt::ops::set_input_checks(enabled); });
}

TORCH_LIBRARY_IMPL(flashcheck, CPU, m) {
  m.impl("attention_forward", &fc::kernels::pt::ops::forward_cpu);
  m.impl("attention_backward", &fc::kernels::pt::ops::backward_cpu);
  m.impl("attention_double_backward", &fc::kernels::pt::ops::double_backward_cpu);
}

TORCH_LIBRARY_IMPL(flashcheck, CUDA, m) {
  m.impl("attention_forward", &fc::kernels::pt::ops::forward_cuda);
  m.impl("attention_backward", &fc::kernels::pt::ops::backward_cuda);
  m.impl("attention_double_backward", &fc::kernels::pt::ops::double_backward_cuda);
}
