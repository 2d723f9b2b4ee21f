#include "kernels/attnres_call.hpp"

#include <cmath>

namespace fc::kernels {
namespace {

[[noreturn]] void fail(const SubjectInfo& info, const std::string& why) { throw SubjectError(info.name + ": " + why); }

}  // namespace

void validate_attnres_problem(const SubjectInfo& info, Op op, const AttnResShape& s) {
  if (info.family != Family::attnres) fail(info, "is not an AttnRes subject");
  if (!info.supports(op)) fail(info, "does not implement " + std::string(name(op)));
  if (s.sources < 1 || s.batch < 1 || s.tokens < 1 || s.layers < 1 || s.dim < 1) {
    fail(info, "empty AttnRes problem (N = " + std::to_string(s.sources) + ", B = " + std::to_string(s.batch) + ", T = " +
                   std::to_string(s.tokens) + ", S = " + std::to_string(s.layers) + ", D = " + std::to_string(s.dim) + "); every dimension must be >= 1");
  }
  if (!info.supports_head_dim(s.dim)) fail(info, "unsupported dimension D = " + std::to_string(s.dim));
  if (info.max_seq > 0 && s.tokens > info.max_seq) fail(info, "more tokens than its limit " + std::to_string(info.max_seq));
  if (!(s.eps > 0) || !std::isfinite(s.eps)) fail(info, "eps must be finite and > 0");
}

void validate_attnres_call(const SubjectInfo& info, Op op, const AttnResCall& c) {
  validate_attnres_problem(info, op, c.shape);
  validate_policy(info, c.policy);
  const AttnResShape& s = c.shape;
  const std::int64_t N = s.sources, B = s.batch, T = s.tokens, D = s.dim, S = s.layers;
  const PrecisionPolicy& p = c.policy;
  const bool scaled = attnres_scaled_outputs(p);
  validate_tensor(info, "values", c.values, {N, B, T, D}, p.format(Role::v));
  validate_tensor(info, "partial", c.partial, {S, B, T, D}, p.format(Role::v));
  validate_tensor(info, "queries", c.queries, {1, 1, S, D}, p.format(Role::q));
  const auto scale_of = [&](const char* what, const TensorView& t) {
    if (scaled) {
      validate_tensor(info, what, t, {S, B, T, 1}, Format::fp32);
    } else if (!t.empty()) {
      fail(info, std::string(what) + " given, but rows carry scales only in fp16 storage");
    }
  };
  if (op == Op::fwd) {
    validate_tensor(info, "output o", c.out_o, {S, B, T, D}, p.format(Role::o));
    scale_of("output o scale", c.out_o_scale);
    validate_tensor(info, "output lse", c.out_lse, {S, B, T, 1}, p.format(Role::stats));
    validate_tensor(info, "output h", c.out_h, {S, B, T, D}, p.format(Role::o));
    scale_of("output h scale", c.out_h_scale);
    return;
  }
  if (op != Op::bwd) fail(info, "AttnRes has no " + std::string(name(op)));
  validate_tensor(info, "o", c.o, {S, B, T, D}, p.format(Role::o));
  scale_of("o scale", c.o_scale);
  validate_tensor(info, "lse", c.lse, {S, B, T, 1}, p.format(Role::stats));
  validate_tensor(info, "dh", c.dh, {S, B, T, D}, p.format(Role::dout));
  validate_tensor(info, "output d_values", c.d_values, {N, B, T, D}, p.format(Role::grad));
  validate_tensor(info, "output d_partial", c.d_partial, {S, B, T, D}, p.format(Role::grad));
  validate_tensor(info, "output d_queries", c.d_queries, {1, 1, S, D}, p.format(Role::grad));
}

}  // namespace fc::kernels
