// cpu.fa3.fp8, FA3's FP8 forward on the CPU (kernels/cpu/flash_attention.hpp), without the harness:
//   - P is rounded to e4m3 before P V (a case where that rounding moves O by two bf16 places);
//   - operands=scaled (wider tensors holding e4m3 values times per-block powers of two) gives the same
//     bits as e4m3 operands whose scales are folded into the softmax scale and O;
//   - operands=scaled refuses a value that is not e4m3 times its block's scale;
//   - tau is bounded by e4m3's range whatever the operands' format.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_call.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/tensor_io.hpp"
#include "precision/fp8.hpp"

namespace fc::kernels {
namespace {

// A tensor of any format, filled from doubles (rounded to nearest).
struct Owned {
  std::vector<std::byte> bytes;
  TensorView view;
  Owned(Format f, std::array<std::int64_t, 4> shape, const std::vector<double>& values) {
    bytes.resize(static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3] * format_info(f).bits / 8));
    view = contiguous_view(bytes.data(), f, shape);
    write_from(view, std::span<const double>(values), Rounding::nearest_even);
  }
};

struct Fwd {
  std::vector<double> o, lse;
};
Fwd forward(Subject& s, const PrecisionPolicy& policy, AttentionShape sh, double scale, const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v) {
  const std::int64_t B = sh.batch, Hq = sh.heads_q, Hkv = sh.heads_kv, Nq = sh.seq_q, Nk = sh.seq_k, d = sh.head_dim, dv = sh.head_dim_v;
  Owned tq(policy.format(Role::q), {B, Hq, Nq, d}, q), tk(policy.format(Role::k), {B, Hkv, Nk, d}, k);
  Owned tv(policy.format(Role::v), {B, Hkv, Nk, dv}, v);
  Owned to(policy.format(Role::o), {B, Hq, Nq, dv}, std::vector<double>(static_cast<std::size_t>(B * Hq * Nq * dv)));
  Owned tl(policy.format(Role::stats), {B, Hq, Nq, 1}, std::vector<double>(static_cast<std::size_t>(B * Hq * Nq)));
  AttentionCall c;
  c.shape = sh, c.scale = scale, c.policy = policy;
  c.q = tq.view, c.k = tk.view, c.v = tv.view, c.out_o = to.view, c.out_lse = tl.view;
  s.run(Op::fwd, c);
  return {read_as_double(to.view), read_as_double(tl.view)};
}

TEST(CpuFa3Fp8, RoundsPToE4m3BeforePV) {
  // One query, two keys: S = [0, 0.125], so the unnormalised P = [exp(-0.125), 1] = [0.8825, 1]; e4m3
  // holds 0.875 and 0.9375 there, so P V sees 0.875. V = I: O = [0.875, 1] / (0.8825 + 1), whose first
  // entry in bf16 is 0.46484375 (unrounded P: 0.46875, two bf16 places away).
  const AttentionShape sh{1, 1, 1, 1, 2, 1, 2};
  const std::vector<double> q{1}, k{0, 0.125}, v{1, 0, 0, 1};
  auto fp8 = cpu::make_cpu_fa3_fp8();
  const Fwd a = forward(*fp8, PrecisionPolicy::parse("e4m3"), sh, 1.0, q, k, v);
  const double l = std::exp(-0.125) + 1;
  EXPECT_EQ(a.o[0], static_cast<double>(to_float(round_to<bf16>(0.875 / l, Rounding::nearest_even))));
  EXPECT_EQ(a.o[0], 0.46484375);
  auto fa3 = cpu::make_cpu_fa3();
  const Fwd b = forward(*fa3, PrecisionPolicy::parse("bf16"), sh, 1.0, q, k, v);
  EXPECT_EQ(b.o[0], 0.46875);
}

TEST(CpuFa3Fp8, ScaledOperandsGiveTheBitsOfE4m3OperandsWithFoldedScales) {
  // e4m3 Q, K, V; the scaled run holds 4 Q, 2 K, 2 V (every block's power-of-two scale is exact) with
  // the softmax scale divided by 8: S is the same to the bit, so O is twice the e4m3 run's and L equal.
  const AttentionShape sh{1, 2, 1, 200, 150, 64, 64};
  std::mt19937_64 gen(3);
  std::normal_distribution<double> normal;
  const auto e4m3_values = [&](std::size_t n) {
    std::vector<double> x(n);
    for (double& e : x) e = to_double(round_to_e4m3(normal(gen), Rounding::nearest_even));
    return x;
  };
  const std::vector<double> q = e4m3_values(2 * 200 * 64), k = e4m3_values(150 * 64), v = e4m3_values(150 * 64);
  const auto times = [](std::vector<double> x, double f) {
    for (double& e : x) e *= f;
    return x;
  };
  auto s = cpu::make_cpu_fa3_fp8();
  const double scale = 1 / 8.0;
  const Fwd direct = forward(*s, PrecisionPolicy::parse("e4m3,o=fp32"), sh, scale, q, k, v);
  s->set_option("operands", "scaled");
  const Fwd scaled = forward(*s, PrecisionPolicy::parse("fp32"), sh, scale / 8, times(q, 4), times(k, 2), times(v, 2));
  ASSERT_EQ(direct.o.size(), scaled.o.size());
  for (std::size_t i = 0; i < direct.o.size(); ++i) ASSERT_EQ(2 * direct.o[i], scaled.o[i]) << i;
  for (std::size_t i = 0; i < direct.lse.size(); ++i) ASSERT_EQ(direct.lse[i], scaled.lse[i]) << i;
}

TEST(CpuFa3Fp8, ScaledOperandsRefuseValuesOutsideE4m3) {
  const AttentionShape sh{1, 1, 1, 4, 4, 8, 8};
  std::vector<double> q(32, 1.0), k(32, 0.5), v(32, 2.0);
  q[5] = 1.0625;  // the block scale 2^-8 takes it to 272, between e4m3 256 and 288
  auto s = cpu::make_cpu_fa3_fp8();
  s->set_option("operands", "scaled");
  try {
    forward(*s, PrecisionPolicy::parse("fp32"), sh, 1.0, q, k, v);
    ADD_FAILURE() << "a value outside e4m3 accepted with operands=scaled";
  } catch (const SubjectError& e) {
    EXPECT_NE(std::string(e.what()).find("operands=scaled"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Q"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s->set_option("operands", "fp16"), SubjectError);
}

// P enters P V in e4m3 whatever the operands' format, and under the selective rule P runs up to 2^tau: so tau is bounded
// by e4m3's largest value (448: tau <= 8) with operands=scaled in fp32 too, where V's format alone would allow 2^127.
TEST(CpuFa3Fp8, TauIsBoundedByE4m3ForEveryOperandFormat) {
  const AttentionShape sh{1, 1, 1, 4, 4, 8, 8};
  const std::vector<double> q(32, 1.0), k(32, 0.5), v(32, 2.0);
  auto s = cpu::make_cpu_fa3_fp8();
  s->set_option("operands", "scaled"), s->set_option("tau", "10");
  try {
    forward(*s, PrecisionPolicy::parse("fp32"), sh, 1.0, q, k, v);
    ADD_FAILURE() << "tau = 10 accepted with P in e4m3";
  } catch (const SubjectError& e) {
    EXPECT_NE(std::string(e.what()).find("e4m3"), std::string::npos) << e.what();
  }
  s->set_option("tau", "8");
  EXPECT_NO_THROW(forward(*s, PrecisionPolicy::parse("fp32"), sh, 1.0, q, k, v));
}

}  // namespace
}  // namespace fc::kernels
