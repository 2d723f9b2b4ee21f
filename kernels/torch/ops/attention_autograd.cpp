// flashcheck::attention: the forward op with autograd to second order.
//
//   AttentionFunction           forward: attention_forward (o, lse); backward: AttentionBackwardFunction
//   AttentionBackwardFunction   forward: attention_backward (dq, dk, dv) from (q, k, v, dout), with o and
//                               lse as constants; backward: attention_double_backward (the Flash Hog
//                               kernel: linear memory, no [N, N] graph)
// The Hog outputs are total derivatives of <ddq, dq> + <ddk, dk> + <ddv, dv> with respect to q, k, v and
// dout, o and lse being functions of q, k, v (EQUATIONS.md section 3), which is why o and lse enter the
// backward function detached: a gradient through them would count the same dependence twice.
// A third derivative is refused with an error when it is taken, rather than silently treated as zero.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/torch/ops/attention_ops.hpp"
#include "kernels/torch/ops/op_support.hpp"

namespace fc::kernels::pt::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Str = c10::string_view;
using OptStr = c10::optional<c10::string_view>;

// The options every function of the chain carries, as IValues saved in the autograd context.
struct Options {
  std::string mask, kernel, double_backward_kernel;
  c10::optional<double> scale;
  c10::optional<std::string> policy;

  void save(AutogradContext* ctx) const {
    ctx->saved_data["mask"] = mask, ctx->saved_data["kernel"] = kernel, ctx->saved_data["dbk"] = double_backward_kernel;
    ctx->saved_data["scale"] = scale ? c10::IValue(*scale) : c10::IValue();
    ctx->saved_data["policy"] = policy ? c10::IValue(*policy) : c10::IValue();
  }
  static Options load(AutogradContext* ctx) {
    Options o;
    o.mask = ctx->saved_data["mask"].toStringRef(), o.kernel = ctx->saved_data["kernel"].toStringRef();
    o.double_backward_kernel = ctx->saved_data["dbk"].toStringRef();
    if (!ctx->saved_data["scale"].isNone()) o.scale = ctx->saved_data["scale"].toDouble();
    if (!ctx->saved_data["policy"].isNone()) o.policy = ctx->saved_data["policy"].toStringRef();
    return o;
  }
  OptStr policy_view() const { return policy ? OptStr(Str(*policy)) : OptStr(); }
};

// The ops through the dispatcher, so CPU and CUDA tensors each reach their backend.
std::tuple<at::Tensor, at::Tensor> call_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Options& o) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("flashcheck::attention_forward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&, Str,
                                                                       c10::optional<double>, Str, OptStr)>();
  return op.call(q, k, v, o.mask, o.scale, o.kernel, o.policy_view());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                             const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout,
                                                             const Options& o) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("flashcheck::attention_backward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const at::Tensor&, Str, c10::optional<double>, Str, OptStr)>();
  return op.call(q, k, v, out, lse, dout, o.mask, o.scale, o.kernel, o.policy_view());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> call_double_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout,
    const at::Tensor& ddq, const at::Tensor& ddk, const at::Tensor& ddv, const Options& o) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("flashcheck::attention_double_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, Str,
              c10::optional<double>, Str, OptStr)>();
  return op.call(q, k, v, out, lse, dout, ddq, ddk, ddv, o.mask, o.scale, o.double_backward_kernel, o.policy_view());
}

// The second-order outputs as a graph node of their own. Their derivatives with respect to the
// cotangents ddQ, ddK, ddV exist in closed form, because the outputs are linear in them: with
// F = <dO, O(x)>, x = (Q, K, V), the node computes (H dd, J dd) (H the Hessian of F in x, J the
// Jacobian of O), so for output cotangents (a_x, a_dO) the gradient with respect to dd is
// H a_x + J^T a_dO: the same Hog pass with dd := a_x, plus the first backward with dO := a_dO.
// torch.autograd.functional.hvp (the "double backward trick") needs exactly that. A true third
// derivative (with respect to Q, K, V or dO) is refused when it is taken.
struct AttentionDoubleBackwardFunction : torch::autograd::Function<AttentionDoubleBackwardFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                               const at::Tensor& ddq, const at::Tensor& ddk, const at::Tensor& ddv, const at::Tensor& out,
                               const at::Tensor& lse, const Options& options) {
    auto [dq2, dk2, dv2, ddo] = call_double_backward(q, k, v, out, lse, dout, ddq, ddk, ddv, options);
    ctx->save_for_backward({q, k, v, dout, out, lse});
    options.save(ctx);
    return {dq2, dk2, dv2, ddo};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads);
};

struct AttentionBackwardFunction : torch::autograd::Function<AttentionBackwardFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& dout, const at::Tensor& out, const at::Tensor& lse, const Options& options) {
    auto [dq, dk, dv] = call_backward(q, k, v, out, lse, dout, options);
    ctx->save_for_backward({q, k, v, dout, out, lse});
    options.save(ctx);
    return {dq, dk, dv};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const Options options = Options::load(ctx);
    variable_list r =
        AttentionDoubleBackwardFunction::apply(s[0], s[1], s[2], s[3], grads[0], grads[1], grads[2], s[4], s[5], options);
    return {r[0], r[1], r[2], r[3], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

variable_list AttentionDoubleBackwardFunction::backward(AutogradContext* ctx, variable_list grads) {
  TORCH_CHECK(!ctx->needs_input_grad({{0, 4}}),
              "flashcheck.attention: third derivatives are not implemented (a gradient of the second-order gradient with "
              "respect to q, k, v or dout was requested)");
  variable_list result(10);
  if (!ctx->needs_input_grad({{4, 7}})) return result;
  const variable_list s = ctx->get_saved_variables();
  const Options options = Options::load(ctx);
  const at::Tensor &q = s[0], &k = s[1], &v = s[2], &dout = s[3], &out = s[4], &lse = s[5];
  const bool any_x = grads[0].defined() || grads[1].defined() || grads[2].defined();
  if (any_x) {  // H a_x
    const variable_list h = apply(q, k, v, dout, grads[0], grads[1], grads[2], out, lse, options);
    result[4] = h[0], result[5] = h[1], result[6] = h[2];
  }
  if (grads[3].defined()) {  // + J^T a_dO
    const variable_list j = AttentionBackwardFunction::apply(q, k, v, grads[3], out, lse, options);
    for (int i = 0; i < 3; ++i) result[4 + i] = result[4 + i].defined() ? result[4 + i] + j[i] : j[i];
  }
  return result;
}

struct AttentionFunction : torch::autograd::Function<AttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Options& options) {
    auto [out, lse] = call_forward(q, k, v, options);
    ctx->save_for_backward({q, k, v, out, lse});
    options.save(ctx);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const Options options = Options::load(ctx);
    variable_list g = AttentionBackwardFunction::apply(s[0], s[1], s[2], grads[0], s[3].detach(), s[4].detach(), options);
    return {g[0], g[1], g[2], at::Tensor()};
  }
};

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Str mask, c10::optional<double> scale, Str kernel,
                     Str double_backward_kernel, OptStr policy) {
  Options options{std::string(mask.data(), mask.size()), std::string(kernel.data(), kernel.size()),
                  std::string(double_backward_kernel.data(), double_backward_kernel.size()), scale, {}};
  if (policy) options.policy = std::string(policy->data(), policy->size());
  return AttentionFunction::apply(q, k, v, options);
}

}  // namespace

void define_attention_autograd(torch::Library& m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, str mask='none', float? scale=None, str kernel='fa2', "
        "str double_backward_kernel='hog', str? policy=None) -> Tensor",
        &attention);
}

}  // namespace fc::kernels::pt::ops
