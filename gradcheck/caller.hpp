// Calls an attention subject the way the harness does: outputs allocated in the case's policy's
// formats and layout, poisoned (NaN) before the call, the saved O and L of a forward handed to the
// backward passes. Used by the checks and by the experiments that measure a subject outside a check.
#pragma once

#include "gradcheck/case.hpp"
#include "gradcheck/inputs.hpp"
#include "gradcheck/tensor.hpp"
#include "gradcheck/verdict.hpp"

namespace fc::gradcheck {

class Caller {
 public:
  Caller(kernels::Subject& s, const Case& c) : subject_(s), c_(c) {}

  Outputs fwd(const Tensor& q, const Tensor& k, const Tensor& v) {
    kernels::AttentionCall call = base(q, k, v);
    Outputs out;
    out.add("O", Tensor(c_.policy.format(Role::o), o_shape(c_.shape), c_.layout));
    if (subject_.info().returns_lse) out.add("L", Tensor(c_.policy.format(Role::stats), lse_shape(c_.shape), c_.layout));
    out.poison();
    call.out_o = out.at("O").tensor.view();
    if (subject_.info().returns_lse) call.out_lse = out.at("L").tensor.view();
    subject_.run(kernels::Op::fwd, call);
    return out;
  }

  Outputs bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Outputs& f, const Tensor& dout) {
    kernels::AttentionCall call = saved(base(q, k, v), f, dout);
    Outputs out;
    out.add("dQ", Tensor(c_.policy.format(Role::grad), q_shape(c_.shape), c_.layout));
    out.add("dK", Tensor(c_.policy.format(Role::grad), k_shape(c_.shape), c_.layout));
    out.add("dV", Tensor(c_.policy.format(Role::grad), v_shape(c_.shape), c_.layout));
    out.poison();
    call.dq = out.at("dQ").tensor.view(), call.dk = out.at("dK").tensor.view(), call.dv = out.at("dV").tensor.view();
    subject_.run(kernels::Op::bwd, call);
    return out;
  }

  Outputs bwdbwd(const Tensor& q, const Tensor& k, const Tensor& v, const Outputs& f, const Tensor& dout, const Tensor& ddq,
                 const Tensor& ddk, const Tensor& ddv) {
    kernels::AttentionCall call = saved(base(q, k, v), f, dout);
    call.ddq = ddq.view(), call.ddk = ddk.view(), call.ddv = ddv.view();
    Outputs out;
    out.add("dQ'", Tensor(c_.policy.format(Role::grad), q_shape(c_.shape), c_.layout));
    out.add("dK'", Tensor(c_.policy.format(Role::grad), k_shape(c_.shape), c_.layout));
    out.add("dV'", Tensor(c_.policy.format(Role::grad), v_shape(c_.shape), c_.layout));
    out.add("ddO", Tensor(c_.policy.format(Role::grad), o_shape(c_.shape), c_.layout));
    out.poison();
    call.dq2 = out.at("dQ'").tensor.view(), call.dk2 = out.at("dK'").tensor.view(), call.dv2 = out.at("dV'").tensor.view(), call.ddo = out.at("ddO").tensor.view();
    subject_.run(kernels::Op::bwdbwd, call);
    return out;
  }

 private:
  kernels::AttentionCall base(const Tensor& q, const Tensor& k, const Tensor& v) const {
    kernels::AttentionCall call;
    call.shape = c_.shape, call.mask = c_.mask, call.scale = c_.scale, call.policy = c_.policy;
    call.q = q.view(), call.k = k.view(), call.v = v.view();
    return call;
  }
  kernels::AttentionCall saved(kernels::AttentionCall call, const Outputs& f, const Tensor& dout) const {
    call.o = f.at("O").tensor.view();
    if (subject_.info().returns_lse) call.lse = f.at("L").tensor.view();
    call.dout = dout.view();
    return call;
  }
  kernels::Subject& subject_;
  const Case& c_;
};

}  // namespace fc::gradcheck
