#include "kernels/attention_call.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace fc::kernels {

std::string_view name(Op op) {
  switch (op) {
    case Op::fwd: return "fwd";
    case Op::bwd: return "bwd";
    case Op::bwdbwd: return "bwdbwd";
  }
  return "?";
}

std::string_view name(Mask m) {
  switch (m) {
    case Mask::none: return "none";
    case Mask::causal_top_left: return "causal_tl";
    case Mask::causal_bottom_right: return "causal_br";
  }
  return "?";
}

std::string_view name(Family f) { return f == Family::attention ? "attention" : "attnres"; }

TensorView contiguous_view(void* data, Format format, std::array<std::int64_t, 4> shape) {
  return {data, format, shape, {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1}};
}

void Subject::run(Op, const AttentionCall&) {
  throw SubjectError(info().name + " is an " + std::string(name(info().family)) + " subject; it takes no attention call");
}

void Subject::run_attnres(Op, const AttnResCall&) {
  throw SubjectError(info().name + " is an " + std::string(name(info().family)) + " subject; it takes no AttnRes call");
}

void Subject::set_option(const std::string& name, const std::string&) {
  throw SubjectError(info().name + ": no option '" + name + "'" + (info().options.empty() ? " (it has none)" : ""));
}

bool SubjectInfo::supports(Op op) const { return std::find(ops.begin(), ops.end(), op) != ops.end(); }
bool SubjectInfo::supports(Format f) const { return std::find(formats.begin(), formats.end(), f) != formats.end(); }
bool SubjectInfo::supports_accumulate(Format f) const {
  return std::find(accumulate_formats.begin(), accumulate_formats.end(), f) != accumulate_formats.end();
}
bool SubjectInfo::supports(Mask m) const { return std::find(masks.begin(), masks.end(), m) != masks.end(); }
bool SubjectInfo::supports_head_dim(int d) const {
  if (head_dims.empty()) return d >= 1 && d <= max_head_dim;
  return std::find(head_dims.begin(), head_dims.end(), d) != head_dims.end();
}

std::string SubjectInfo::option_value(const std::string& option) const {
  for (const SubjectOption& o : options) {
    if (o.name == option) return o.value;
  }
  return "";
}

namespace {

[[noreturn]] void fail(const SubjectInfo& info, const std::string& why) { throw SubjectError(info.name + ": " + why); }

}  // namespace

void validate_tensor(const SubjectInfo& info, const std::string& what, const TensorView& t, std::array<std::int64_t, 4> shape,
                     Format format) {
  if (t.empty()) fail(info, what + " is missing");
  if (t.shape != shape) {
    fail(info, what + " has shape [" + std::to_string(t.shape[0]) + ", " + std::to_string(t.shape[1]) + ", " +
                   std::to_string(t.shape[2]) + ", " + std::to_string(t.shape[3]) + "], expected [" + std::to_string(shape[0]) +
                   ", " + std::to_string(shape[1]) + ", " + std::to_string(shape[2]) + ", " + std::to_string(shape[3]) + "]");
  }
  if (t.format != format) {
    fail(info, what + " is " + std::string(fc::name(t.format)) + ", the policy says " + std::string(fc::name(format)));
  }
}

void validate_rescale_threshold(const SubjectInfo& info, double tau, const PrecisionPolicy& policy) {
  const FormatInfo p_format = format_info(policy.format(Role::v));
  if (std::exp2(tau) <= p_format.max_finite()) return;
  std::ostringstream m;
  m << info.name << ": tau=" << tau << " lets P reach 2^tau, above " << p_format.name << "'s largest finite value; use tau <= "
    << std::floor(std::log2(p_format.max_finite())) << " with " << p_format.name << " storage";
  throw SubjectError(m.str());
}

void validate_policy(const SubjectInfo& info, const PrecisionPolicy& p) {
  if (!info.supports(p.format(Role::q))) fail(info, "does not support format " + std::string(fc::name(p.format(Role::q))));
  if (!info.supports_accumulate(p.accumulate)) fail(info, "does not accumulate in " + std::string(fc::name(p.accumulate)));
  if (p.rounding == Rounding::stochastic && !info.stochastic_rounding) fail(info, "does not support stochastic rounding");
}

void validate_problem(const SubjectInfo& info, Op op, const AttentionShape& s, Mask mask, double scale) {
  if (!info.supports(op)) fail(info, "does not implement " + std::string(name(op)));
  if (s.seq_q < 1 || s.seq_k < 1) fail(info, "empty sequence (Nq = " + std::to_string(s.seq_q) + ", Nk = " + std::to_string(s.seq_k) + ")");
  if (s.batch < 1 || s.heads_q < 1 || s.heads_kv < 1 || s.head_dim < 1 || s.head_dim_v < 1) fail(info, "a dimension below 1");
  if (s.heads_q % s.heads_kv != 0) {
    fail(info, "Hq = " + std::to_string(s.heads_q) + " is not a multiple of Hkv = " + std::to_string(s.heads_kv));
  }
  if (s.heads_kv != s.heads_q && !info.gqa) fail(info, "does not support grouped-query attention (Hq != Hkv)");
  if (!info.supports_head_dim(s.head_dim)) fail(info, "unsupported head dim d = " + std::to_string(s.head_dim));
  if (s.head_dim_v != s.head_dim && !info.separate_dv) fail(info, "requires dv = d");
  if (!info.supports_head_dim(s.head_dim_v)) fail(info, "unsupported value head dim dv = " + std::to_string(s.head_dim_v));
  if (info.max_seq > 0 && (s.seq_q > info.max_seq || s.seq_k > info.max_seq)) {
    fail(info, "sequence longer than its limit " + std::to_string(info.max_seq));
  }
  if (s.seq_q < info.min_seq || s.seq_k < info.min_seq) {
    fail(info, "sequences shorter than its limit " + std::to_string(info.min_seq) + " (Nq = " + std::to_string(s.seq_q) +
                   ", Nk = " + std::to_string(s.seq_k) + ")");
  }
  if (!info.supports(mask)) fail(info, "does not support mask " + std::string(name(mask)));
  if (mask != Mask::none && info.causal_equal_lengths && s.seq_q != s.seq_k) {
    fail(info, "supports causal masks only with Nq = Nk (got Nq = " + std::to_string(s.seq_q) + ", Nk = " + std::to_string(s.seq_k) + ")");
  }
  if (!std::isfinite(scale)) fail(info, "softmax scale is not finite");
}

void validate_call(const SubjectInfo& info, Op op, const AttentionCall& c) {
  validate_problem(info, op, c.shape, c.mask, c.scale);
  validate_policy(info, c.policy);
  const AttentionShape& s = c.shape;
  const std::int64_t B = s.batch, Hq = s.heads_q, Hkv = s.heads_kv, Nq = s.seq_q, Nk = s.seq_k, d = s.head_dim, dv = s.head_dim_v;
  const PrecisionPolicy& p = c.policy;
  validate_tensor(info, "Q", c.q, {B, Hq, Nq, d}, p.format(Role::q));
  validate_tensor(info, "K", c.k, {B, Hkv, Nk, d}, p.format(Role::k));
  validate_tensor(info, "V", c.v, {B, Hkv, Nk, dv}, p.format(Role::v));
  if (op == Op::fwd) {
    validate_tensor(info, "output O", c.out_o, {B, Hq, Nq, dv}, p.format(Role::o));
    if (info.returns_lse) validate_tensor(info, "output L", c.out_lse, {B, Hq, Nq, 1}, p.format(Role::stats));
    return;
  }
  validate_tensor(info, "dO", c.dout, {B, Hq, Nq, dv}, p.format(Role::dout));
  validate_tensor(info, "O", c.o, {B, Hq, Nq, dv}, p.format(Role::o));
  if (info.returns_lse) validate_tensor(info, "L", c.lse, {B, Hq, Nq, 1}, p.format(Role::stats));
  if (op == Op::bwd) {
    validate_tensor(info, "output dQ", c.dq, {B, Hq, Nq, d}, p.format(Role::grad));
    validate_tensor(info, "output dK", c.dk, {B, Hkv, Nk, d}, p.format(Role::grad));
    validate_tensor(info, "output dV", c.dv, {B, Hkv, Nk, dv}, p.format(Role::grad));
    return;
  }
  validate_tensor(info, "ddQ", c.ddq, {B, Hq, Nq, d}, p.format(Role::dout));
  validate_tensor(info, "ddK", c.ddk, {B, Hkv, Nk, d}, p.format(Role::dout));
  validate_tensor(info, "ddV", c.ddv, {B, Hkv, Nk, dv}, p.format(Role::dout));
  validate_tensor(info, "output dQ'", c.dq2, {B, Hq, Nq, d}, p.format(Role::grad));
  validate_tensor(info, "output dK'", c.dk2, {B, Hkv, Nk, d}, p.format(Role::grad));
  validate_tensor(info, "output dV'", c.dv2, {B, Hkv, Nk, dv}, p.format(Role::grad));
  validate_tensor(info, "output ddO", c.ddo, {B, Hq, Nq, dv}, p.format(Role::grad));
}

}  // namespace fc::kernels
