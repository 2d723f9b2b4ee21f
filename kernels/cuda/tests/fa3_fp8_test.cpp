// cuda.fa3.fp8 on the GPU (Hopper only; elsewhere every test skips with the reason):
//   - the harness against the oracle, FLASHCHECK_GPU_CASES cases (default 2000) in e4m3, and a quarter with O
//     stochastically rounded;
//   - agreement with cpu.fa3.fp8 (same rounding points: P to e4m3 before P V, O once) within the
//     accumulation-order difference, on e4m3 operands and on scaled operands whose blocks carry different
//     powers of two (the block exponents of Q, K and V in the kernel);
//   - small shapes with tails, masks and GQA (what compute-sanitizer runs);
//   - each in every compiled variant (kVariants): key tiles of 128, of 224 and of 256 (block_k, d = 128 only; 256 with P
//     in registers runs the loop without overlap inside a group, with P in shared memory the overlapped loop, both with
//     turns at the exponentials), the CPU twin with the same block_k; P V's A operand from registers and from shared
//     memory (p_operand=shared: three consumer groups at d = 128 with block_k=128, two at d = 256, two with block_k=256);
//     FA4's selective rule (tau = 8) in the 256-key kernel with P in shared memory, the twin with the same tau;
//   - the selective rule's slow path (S taken again by the warp) on logits that grow along the keys, and its rescale
//     counts against the twin's; where tau is refused (host only);
//   - P from shared memory gives the register path's bits, with the three groups in turns and without (turns), and with
//     256-key tiles on either scheduler; the persistent scheduler gives the grid's (scheduler), O by TMA and by stores;
//   - bad input refused with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <rapidcheck.h>

#include "gradcheck/caller.hpp"
#include "gradcheck/checks.hpp"
#include "gradcheck/generators.hpp"
#include "gradcheck/inputs.hpp"
#include "gradcheck/runner.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/fa3_fp8_kernels.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"
#include "oracle/attention.hpp"
#include "precision/fp8.hpp"

namespace fc::kernels::cuda {
namespace {

using testing::harness_cases;
using testing::harness_seed;
using testing::registered_subject;

std::unique_ptr<Subject> fp8_subject() { return registered_subject("cuda.fa3.fp8"); }

// The compiled forms of the kernel, by the options that pick them: the key tile (block_k, which the CPU twin takes
// too), where P V reads P from (p_operand; the numerics are the same, so the twin has no such option) and the softmax's
// rule (tau: 0 is FA3's, > 0 FA4's selective rescaling, which the twin takes too). A variant's head dims are those the
// subject then declares.
struct Fp8Variant {
  int block_k;
  const char* p_operand;
  const char* tau = "0";
  std::string name() const { return "block_k=" + std::to_string(block_k) + " p_operand=" + p_operand + (std::string(tau) == "0" ? "" : std::string(" tau=") + tau); }
  void apply(Subject& gpu, Subject* cpu = nullptr) const {
    // (p_operand=shared and block_k=224 are refused together, whichever comes second: through auto between variants;
    // tau > 0 with any other kernel than the 256-key one with P in shared memory: through tau=0)
    gpu.set_option("tau", "0");
    gpu.set_option("p_operand", "auto"), gpu.set_option("block_k", std::to_string(block_k)), gpu.set_option("p_operand", p_operand);
    gpu.set_option("tau", tau);
    if (cpu != nullptr) cpu->set_option("block_k", std::to_string(block_k)), cpu->set_option("tau", tau);
  }
  bool supports(int d) const { return fp8_key_tile_supported(block_k, d) && (std::string(p_operand) != "shared" || fp8_p_shared_supported(block_k, d)); }
};
const Fp8Variant kVariants[] = {{128, "registers"}, {224, "registers"}, {256, "registers"}, {128, "shared"}, {256, "shared"}, {256, "shared", "8"}};

TEST(CudaFa3Fp8, PassesTheHarness) {
  REQUIRE_HOPPER();
  auto s = fp8_subject();
  ASSERT_TRUE(s) << "cuda.fa3.fp8 is not registered on a Hopper GPU";
  for (const Fp8Variant& variant : kVariants) {
    variant.apply(*s);  // (the cases are drawn at the dims the subject then declares: 224 and 256 at d = 128 only, shared at 128 and 256)
    const std::string variant_name = variant.name();
    for (const char* policy : {"e4m3", "e4m3,round=sr,seed=5"}) {
      gradcheck::RunOptions o;
      o.op = Op::fwd, o.policy = PrecisionPolicy::parse(policy), o.seed = harness_seed();
      o.cases = o.policy.rounding == Rounding::stochastic ? std::max(1, harness_cases() / 4) : harness_cases();
      o.limits.max_seq = 300;
      o.limits.max_head_dim = 256;  // (d = 256: two groups, P in registers or shared memory)
      const gradcheck::RunSummary r = gradcheck::run_cases(*s, o);
      std::cout << "cuda.fa3.fp8 " << variant_name << " fwd " << policy << ": " << r.passed << " passed, " << r.discarded << " discarded, " << r.weak << " weak of " << r.cases
                << "; worst err/base " << r.worst_ratio << ", " << r.seconds << " s\n";
      EXPECT_EQ(r.passed + r.discarded, r.cases) << variant_name << " " << policy << "\n" << (r.failure ? r.failure->minimal + "\n" + r.failure->report.summary() : "");
      EXPECT_LE(10 * r.discarded, r.cases);
    }
  }
}

// Hopper's FP8 tensor cores do not accumulate in full fp32 (DeepSeek-V3 reported about 14 bits kept on H800). Measured
// on the H200 (CudaFa3Fp8.QgmmaAccumulationErrorIsWithinItsBound, one key so L = s S; cd9a70d), |S_gpu - S| against
// sum_c |q_c k_c|: 2^-13.3 for N(0, 1) rows, 2^-12.7 for the outlier mix, 2^-10.5 (d = 64) and 2^-10.0 (d = 128) for one
// 448 among small terms, and 2^-9.8 at d = 128 (exact at d = 64) for 128 equal positive terms, where the error is one-sided
// and grows with the running sum. The bound: each k32 step keeps its running sum to about 11 fraction bits, and each
// term may lose 2^-13 of the largest one's scale when aligned to it, so after n terms
//   |dS| <= ceil(n / 32) 2^-11 sum |terms| + 2^-13 n max |term|
// (d = 128: the worst measured, equal positive terms, at 0.57 of it; d = 64: one large term among small ones at 0.16).
// The first term alone bounds O's accumulation over Nk keys (ceil(Nk / 32) 2^-11 M_i).
double qgmma_bound(const double* q, const double* k, int d) {
  double sum = 0, most = 0;
  for (int x = 0; x < d; ++x) sum += std::fabs(q[x] * k[x]), most = std::max(most, std::fabs(q[x] * k[x]));
  return (d + 31) / 32 * std::ldexp(sum, -11) + std::ldexp(d * most, -13);
}

// eta_i = |s| max_j qgmma_bound(q_i, k_j): how far QGMMA's error can move row i's logits.
std::vector<double> logit_noise(const gradcheck::Case& c, const std::vector<double>& q, const std::vector<double>& k) {
  const auto& sh = c.shape;
  const int d = sh.head_dim, group = sh.heads_q / sh.heads_kv;
  std::vector<double> eta(static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.seq_q, 0.0);
  for (int b = 0; b < sh.batch; ++b) {
    for (int h = 0; h < sh.heads_q; ++h) {
      const double* K = &k[(static_cast<std::size_t>(b) * sh.heads_kv + h / group) * sh.seq_k * d];
      for (int i = 0; i < sh.seq_q; ++i) {
        const std::size_t row = (static_cast<std::size_t>(b) * sh.heads_q + h) * sh.seq_q + i;
        double most = 0;
        for (int j = 0; j < sh.seq_k; ++j) most = std::max(most, qgmma_bound(&q[row * d], &K[static_cast<std::size_t>(j) * d], d));
        eta[row] = std::fabs(c.scale) * most;
      }
    }
  }
  return eta;
}

// cuda.fa3.fp8 and cpu.fa3.fp8 round at the same points (P to e4m3, O once to its format); they differ in S's
// accumulation (QGMMA's, above, against the CPU's fp32), in the order of the fp32 row sums and in exp2
// (ex2.approx vs libm, ~2^-22), and in O's accumulation (QGMMA again, over Nk keys: by the rule above at most
// ceil(Nk / 32) 2^-11 M_i; the long cases below run 8192 keys). Row i's logits s S_ij move by at most eta_i, so P_ij / l_i by a factor within
// exp(+-2 eta_i) and O_i by (exp(2 eta_i) - 1) M_i (M_i: the magnitude O_i is summed from, sum_j P_ij |V_j| / l_i);
// L_i by eta_i. Such a move can also flip P's e4m3 rounding of a term to the neighbouring value: at most
// 2 u_e4m3 of the term for a normal P (2 u_e4m3 M_i in all) or one subnormal spacing 2^-9 |V_jc| (2^-9 sum_j |V_jc|
// over the keys, l_i >= 1); O's final rounding adds u_o |x| per side. Hence
//   |O_a - O_b| <= (2 u_e4m3 + exp(2 eta_i) - 1 + ceil(Nk / 32) 2^-11 + 2^-16) M_i + 2 u_o max(|O_a|, |O_b|) + 2^-9 sum_j |V_jc|,
//   |L_a - L_b| <= eta_i + 2^-16 (1 + |L|);
// the ratios to these bounds are returned, and where the worst sits.
struct Agreement {
  double o_ratio = 0, l_ratio = 0, differing = 0;
  std::string worst;
};
Agreement agreement(const gradcheck::Case& c, const gradcheck::Outputs& g, const gradcheck::Outputs& h, const std::vector<double>& q,
                    const std::vector<double>& k, const std::vector<double>& v) {
  const oracle::AttentionMagnitudes m =
      oracle::attention_magnitudes(gradcheck::to_problem(c), {q, k, v}, std::vector<double>(q.size()), {q, k, v});
  const std::vector<double> eta = logit_noise(c, q, k);
  const double u_p = unit_roundoff(Format::e4m3), u_o = unit_roundoff(c.policy.format(Role::o));
  const auto& sh = c.shape;
  const int dv = sh.head_dim_v, group = sh.heads_q / sh.heads_kv;
  const double pv_steps = (sh.seq_k + 31) / 32;
  // (the subnormal flips: 2^-9 sum_j |V_jc| over the keys of the row's kv head, l_i >= 1)
  std::vector<double> column_sum(static_cast<std::size_t>(sh.batch) * sh.heads_kv * dv, 0.0);
  for (std::size_t j = 0; j < v.size(); ++j) column_sum[(j / (static_cast<std::size_t>(sh.seq_k) * dv)) * dv + j % dv] += std::fabs(v[j]);
  Agreement a;
  const auto x = g.at("O").values(), y = h.at("O").values();
  std::size_t differ = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;
    ++differ;
    const double e = eta[i / dv];
    const std::size_t head = i / (static_cast<std::size_t>(sh.seq_q) * dv);  // b Hq + h
    const double underflow = std::ldexp(column_sum[((head / sh.heads_q) * sh.heads_kv + head % sh.heads_q / group) * dv + i % dv], -9);
    const double bound = (2 * u_p + std::expm1(2 * e) + pv_steps * std::ldexp(1.0, -11) + std::ldexp(1.0, -16)) * m.o[i] + 2 * u_o * std::max(std::fabs(x[i]), std::fabs(y[i])) + underflow;
    const double r = std::isnan(x[i]) || std::isnan(y[i]) ? INFINITY : std::fabs(x[i] - y[i]) / bound;
    if (r > a.o_ratio) {
      std::ostringstream w;
      w << "O[" << i << "]: gpu " << x[i] << " cpu " << y[i] << " bound " << bound << " (M " << m.o[i] << ", eta " << e << ")";
      a.o_ratio = r, a.worst = w.str();
    }
  }
  a.differing = x.empty() ? 0 : static_cast<double>(differ) / static_cast<double>(x.size());
  const auto lg = g.at("L").values(), lc = h.at("L").values();
  for (std::size_t j = 0; j < lg.size(); ++j) {
    double r = 0;
    if (std::isinf(lg[j]) || std::isinf(lc[j]) || std::isnan(lg[j]) || std::isnan(lc[j])) {
      r = lg[j] == lc[j] ? 0 : INFINITY;
    } else {
      r = std::fabs(lg[j] - lc[j]) / (eta[j] + std::ldexp(1.0, -16) * (1 + std::fabs(lc[j])));
    }
    if (r > a.l_ratio) {
      std::ostringstream w;
      w << "L[" << j << "]: gpu " << lg[j] << " cpu " << lc[j] << " eta " << eta[j];
      a.l_ratio = r;
      if (r > a.o_ratio) a.worst = w.str();
    }
  }
  return a;
}

// QGMMA's accumulation error on this GPU: one key (Nk = 1), so P = 1, l = 1 and L = s S exactly but for fp32
// roundings (m = s S log2 e, then L = m ln 2: a few 2^-24 of |L|), compared with S in exact arithmetic. Rows
// drawn from N(0, 1), from the outlier mix, rows of one large term and many small ones (the alignment loss), and rows
// of equal positive terms (the one-sided loss as the sum grows); the error must stay within qgmma_bound.
TEST(CudaFa3Fp8, QgmmaAccumulationErrorIsWithinItsBound) {
  REQUIRE_HOPPER();
  auto gpu = fp8_subject();
  ASSERT_TRUE(gpu);
  for (int d : {64, 128, 256}) {
    for (const char* inputs : {"normal:1", "outliers", "spread", "alike"}) {
      gradcheck::Case c;
      c.shape = {1, 4, 4, 256, 1, d, d};
      c.scale = 1.0, c.policy = PrecisionPolicy::uniform(Format::e4m3), c.seed = 7;
      const std::string kind = inputs;
      if (kind != "spread" && kind != "alike") c.inputs = gradcheck::InputDistribution::parse(inputs);
      gradcheck::CaseInputs in = gradcheck::make_inputs(c);
      std::vector<double> q = in.q.values(), k = in.k.values();
      if (kind == "spread") {  // q = (448, 1, 1, ..., 2^-9 ...) against k = 1: small terms beside a large one
        std::mt19937_64 gen(3);
        for (std::size_t r = 0; r < q.size() / d; ++r) {
          for (int x = 0; x < d; ++x) q[r * d + x] = x == static_cast<int>(gen() % d) ? 448 : std::ldexp(1.0, -static_cast<int>(gen() % 10));
        }
        std::fill(k.begin(), k.end(), 1.0);
        in.q.assign(q), in.k.assign(k);
      } else if (kind == "alike") {  // every term the same positive product (0.234375^2, 8 significant bits): the sum grows
        std::fill(q.begin(), q.end(), 0.234375), std::fill(k.begin(), k.end(), 0.234375);  // away from its terms, truncation one-sided
        in.q.assign(q), in.k.assign(k);
      }
      gradcheck::Caller on_gpu(*gpu, c);
      const auto l = on_gpu.fwd(in.q, in.k, in.v).at("L").values();
      double worst = 0, worst_of_sum = 0;
      for (std::size_t row = 0; row < l.size(); ++row) {
        const std::size_t kv = row / 256;  // (Hq = Hkv, Nk = 1: K's row of this head)
        double exact = 0, sum = 0;
        for (int x = 0; x < d; ++x) exact += q[row * d + x] * k[kv * d + x], sum += std::fabs(q[row * d + x] * k[kv * d + x]);
        const double err = std::max(0.0, std::fabs(l[row] - exact) - 4 * std::ldexp(std::fabs(exact), -24));  // (less L's own fp32 roundings)
        if (sum > 0) worst_of_sum = std::max(worst_of_sum, err / sum);
        worst = std::max(worst, err / qgmma_bound(&q[row * d], &k[kv * d], d));
      }
      std::cout << "QGMMA S error, d=" << d << " " << inputs << ": worst |S_gpu - S| / sum |q k| = 2^" << std::log2(worst_of_sum)
                << ", / the bound = " << worst << "\n";
      EXPECT_LE(worst, 1.0) << d << " " << inputs;
    }
  }
}

TEST(CudaFa3Fp8, AgreesWithCpuFa3Fp8WithinTheAccumulationOrderDifference) {
  REQUIRE_HOPPER();
  auto gpu = fp8_subject();
  ASSERT_TRUE(gpu);
  auto cpu = cpu::make_cpu_fa3_fp8();
  for (const Fp8Variant& variant : kVariants) {
    variant.apply(*gpu, cpu.get());
    const std::string variant_name = variant.name();
    for (const char* policy_text : {"e4m3", "e4m3,o=fp16", "e4m3,round=sr,seed=9"}) {
      const PrecisionPolicy policy = PrecisionPolicy::parse(policy_text);
      gradcheck::GeneratorLimits limits;
      limits.max_seq = 300;
      limits.max_head_dim = 256;
      const rc::Gen<gradcheck::Case> cases = gradcheck::case_generator(gpu->info(), policy, limits);
      rc::Random random(11);
      double worst = 0, worst_l = 0, differing = 0;
      const int n = 60;
      for (int i = 0; i < n; ++i) {
        const gradcheck::Case c = cases(random.split(), 40).value();
        const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
        gradcheck::Caller on_gpu(*gpu, c), on_cpu(*cpu, c);
        const gradcheck::Outputs g = on_gpu.fwd(in.q, in.k, in.v), h = on_cpu.fwd(in.q, in.k, in.v);
        const Agreement a = agreement(c, g, h, in.q.values(), in.k.values(), in.v.values());
        EXPECT_LE(a.o_ratio, 1.0) << variant_name << " " << c.to_string() << "\n" << a.worst;
        EXPECT_LE(a.l_ratio, 1.0) << variant_name << " " << c.to_string() << "\n" << a.worst;
        worst = std::max(worst, a.o_ratio), worst_l = std::max(worst_l, a.l_ratio), differing += a.differing;
      }
      // (and long rows, past the generator's 300 keys: O's accumulation over 8192 keys)
      for (int d : {64, 128, 256}) {
        if (!variant.supports(d)) continue;
        gradcheck::Case c;
        c.shape = {1, 2, 1, 64, 8192, d, d};
        c.scale = 1 / std::sqrt(static_cast<double>(d)), c.policy = policy, c.seed = 40 + d;
        const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
        gradcheck::Caller on_gpu(*gpu, c), on_cpu(*cpu, c);
        const gradcheck::Outputs g = on_gpu.fwd(in.q, in.k, in.v), h = on_cpu.fwd(in.q, in.k, in.v);
        const Agreement a = agreement(c, g, h, in.q.values(), in.k.values(), in.v.values());
        std::cout << "  Nk = 8192, d = " << d << ": |difference| / bound " << a.o_ratio << ", L " << a.l_ratio << "\n";
        EXPECT_LE(a.o_ratio, 1.0) << variant_name << " " << c.to_string() << "\n" << a.worst;
        EXPECT_LE(a.l_ratio, 1.0) << variant_name << " " << c.to_string() << "\n" << a.worst;
      }
      std::cout << "cuda.fa3.fp8 vs cpu.fa3.fp8, " << variant_name << ", " << policy_text << ": worst |difference| / bound = " << worst << ", L " << worst_l
                << " x 2^-16 (1 + |L|); O elements differing " << 100 * differing / n << "%\n";
      // The same SR words: were the streams or the indices wrong, about half the non-representable elements
      // would round the other way. (O in bf16 only: QGMMA's logit noise is comparable to fp16's spacing, so an
      // fp16 O differs in more places, 13 % measured at 716f5f4 on the H200, with no SR involved.)
      if (policy.format(Role::o) == Format::bf16) {
        EXPECT_LT(differing / n, 0.10) << policy_text;
      }
    }
  }
}

// x ([B H, n, d] values, logical order) as e4m3 values times a power of two per block of `block` rows of a head: each
// block multiplied by 2^s (s drawn from -max_shift .. max_shift per block) and quantized by the quantizer's rule
// (fa3-accuracy's quantize), so every block carries its own exponent.
std::vector<double> quantize_blocks(std::vector<double> x, int heads, int n, int d, int block, int max_shift, std::mt19937_64& gen) {
  std::uniform_int_distribution<int> shift(-max_shift, max_shift);
  for (int h = 0; h < heads; ++h) {
    for (int r0 = 0; r0 < n; r0 += block) {
      double* p = &x[(static_cast<std::size_t>(h) * n + r0) * d];
      const std::size_t count = static_cast<std::size_t>(std::min(block, n - r0)) * d;
      const int s = shift(gen);
      double amax = 0;
      for (std::size_t i = 0; i < count; ++i) p[i] = std::ldexp(p[i], s), amax = std::max(amax, std::fabs(p[i]));
      const int e = e4m3_block_exponent(amax);
      for (std::size_t i = 0; i < count; ++i) p[i] = std::ldexp(to_double(round_to_e4m3(std::ldexp(p[i], -e), Rounding::nearest_even)), e);
    }
  }
  return x;
}

TEST(CudaFa3Fp8, ScaledOperandsWithPerBlockExponentsAgreeWithCpuFa3Fp8) {
  REQUIRE_HOPPER();
  auto gpu = fp8_subject();
  ASSERT_TRUE(gpu);
  auto cpu = cpu::make_cpu_fa3_fp8();
  gpu->set_option("operands", "scaled"), cpu->set_option("operands", "scaled");
  std::mt19937_64 gen(5);
  int runs = 0;
  for (const Fp8Variant& variant : kVariants) {
    variant.apply(*gpu, cpu.get());
    const int block_k = variant.block_k;
    const std::string variant_name = variant.name();
    for (const char* policy_text : {"fp32,o=bf16", "bf16", "fp16"}) {
      for (int d : {64, 128, 256}) {
        if (!variant.supports(d)) continue;
        for (Mask mask : {Mask::none, Mask::causal_bottom_right}) {
          // (the keys in turn: 390, whole tiles only, and one key past them, where the last tile holds a single key)
          const int nk = std::vector<int>{390, 2 * block_k, 2 * block_k + 1}[runs % 3];
          gradcheck::Case c;
          c.shape = {2, 4, 2, 300, nk, d, d};
          c.mask = mask, c.scale = 1 / std::sqrt(static_cast<double>(d));
          c.policy = PrecisionPolicy::parse(policy_text);
          c.seed = 100 + runs;
          gradcheck::CaseInputs in = gradcheck::make_inputs(c);
          std::mt19937_64 g2(gen());
          const bool narrow = c.policy.format(Role::q) == Format::fp16;
          // (Q's and K's blocks shifted by up to 2^4 either way, V's by up to 2^20, fp16's, whose range would not hold
          // that, unshifted; larger logits would meet a limit every FA kernel here shares: m is the rounded product
          // x scale2, so fma(x, scale2, -m) of the row's largest is that rounding's error, which passes 2^7, and
          // exp2 of it fp32's range, once |x scale2| passes 2^31)
          const int qk_shift = narrow ? 0 : 4, v_shift = narrow ? 0 : 20;
          const std::vector<double> q = quantize_blocks(in.q.values(), 2 * 4, 300, d, 128, qk_shift, g2),
                                    k = quantize_blocks(in.k.values(), 2 * 2, nk, d, block_k, qk_shift, g2),
                                    v = quantize_blocks(in.v.values(), 2 * 2, nk, d, block_k, v_shift, g2);
          in.q.assign(q), in.k.assign(k), in.v.assign(v);
          ASSERT_EQ(in.q.values(), q) << "the scaled values must be exact in " << policy_text;
          gradcheck::Caller on_gpu(*gpu, c), on_cpu(*cpu, c);
          const gradcheck::Outputs g = on_gpu.fwd(in.q, in.k, in.v), h = on_cpu.fwd(in.q, in.k, in.v);
          const Agreement a = agreement(c, g, h, q, k, v);
          std::cout << "scaled " << variant_name << " " << policy_text << " d=" << d << " " << c.to_string() << ": |difference| / bound " << a.o_ratio << ", L " << a.l_ratio
                    << ", differing " << 100 * a.differing << "%\n";
          EXPECT_LE(a.o_ratio, 1.0) << variant_name << " " << c.to_string() << "\n" << a.worst;
          EXPECT_LE(a.l_ratio, 1.0) << variant_name << " " << c.to_string() << "\n" << a.worst;
          ++runs;
        }
      }
    }
  }
}

// The selective rule (tau = 8) where the running max does not hold: K's 256-key blocks scaled by 2^0, 2^1, 2^2, 2^3 in turn
// (then again), so that a row's logits grow by about 4, 8 and 17 log2 units over its first tiles. Tiles whose exponentials
// against the stale max sum past the fast path's bound take S again (E4m3Ops::qk_warp) and the rule's path from it; those
// whose max grows by tau or more rescale. O and L agree with cpu.fa3.fp8 at tau = 8 within the bound above, the rescale
// counts are the twin's (and not 0: the slow path ran), the persistent scheduler gives the grid's bits, and with the
// blocks unscaled the fast path holds (fewer rescales, the same agreement). Without turns (turns=none), the same bits.
TEST(CudaFa3Fp8, SelectiveRuleTakesSAgainWhereTheMaxGrows) {
  REQUIRE_HOPPER();
  auto grid = fp8_subject(), persistent = fp8_subject(), no_turns = fp8_subject();
  ASSERT_TRUE(grid && persistent && no_turns);
  auto cpu = cpu::make_cpu_fa3_fp8();
  for (Subject* s : {grid.get(), persistent.get(), no_turns.get()}) kVariants[5].apply(*s, cpu.get()), s->set_option("operands", "scaled");
  cpu->set_option("operands", "scaled");
  grid->set_option("scheduler", "grid"), persistent->set_option("scheduler", "persistent"), no_turns->set_option("turns", "none");
  std::mt19937_64 gen(23);
  for (bool growing : {true, false}) {
    for (Mask mask : {Mask::none, Mask::causal_bottom_right}) {
      gradcheck::Case c = testing::forward_case({1, 4, 2, 300, 2 * 1024 + 70, 128, 128}, mask, "fp32,o=bf16");
      c.seed = 300 + growing;
      gradcheck::CaseInputs in = gradcheck::make_inputs(c);
      std::vector<double> k = in.k.values();
      const int nk = c.shape.seq_k;
      if (growing) {
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::ldexp(k[i], static_cast<int>(i / 128 % nk / 256 % 4));  // (head-major rows of d = 128)
      }
      const std::vector<double> q = quantize_blocks(in.q.values(), 4, 300, 128, 128, 0, gen), kq = quantize_blocks(k, 2, nk, 128, 256, 0, gen),
                                v = quantize_blocks(in.v.values(), 2, nk, 128, 256, 0, gen);
      in.q.assign(q), in.k.assign(kq), in.v.assign(v);
      const gradcheck::Outputs g = gradcheck::Caller(*grid, c).fwd(in.q, in.k, in.v);
      const double gpu_rescales = grid->counters().at(0).value;
      const gradcheck::Outputs h = gradcheck::Caller(*cpu, c).fwd(in.q, in.k, in.v);
      double cpu_rescales = -1;
      for (const Counter& counter : cpu->counters()) cpu_rescales = counter.name == "rescales" ? counter.value : cpu_rescales;
      const Agreement a = agreement(c, g, h, q, kq, v);
      std::cout << (growing ? "growing" : "level") << " logits, " << c.to_string() << ": rescales " << gpu_rescales << " (cpu.fa3.fp8 " << cpu_rescales
                << "), |difference| / bound " << a.o_ratio << ", L " << a.l_ratio << "\n";
      EXPECT_LE(a.o_ratio, 1.0) << c.to_string() << "\n" << a.worst;
      EXPECT_LE(a.l_ratio, 1.0) << c.to_string() << "\n" << a.worst;
      EXPECT_EQ(gpu_rescales, cpu_rescales) << c.to_string();
      if (growing) {
        EXPECT_GT(gpu_rescales, 0) << c.to_string();
      }
      testing::expect_output_bits(gradcheck::Caller(*persistent, c).fwd(in.q, in.k, in.v), g, "tau=8 scheduler=persistent", "scheduler=grid", c);
      EXPECT_EQ(persistent->counters().at(0).value, gpu_rescales) << c.to_string();
      testing::expect_output_bits(gradcheck::Caller(*no_turns, c).fwd(in.q, in.k, in.v), g, "tau=8 turns=none", "turns=auto", c);
    }
  }
}

// Tails (1, 7, 65, 130 queries; 1, 63, 130, 270 keys; every variant), every mask, GQA, both layouts: finite O, agreement with
// cpu.fa3.fp8 (the bound above). What compute-sanitizer runs. Eight query heads: at d = 64 a CTA holds three
// groups of 64 rows, and with Nq <= 128 its third lies wholly past Nq; its Q exponent lookup must stay inside the
// last head's blocks, and with 8 heads a read past them leaves the exponents' allocation (32 bytes), where
// memcheck sees it (with 2 heads it stayed inside the allocation's 16-byte minimum).
TEST(CudaFa3Fp8, SmallShapesSweep) {
  REQUIRE_HOPPER();
  auto gpu = fp8_subject();
  ASSERT_TRUE(gpu);
  auto cpu = cpu::make_cpu_fa3_fp8();
  // (each variant with V transposed by the pass and, with 128-key tiles, in the kernel: the sanitizer's sweep of both)
  for (const auto& [variant, v_transpose] : std::vector<std::pair<Fp8Variant, const char*>>{
           {kVariants[0], "pass"}, {kVariants[0], "kernel"}, {kVariants[1], "pass"}, {kVariants[2], "pass"}, {kVariants[3], "pass"}, {kVariants[3], "kernel"},
           {kVariants[4], "pass"}, {kVariants[5], "pass"}}) {
    gpu->set_option("v_transpose", "pass");  // (block_k=224 and 256 refuse kernel: through pass between variants)
    variant.apply(*gpu, cpu.get());
    gpu->set_option("v_transpose", v_transpose);
    const std::string variant_name = variant.name() + " v_transpose=" + v_transpose;
    for (int d : {64, 128, 256}) {
      if (!variant.supports(d) || (d == 256 && std::string(v_transpose) == "kernel")) continue;  // (the producer's transpose: d <= 128)
      for (int nq : {1, 7, 65, 130}) {
        for (int nk : {1, 63, 130, 270}) {  // (270: a last key tile of every width partly past Nk, the second or the third)
          for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
            gradcheck::Case c;
            c.shape = {1, 8, 2, nq, nk, d, d};
            c.mask = m, c.scale = 1 / std::sqrt(static_cast<double>(d));
            c.policy = PrecisionPolicy::uniform(Format::e4m3);
            c.layout = nq % 2 ? gradcheck::Layout::bnhd : gradcheck::Layout::bhnd;
            c.seed = static_cast<std::uint64_t>(d * 1000 + nq * 10 + nk);
            const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
            gradcheck::Caller on_gpu(*gpu, c), on_cpu(*cpu, c);
            const gradcheck::Outputs g = on_gpu.fwd(in.q, in.k, in.v), h = on_cpu.fwd(in.q, in.k, in.v);
            for (double x : g.at("O").values()) ASSERT_TRUE(std::isfinite(x)) << variant_name << " " << c.to_string();
            const Agreement a = agreement(c, g, h, in.q.values(), in.k.values(), in.v.values());
            EXPECT_LE(a.o_ratio, 1.0) << variant_name << " " << c.to_string() << "\n" << a.worst;
            EXPECT_LE(a.l_ratio, 1.0) << variant_name << " " << c.to_string() << "\n" << a.worst;
          }
        }
      }
    }
  }
}

// The bench's timed runs for both operand forms. With operands=scaled every run re-quantizes, which resets the
// quantizer's flags first; as a copy from a host array the driver may synchronize there, and RunTimer refuses a
// run that waits for the device (it would time the wait). So both forms must time, every repeat positive.
TEST(CudaFa3Fp8, TimesBothOperandForms) {
  REQUIRE_HOPPER();
  auto gpu = fp8_subject();
  ASSERT_TRUE(gpu);
  TimingRequest r;
  r.shape = {1, 4, 4, 1024, 1024, 128, 128};
  r.scale = 1 / std::sqrt(128.0), r.warmup = 2, r.repeats = 5;
  // (each operand form in the formats it declares: e4m3 tensors, or wider ones holding scaled e4m3 values)
  for (const char* operands : {"e4m3", "scaled"}) {
    gpu->set_option("operands", operands);
    for (Format format : std::string(operands) == "e4m3" ? std::vector<Format>{Format::e4m3} : std::vector<Format>{Format::bf16, Format::fp16}) {
      r.format = format;
      for (const char* p_operand : {"registers", "shared"}) {  // (both kernels at this d = 128, block_k 128 shape)
        gpu->set_option("p_operand", p_operand);
        std::optional<Timing> t;
        try {
          t = gpu->time(r);
        } catch (const std::exception& e) {
          FAIL() << "operands=" << operands << " " << name(format) << " p_operand=" << p_operand << ": " << e.what();
        }
        ASSERT_TRUE(t.has_value()) << "operands=" << operands << " p_operand=" << p_operand;
        ASSERT_EQ(t->milliseconds.size(), 5u);
        for (double ms : t->milliseconds) EXPECT_GT(ms, 0.0) << "operands=" << operands << " " << name(format) << " p_operand=" << p_operand;
      }
    }
  }
  gpu->set_option("operands", "e4m3");
}

TEST(CudaFa3Fp8, PFromSharedMemoryUnderAutoOrWhenAsked) {
  // (host only: which kernel fa3_fp8_forward launches for each setting)
  Fp8ForwardParams f;
  f.p.shape.head_dim = 128, f.block_k = 128;
  EXPECT_TRUE(fa3_fp8_p_from_shared(f)) << "auto at d = 128, block_k 128";
  f.block_k = 224;
  EXPECT_FALSE(fa3_fp8_p_from_shared(f)) << "auto with 224-key tiles";
  f.block_k = 256;
  EXPECT_TRUE(fa3_fp8_p_from_shared(f)) << "auto with 256-key tiles (two groups, the overlapped loop)";
  f.p.shape.head_dim = 64, f.block_k = 128;
  EXPECT_FALSE(fa3_fp8_p_from_shared(f)) << "auto at d = 64";
  f.p.shape.head_dim = 256;
  EXPECT_FALSE(fa3_fp8_p_from_shared(f)) << "auto at d = 256 (two groups, P in registers)";
  f.p.shape.head_dim = 128;
  f.p_operand = Fp8POperand::registers;
  EXPECT_FALSE(fa3_fp8_p_from_shared(f));
  f.p_operand = Fp8POperand::shared;
  EXPECT_TRUE(fa3_fp8_p_from_shared(f));
}

TEST(CudaFa3Fp8, TurnsOnlyWithPInRegistersUnderAuto) {
  // (host only: whether fa3_fp8_forward's consumer groups take turns)
  Fp8ForwardParams f;
  f.p.shape.head_dim = 128, f.block_k = 128;
  EXPECT_FALSE(fa3_fp8_takes_turns(f)) << "auto with P in shared memory";
  f.turns = Fp8Turns::ring;
  EXPECT_TRUE(fa3_fp8_takes_turns(f)) << "turns=ring";
  f.turns = Fp8Turns::automatic, f.p_operand = Fp8POperand::registers;
  EXPECT_TRUE(fa3_fp8_takes_turns(f)) << "auto with P in registers (two groups)";
  f.p_operand = Fp8POperand::automatic, f.p.shape.head_dim = 64;
  EXPECT_TRUE(fa3_fp8_takes_turns(f)) << "auto at d = 64 (three groups, P in registers)";
  f.p.shape.head_dim = 256;
  EXPECT_TRUE(fa3_fp8_takes_turns(f)) << "auto at d = 256 (two groups, P in registers)";
  f.p.shape.head_dim = 128, f.block_k = 256;
  EXPECT_TRUE(fa3_fp8_takes_turns(f)) << "auto with 256-key tiles and P in shared memory (turns at the exponentials)";
  f.p_operand = Fp8POperand::registers;
  EXPECT_TRUE(fa3_fp8_takes_turns(f)) << "256-key tiles with P in registers";
}

TEST(CudaFa3Fp8, VTransposedInTheKernelOnlyWhenAsked) {
  // (host only: whether fa3_fp8_forward reads V and transposes it itself, or reads the pass's V^T)
  Fp8ForwardParams f;
  f.p.shape.head_dim = 128, f.block_k = 128;
  EXPECT_FALSE(fa3_fp8_transposes_v_in_kernel(f)) << "auto (the pass: the kernel's transpose measured slower)";
  f.v_transpose = Fp8VTranspose::kernel;
  EXPECT_TRUE(fa3_fp8_transposes_v_in_kernel(f));
  f.p.shape.head_dim = 64;
  EXPECT_TRUE(fa3_fp8_transposes_v_in_kernel(f)) << "at d = 64";
  f.p.shape.head_dim = 128, f.block_k = 224;
  EXPECT_TRUE(fa3_fp8_transposes_v_in_kernel(f)) << "asked with 224-key tiles (the launcher then refuses them)";
  f.v_transpose = Fp8VTranspose::pass;
  EXPECT_FALSE(fa3_fp8_transposes_v_in_kernel(f)) << "v_transpose=pass";
}

TEST(CudaFa3Fp8, PersistentSchedulerUnderCausalMasksWhereItsKernelRuns) {
  // (host only: which scheduler fa3_fp8_forward launches)
  Fp8ForwardParams f;
  f.p.shape.head_dim = 128, f.block_k = 128, f.p.shape.mask = CausalMask::top_left;
  EXPECT_TRUE(fa3_fp8_persistent_supported(f)) << "auto's kernel at d = 128: P in shared memory, no turns, the pass";
  EXPECT_TRUE(fa3_fp8_persistent(f)) << "auto under a causal mask";
  f.p.shape.mask = CausalMask::bottom_right;
  EXPECT_TRUE(fa3_fp8_persistent(f)) << "auto under a bottom-right causal mask";
  f.p.shape.mask = CausalMask::none;
  EXPECT_FALSE(fa3_fp8_persistent(f)) << "auto without a mask (the grid)";
  f.scheduler = Fp8Scheduler::persistent;
  EXPECT_TRUE(fa3_fp8_persistent(f)) << "scheduler=persistent without a mask";
  f.scheduler = Fp8Scheduler::grid, f.p.shape.mask = CausalMask::top_left;
  EXPECT_FALSE(fa3_fp8_persistent(f)) << "scheduler=grid";
  f.scheduler = Fp8Scheduler::automatic;
  for (const auto& [what, change] : std::vector<std::pair<const char*, void (*)(Fp8ForwardParams&)>>{
           {"d = 64 (P in registers)", [](Fp8ForwardParams& g) { g.p.shape.head_dim = 64; }},
           {"d = 256 (P in registers)", [](Fp8ForwardParams& g) { g.p.shape.head_dim = 256; }},
           {"block_k 224", [](Fp8ForwardParams& g) { g.block_k = 224; }},
           {"block_k 256 with P in registers", [](Fp8ForwardParams& g) { g.block_k = 256, g.p_operand = Fp8POperand::registers; }},
           {"p_operand=registers", [](Fp8ForwardParams& g) { g.p_operand = Fp8POperand::registers; }},
           {"turns=ring", [](Fp8ForwardParams& g) { g.turns = Fp8Turns::ring; }},
           {"v_transpose=kernel", [](Fp8ForwardParams& g) { g.v_transpose = Fp8VTranspose::kernel; }}}) {
    Fp8ForwardParams g = f;
    change(g);
    EXPECT_FALSE(fa3_fp8_persistent_supported(g)) << what;
    EXPECT_FALSE(fa3_fp8_persistent(g)) << "auto under a causal mask with " << what << ": the grid";
  }
  // 256-key tiles with P in shared memory (auto's there): persistent under every mask, in turns
  for (CausalMask mask : {CausalMask::none, CausalMask::top_left, CausalMask::bottom_right}) {
    Fp8ForwardParams g = f;
    g.block_k = 256, g.p.shape.mask = mask;
    EXPECT_TRUE(fa3_fp8_persistent_supported(g)) << "block_k 256";
    EXPECT_TRUE(fa3_fp8_persistent(g)) << "auto with block_k 256";
    g.turns = Fp8Turns::ring;
    EXPECT_TRUE(fa3_fp8_persistent(g)) << "block_k 256, turns=ring (its turns)";
    g.scheduler = Fp8Scheduler::grid;
    EXPECT_FALSE(fa3_fp8_persistent(g)) << "block_k 256, scheduler=grid";
  }
}

// (host only) SubjectInfo::head_dims empty means every head dim, so an accepted set of options must leave at least one
// compiled one: every combination of the options that pick the kernel, set from the defaults in two orders, each value
// accepted or refused with SubjectError; after each accepted one the subject declares head dims, each of them 64, 128 or 256.
TEST(CudaFa3Fp8, EveryAcceptedOptionSetDeclaresAHeadDim) {
  const std::vector<std::pair<const char*, std::vector<const char*>>> options = {{"block_k", {"128", "224", "256"}},
                                                                                 {"p_operand", {"auto", "registers", "shared"}},
                                                                                 {"turns", {"auto", "ring", "none"}},
                                                                                 {"v_transpose", {"auto", "pass", "kernel"}},
                                                                                 {"scheduler", {"auto", "grid", "persistent"}},
                                                                                 {"tau", {"0", "8"}}};
  int sets = 0, accepted = 0;
  for (int pick = 0; pick < 3 * 3 * 3 * 3 * 3 * 2; ++pick) {
    for (bool reversed : {false, true}) {
      auto s = make_cuda_fa3_fp8();
      int rest = pick;
      bool all = true;
      for (std::size_t k = 0; k < options.size(); ++k) {
        const auto& [name, values] = options[reversed ? options.size() - 1 - k : k];
        const std::size_t which = static_cast<std::size_t>(rest) % values.size();
        rest /= static_cast<int>(values.size());
        try {
          s->set_option(name, values[which]);
        } catch (const SubjectError&) {
          all = false;
          continue;
        }
        const std::vector<int>& dims = s->info().head_dims;
        ASSERT_FALSE(dims.empty()) << name << "=" << values[which] << " accepted with no head dim left, set " << pick << (reversed ? " reversed" : "");
        for (int d : dims) EXPECT_TRUE(d == 64 || d == 128 || d == 256) << d;
      }
      ++sets, accepted += all;
    }
  }
  std::cout << accepted << " of " << sets << " option sets accepted whole\n";
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, sets) << "some pairs have no kernel (turns=none with P in registers, among others)";
}

TEST(CudaFa3Fp8, OByTmaWhereQAndPTilesHoldIt) {
  // (host only: which epilogue fa3_fp8_forward launches. O of 64 x 128 in 16 bits is two boxes of 8 KiB: an e4m3 Q
  // tile holds one, P's tile the other, so only the kernel with P in shared memory can stage it)
  Fp8ForwardParams f;
  f.p.shape = {1, 2, 2, 300, 300, 128, CausalMask::none, 0.1f};
  alignas(16) static std::uint16_t o[2 * 300 * 128];
  f.p.o = {o, 2 * 300 * 128, 300 * 128, 128};
  f.block_k = 128;
  EXPECT_TRUE(fa3_fp8_o_by_tma(f)) << "auto at d = 128, block_k 128 (P shared)";
  f.epilogue = Fa3Epilogue::stores;
  EXPECT_FALSE(fa3_fp8_o_by_tma(f)) << "epilogue=stores";
  f.epilogue = Fa3Epilogue::automatic;
  f.p_operand = Fp8POperand::registers;
  EXPECT_FALSE(fa3_fp8_o_by_tma(f)) << "P in registers: no tile for O's second box";
  f.p_operand = Fp8POperand::shared, f.p.shape.head_dim = 256;
  alignas(16) static std::uint16_t o256[2 * 300 * 256];
  f.p.o = {o256, 2 * 300 * 256, 300 * 256, 256};
  EXPECT_FALSE(fa3_fp8_o_by_tma(f)) << "d = 256, P shared: O's four boxes against the Q tile's two and the P tile's one";
  f.p.shape.head_dim = 128, f.p.o = {o, 2 * 300 * 128, 300 * 128, 128};
  EXPECT_TRUE(fa3_fp8_o_by_tma(f)) << "back at d = 128, P shared";
  f.p_operand = Fp8POperand::automatic, f.block_k = 224;
  EXPECT_FALSE(fa3_fp8_o_by_tma(f)) << "224-key tiles (P in registers)";
  f.block_k = 128, f.p.rounding.stochastic = true;
  EXPECT_FALSE(fa3_fp8_o_by_tma(f)) << "stochastic rounding (each element's word)";
  f.p.rounding.stochastic = false, f.p.o.row = 130;
  EXPECT_FALSE(fa3_fp8_o_by_tma(f)) << "a row stride TMA cannot take";
}

// (host only: the launcher's rules for tau, and its refusals, which come before any CUDA call) FA4's selective rule runs in
// the 256-key kernel with P in shared memory at d = 128 only, with tau at most 8 (P up to 2^tau, rounded to e4m3: 448 at
// most); turns=none runs that kernel without turns only under it.
TEST(CudaFa3Fp8, TauOnlyWhereTheSelectiveKernelRuns) {
  Fp8ForwardParams f;
  f.p.shape = {1, 2, 2, 300, 300, 128, CausalMask::none, 0.1f};
  alignas(16) static std::uint8_t qk[2 * 300 * 128];
  f.p.q = f.p.k = {qk, 2 * 300 * 128, 300 * 128, 128};
  f.block_k = 256;
  EXPECT_TRUE(fa3_fp8_selective_supported(f)) << "block_k 256, P shared by auto, d = 128";
  f.p_operand = Fp8POperand::registers;
  EXPECT_FALSE(fa3_fp8_selective_supported(f)) << "P in registers";
  f.p_operand = Fp8POperand::automatic, f.block_k = 128;
  EXPECT_FALSE(fa3_fp8_selective_supported(f)) << "128-key tiles";
  const auto refusal = [&] {
    try {
      fa3_fp8_forward(f, nullptr);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  f.p.rescale_threshold = 8;
  EXPECT_NE(refusal().find("tau > 0 (FA4's selective rule) with block_k 256 and P in shared memory at head dim 128 only"), std::string::npos) << refusal();
  f.block_k = 256;
  for (float bad : {8.5f, -1.f, std::nanf("")}) {
    f.p.rescale_threshold = bad;
    EXPECT_NE(refusal().find("tau (the rescale threshold) in [0, 8]"), std::string::npos) << bad << ": " << refusal();
  }
  f.p.rescale_threshold = 8, f.turns = Fp8Turns::none;
  EXPECT_FALSE(fa3_fp8_takes_turns(f)) << "turns=none under tau > 0";
  f.p.rescale_threshold = 0;
  EXPECT_TRUE(fa3_fp8_takes_turns(f)) << "turns=none under FA3's rule: the 256-key kernel takes turns";
  EXPECT_NE(refusal().find("turns=none with P in shared memory and block_k 128, or block_k 256 with tau > 0, only"), std::string::npos) << refusal();
}

// P V reading P from shared memory (three consumer groups) multiplies the same e4m3 bytes as from registers, in the
// same k order: O and L must be the register path's bit for bit. The shapes reach the layout's edges: one key tile and
// several (the overlapped loop's last step is its own code), key and query tails, CTAs of 192 rows whose second or
// third group has no rows (Nq <= 64, <= 128), both causal alignments, GQA, stochastic rounding, O in bf16 and fp16.
// One assumption beyond the layout: under a causal mask a CTA of 192 rows makes its lower groups walk key tiles that
// are wholly masked for them and that a CTA of 128 rows does not walk; there P = 0 and alpha = 1, so the bits agree
// only if QGMMA returns its accumulator unchanged when every product is zero. It did on the H200 (c68d6cf: these cases
// pass), though no document says so; what was measured of QGMMA's accumulation (QgmmaAccumulationErrorIsWithinItsBound)
// is a loss in the products it adds. A failure under causal masks alone points there, not at the layout.
// The kernel with P shared runs with its groups in turns (turns=ring) and without (turns=none: each group's own
// barrier hands its P tile to its P V); both are compared.
TEST(CudaFa3Fp8, PFromSharedMemoryGivesTheRegisterPathsBits) {
  REQUIRE_HOPPER();
  auto registers = fp8_subject(), shared = fp8_subject(), shared_ring = fp8_subject();
  ASSERT_TRUE(registers && shared && shared_ring);
  registers->set_option("p_operand", "registers"), shared->set_option("p_operand", "shared"), shared_ring->set_option("p_operand", "shared");
  shared->set_option("turns", "none"), shared_ring->set_option("turns", "ring");
  int compared = 0;
  // (d = 128: three groups with P shared against two with P in registers; d = 256: two groups either way, fewer shapes)
  for (int d : {128, 256}) {
    const std::vector<int> nqs = d == 128 ? std::vector<int>{1, 65, 129, 200, 300} : std::vector<int>{1, 129, 300};
    const std::vector<int> nks = d == 128 ? std::vector<int>{1, 128, 129, 383, 640} : std::vector<int>{1, 129, 640};
    for (const char* policy : {"e4m3", "e4m3,o=fp16", "e4m3,round=sr,seed=5"}) {
      for (int nq : nqs) {
        for (int nk : nks) {
          for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
            gradcheck::Case c;
            c.shape = {2, 4, 2, nq, nk, d, d};
            c.mask = m, c.scale = 1 / std::sqrt(static_cast<double>(d));
            c.policy = PrecisionPolicy::parse(policy);
            c.seed = static_cast<std::uint64_t>(d * 100000 + nq * 1000 + nk);
            const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
            const gradcheck::Outputs want = gradcheck::Caller(*registers, c).fwd(in.q, in.k, in.v);
            for (Subject* subject : {shared.get(), shared_ring.get()}) {
              const std::string turns = subject == shared.get() ? "turns=none" : "turns=ring";
              testing::expect_output_bits(gradcheck::Caller(*subject, c).fwd(in.q, in.k, in.v), want, turns, "the register path", c);
              ++compared;
            }
          }
        }
      }
    }
  }
  std::cout << compared << " cases compared bit for bit\n";
}

// 256-key tiles: the kernel with P in shared memory (auto's: the overlapped loop, turns at the exponentials, O by TMA through
// the Q and P tiles) on the persistent scheduler (auto's) and on the grid computes what the kernel with P in registers
// (the loop without overlap, O by stores) does, so O and L must be its bits. The shapes reach a tile's edges (one key, a
// partial 256-key tile, several), query tails, GQA, both masks' alignments, O in fp16, stochastic rounding (O by
// stores), operands=scaled (block exponents per 256 keys), and 16 heads of 1000 rows (96 work tiles of 128 rows: with
// 2 batches 192, more than the SMs, so persistent CTAs walk several and the P tile that staged one tile's O is
// rewritten by the next tile's first P).
TEST(CudaFa3Fp8, KeyTilesOf256WithPSharedGiveTheRegisterPathsBits) {
  REQUIRE_HOPPER();
  auto registers = fp8_subject(), persistent = fp8_subject(), grid = fp8_subject();
  ASSERT_TRUE(registers && persistent && grid);
  for (Subject* s : {registers.get(), persistent.get(), grid.get()}) s->set_option("block_k", "256");
  registers->set_option("p_operand", "registers"), persistent->set_option("p_operand", "shared"), grid->set_option("p_operand", "shared");
  grid->set_option("scheduler", "grid");
  std::mt19937_64 gen(19);
  int compared = 0;
  for (const char* operands : {"e4m3", "scaled"}) {
    for (Subject* s : {registers.get(), persistent.get(), grid.get()}) s->set_option("operands", operands);
    const bool scaled = std::string(operands) == "scaled";
    for (const char* policy : scaled ? std::vector<const char*>{"bf16,o=fp16"} : std::vector<const char*>{"e4m3", "e4m3,o=fp16", "e4m3,round=sr,seed=5"}) {
      for (const auto& [heads, nq, nk] : std::vector<std::tuple<int, int, int>>{{4, 1, 1}, {4, 65, 200}, {4, 300, 256}, {4, 129, 700}, {16, 1000, 513}}) {
        for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
          gradcheck::Case c = testing::forward_case({2, heads, heads / 2, nq, nk, 128, 128}, m, policy);
          gradcheck::CaseInputs in = gradcheck::make_inputs(c);
          if (scaled) {
            in.q.assign(quantize_blocks(in.q.values(), 2 * heads, nq, 128, 128, 4, gen));
            in.k.assign(quantize_blocks(in.k.values(), 2 * heads / 2, nk, 128, 256, 4, gen));
            in.v.assign(quantize_blocks(in.v.values(), 2 * heads / 2, nk, 128, 256, 20, gen));
          }
          const gradcheck::Outputs want = gradcheck::Caller(*registers, c).fwd(in.q, in.k, in.v);
          for (Subject* s : {persistent.get(), grid.get()}) {
            const std::string name = std::string("block_k=256 p_operand=shared scheduler=") + (s == grid.get() ? "grid" : "auto (persistent)") + " operands=" + operands;
            testing::expect_output_bits(gradcheck::Caller(*s, c).fwd(in.q, in.k, in.v), want, name, "block_k=256 p_operand=registers", c);
            ++compared;
          }
        }
      }
    }
  }
  std::cout << compared << " cases: 256-key tiles with P in shared memory give the register path's bits\n";
}

// O by TMA (epilogue=automatic, the kernel with P in shared memory) rounds the same O / l 2^o_exp with the same cvt.rn
// as store_rows' 4-byte stores (epilogue=stores): the same O and L bits, over query tails (rows past Nq clipped by the
// map, CTAs of 192 rows whose later groups have none), key tails, masks, GQA, O in bf16 and fp16, and scaled operands
// whose V blocks carry exponents up to 2^20 apart (so O's final 2^o_exp is not 1).
// V transposed by the forward's producer warpgroup (v_transpose=kernel) puts the bytes transpose_v_e4m3 writes into
// the same V^T tile, so O and L must be the pass's bit for bit, in every kernel that takes 128-key tiles: P in
// registers at d = 64 and 128, P shared with turns and without. The shapes reach the tile's edges: one key and a
// partial tile (the zeros TMA fills past Nk, which the pass writes too), one tile, several, query tails, GQA, both
// layouts (V's strides as the caller's), O in fp16, stochastic rounding; and operands=scaled, where V is the quantizer's
// contiguous copy with block exponents 2^20 apart.
TEST(CudaFa3Fp8, VTransposedInTheKernelGivesThePasssBits) {
  REQUIRE_HOPPER();
  auto kernel = fp8_subject(), pass = fp8_subject();
  ASSERT_TRUE(kernel && pass);
  kernel->set_option("v_transpose", "kernel"), pass->set_option("v_transpose", "pass");
  struct Form {
    const char* p_operand;
    const char* turns;
    int d;
  };
  std::mt19937_64 gen(13);
  int compared = 0;
  for (const Form form : {Form{"registers", "auto", 64}, Form{"registers", "auto", 128}, Form{"shared", "none", 128}, Form{"shared", "ring", 128}}) {
    for (Subject* s : {kernel.get(), pass.get()}) s->set_option("turns", "auto"), s->set_option("p_operand", form.p_operand), s->set_option("turns", form.turns);
    const std::string name = std::string("p_operand=") + form.p_operand + " turns=" + form.turns;
    for (const char* operands : {"e4m3", "scaled"}) {
      kernel->set_option("operands", operands), pass->set_option("operands", operands);
      const bool scaled = std::string(operands) == "scaled";
      for (const char* policy : scaled ? std::vector<const char*>{"bf16,o=fp16"} : std::vector<const char*>{"e4m3", "e4m3,o=fp16", "e4m3,round=sr,seed=5"}) {
        for (int nq : {1, 65, 200}) {
          for (int nk : scaled ? std::vector<int>{129, 640} : std::vector<int>{1, 100, 128, 129, 383, 640}) {
            for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
              gradcheck::Case c = testing::forward_case({2, 4, 2, nq, nk, form.d, form.d}, m, policy);
              c.layout = nk % 2 == 0 ? gradcheck::Layout::bnhd : gradcheck::Layout::bhnd;
              gradcheck::CaseInputs in = gradcheck::make_inputs(c);
              if (scaled) {
                in.q.assign(quantize_blocks(in.q.values(), 2 * 4, nq, form.d, 128, 4, gen));
                in.k.assign(quantize_blocks(in.k.values(), 2 * 2, nk, form.d, 128, 4, gen));
                in.v.assign(quantize_blocks(in.v.values(), 2 * 2, nk, form.d, 128, 20, gen));
              }
              const gradcheck::Outputs want = gradcheck::Caller(*pass, c).fwd(in.q, in.k, in.v);
              testing::expect_output_bits(gradcheck::Caller(*kernel, c).fwd(in.q, in.k, in.v), want, name + " operands=" + operands + " v_transpose=kernel",
                                          "v_transpose=pass", c);
              ++compared;
            }
          }
        }
      }
    }
  }
  std::cout << compared << " cases: V transposed in the kernel gives the pass's bits\n";
}

// The persistent scheduler (scheduler=persistent; auto's under causal masks) computes each work tile as the grid's CTA
// does, so O and L must be the grid's bit for bit. Its CTAs walk several tiles only where there are more than SMs: the
// shapes of 16 heads and 1000 or 1500 rows have 192 or 256 work tiles (a 192-row tile each), so the P tile that staged
// one tile's O by TMA (an e4m3 Q tile holds one of O's two boxes) is rewritten by the next tile's first P, which must
// wait for the store's reads (equal bits do not prove that order: a missing wait would show only if the store's 8 KiB
// read outlasted the first softmax; fa3_forward.cuh's comment argues the order). Both masks' alignments (bottom-right with Nq > Nk leaves the first tiles without keys),
// GQA, key tails, O in fp16, stochastic rounding (O by stores), epilogue=stores, operands=scaled (block exponents).
TEST(CudaFa3Fp8, PersistentSchedulerGivesTheGridsBits) {
  REQUIRE_HOPPER();
  auto grid = fp8_subject(), persistent = fp8_subject();
  ASSERT_TRUE(grid && persistent);
  grid->set_option("scheduler", "grid"), persistent->set_option("scheduler", "persistent");
  std::mt19937_64 gen(17);
  int compared = 0;
  for (const char* epilogue : {"automatic", "stores"}) {
    for (Subject* s : {grid.get(), persistent.get()}) s->set_option("epilogue", epilogue);
    for (const char* operands : {"e4m3", "scaled"}) {
      for (Subject* s : {grid.get(), persistent.get()}) s->set_option("operands", operands);
      const bool scaled = std::string(operands) == "scaled";
      for (const char* policy : scaled ? std::vector<const char*>{"bf16,o=fp16"} : std::vector<const char*>{"e4m3", "e4m3,o=fp16", "e4m3,round=sr,seed=5"}) {
        for (const auto& [heads, nq, nk] : std::vector<std::tuple<int, int, int>>{{4, 1, 129}, {4, 200, 640}, {16, 1000, 1000}, {16, 1500, 129}, {16, 1500, 700}}) {
          for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
            gradcheck::Case c = testing::forward_case({2, heads, heads / 4, nq, nk, 128, 128}, m, policy);
            gradcheck::CaseInputs in = gradcheck::make_inputs(c);
            if (scaled) {
              in.q.assign(quantize_blocks(in.q.values(), 2 * heads, nq, 128, 128, 4, gen));
              in.k.assign(quantize_blocks(in.k.values(), 2 * heads / 4, nk, 128, 128, 4, gen));
              in.v.assign(quantize_blocks(in.v.values(), 2 * heads / 4, nk, 128, 128, 20, gen));
            }
            const gradcheck::Outputs want = gradcheck::Caller(*grid, c).fwd(in.q, in.k, in.v);
            testing::expect_output_bits(gradcheck::Caller(*persistent, c).fwd(in.q, in.k, in.v), want,
                                        std::string("scheduler=persistent epilogue=") + epilogue + " operands=" + operands, "scheduler=grid", c);
            ++compared;
          }
        }
      }
    }
  }
  std::cout << compared << " cases: the persistent scheduler gives the grid's bits\n";
}

// The sanitizers' case for the persistent scheduler (the name matches gpu-check's *SmallShapes* filter). The sweep
// above has fewer work tiles than SMs, so none of its persistent CTAs walks a second tile; here 2 x 16 heads of 1000
// rows are 192 work tiles (192 rows each), more than an H100's or H200's 132 SMs, so CTAs do, and the P tile that
// staged one tile's O for the TMA store is rewritten by the next tile's P (memcheck and racecheck then watch that
// reuse). Few keys keep it quick under the sanitizers; 129 keys with a bottom-right mask leave the first tiles without
// keys. Bits against the grid's as above.
TEST(CudaFa3Fp8, PersistentSchedulerSmallShapesWalkSeveralTiles) {
  REQUIRE_HOPPER();
  auto grid = fp8_subject(), persistent = fp8_subject();
  ASSERT_TRUE(grid && persistent);
  grid->set_option("scheduler", "grid"), persistent->set_option("scheduler", "persistent");
  int compared = 0;
  for (int nk : {129, 300}) {
    for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
      const gradcheck::Case c = testing::forward_case({2, 16, 4, 1000, nk, 128, 128}, m, "e4m3");
      const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
      const gradcheck::Outputs want = gradcheck::Caller(*grid, c).fwd(in.q, in.k, in.v);
      testing::expect_output_bits(gradcheck::Caller(*persistent, c).fwd(in.q, in.k, in.v), want, "scheduler=persistent", "scheduler=grid", c);
      ++compared;
    }
  }
  std::cout << compared << " cases of 192 work tiles: the persistent scheduler gives the grid's bits\n";
}

TEST(CudaFa3Fp8, OByTmaGivesTheGlobalStoresBits) {
  REQUIRE_HOPPER();
  auto tma = fp8_subject(), stores = fp8_subject();
  ASSERT_TRUE(tma && stores);
  stores->set_option("epilogue", "stores");
  std::mt19937_64 gen(11);
  int compared = 0;
  for (const char* operands : {"e4m3", "scaled"}) {
    tma->set_option("operands", operands), stores->set_option("operands", operands);
    const bool scaled = std::string(operands) == "scaled";
    for (const char* policy : scaled ? std::vector<const char*>{"fp32,o=bf16", "bf16,o=fp16"} : std::vector<const char*>{"e4m3", "e4m3,o=fp16"}) {
      for (int nq : {1, 65, 129, 300, 2000}) {
        for (int nk : {129, 640}) {
          for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
            const gradcheck::Case c = testing::forward_case({2, 4, 2, nq, nk, 128, 128}, m, policy);
            gradcheck::CaseInputs in = gradcheck::make_inputs(c);
            if (scaled) {
              in.q.assign(quantize_blocks(in.q.values(), 2 * 4, nq, 128, 128, 4, gen));
              in.k.assign(quantize_blocks(in.k.values(), 2 * 2, nk, 128, 128, 4, gen));
              in.v.assign(quantize_blocks(in.v.values(), 2 * 2, nk, 128, 128, 20, gen));
            }
            const gradcheck::Outputs want = gradcheck::Caller(*stores, c).fwd(in.q, in.k, in.v);
            const gradcheck::Outputs got = gradcheck::Caller(*tma, c).fwd(in.q, in.k, in.v);
            for (const char* t : {"O", "L"}) {
              const testing::Difference d = testing::differing(got.at(t).values(), want.at(t).values());
              EXPECT_EQ(d.count, 0u) << t << " differs from epilogue=stores' in " << d.count << " entries (first at " << d.first << ") for operands=" << operands << " "
                                     << c.to_string();
            }
            ++compared;
          }
        }
      }
    }
  }
  std::cout << compared << " cases: O by TMA gives the global stores' bits\n";
}

TEST(CudaFa3Fp8, BadInputIsRefusedWithAClearError) {
  REQUIRE_HOPPER();
  auto gpu = fp8_subject();
  ASSERT_TRUE(gpu);
  const auto message = [&](const gradcheck::Case& c, const gradcheck::CaseInputs& in) -> std::string {
    gradcheck::Caller call(*gpu, c);
    try {
      call.fwd(in.q, in.k, in.v);
    } catch (const SubjectError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  gradcheck::Case c;
  c.shape = {1, 1, 1, 5, 5, 64, 64};
  c.policy = PrecisionPolicy::uniform(Format::e4m3);
  c.scale = 0.125;
  gradcheck::CaseInputs in = gradcheck::make_inputs(c);
  std::vector<double> poisoned = in.q.values();
  poisoned[3] = std::nan("");
  in.q.assign(poisoned);
  EXPECT_NE(message(c, in).find("non-finite"), std::string::npos) << message(c, in);
  gradcheck::Case odd = c;
  odd.shape.head_dim = odd.shape.head_dim_v = 96;
  EXPECT_NE(message(odd, gradcheck::make_inputs(odd)).find("head"), std::string::npos) << message(odd, gradcheck::make_inputs(odd));
  gradcheck::Case wide_o = c;
  wide_o.policy = PrecisionPolicy::parse("e4m3,o=fp32");
  EXPECT_NE(message(wide_o, gradcheck::make_inputs(wide_o)).find("bf16 or fp16"), std::string::npos);
  // operands=scaled: 0.3 in bf16 is not an e4m3 value times the block's scale (its block's largest is 1, scale 2^-8)
  gpu->set_option("operands", "scaled");
  gradcheck::Case scaled = c;
  scaled.policy = PrecisionPolicy::uniform(Format::bf16);
  gradcheck::CaseInputs sin = gradcheck::make_inputs(scaled);
  std::vector<double> k(sin.k.values().size(), 0.5);
  k[0] = 1, k[7] = 0.3;
  sin.k.assign(k);
  std::vector<double> q(sin.q.values().size(), 0.25);
  sin.q.assign(q), sin.v.assign(q);
  const std::string m = message(scaled, sin);
  EXPECT_NE(m.find("operands=scaled, but K"), std::string::npos) << m;
  gpu->set_option("operands", "e4m3");
  EXPECT_THROW(gpu->set_option("block_q", "64"), SubjectError);
  EXPECT_THROW(gpu->set_option("block_k", "192"), SubjectError);
  EXPECT_THROW(gpu->set_option("block_k", "160"), SubjectError);
  EXPECT_THROW(gpu->set_option("block_k", "512"), SubjectError);
  gpu->set_option("block_k", "256");  // (each tile at its own head dim: refused elsewhere with the reason)
  EXPECT_NE(message(c, gradcheck::make_inputs(c)).find("block_k=256 at head dim 128 only"), std::string::npos) << message(c, gradcheck::make_inputs(c));
  EXPECT_THROW(gpu->set_option("v_transpose", "kernel"), SubjectError);
  EXPECT_THROW(gpu->set_option("turns", "none"), SubjectError) << "block_k=256 (its groups take turns at their exponentials)";
  gpu->set_option("tau", "8"), gpu->set_option("turns", "none");  // (under the selective rule the 256-key kernel runs without turns too)
  EXPECT_THROW(gpu->set_option("tau", "0"), SubjectError) << "turns=none with block_k=256 needs tau > 0";
  EXPECT_THROW(gpu->set_option("tau", "9"), SubjectError) << "P up to 2^9, past e4m3's 448";
  EXPECT_THROW(gpu->set_option("tau", "x"), SubjectError);
  gpu->set_option("turns", "auto");
  EXPECT_THROW(gpu->set_option("block_k", "128"), SubjectError) << "tau > 0 with block_k=128";
  EXPECT_THROW(gpu->set_option("p_operand", "registers"), SubjectError) << "tau > 0 with P in registers";
  gpu->set_option("tau", "0");
  gpu->set_option("p_operand", "shared"), gpu->set_option("scheduler", "persistent");  // (the 256-key kernel with P in shared memory)
  EXPECT_THROW(gpu->set_option("p_operand", "registers"), SubjectError) << "scheduler=persistent with block_k=256";
  gpu->set_option("scheduler", "auto"), gpu->set_option("p_operand", "auto");
  gpu->set_option("block_k", "224");
  EXPECT_NE(message(c, gradcheck::make_inputs(c)).find("block_k=224 at head dim 128 only"), std::string::npos) << message(c, gradcheck::make_inputs(c));
  // P from shared memory: key tiles of 128 (d = 128 and 256) or 256 (d = 128), not 224 (its kernel holds P in registers),
  // refused with block_k=224 in either order
  EXPECT_THROW(gpu->set_option("p_operand", "smem"), SubjectError);
  EXPECT_THROW(gpu->set_option("p_operand", "shared"), SubjectError);  // (block_k=224 is set)
  gpu->set_option("block_k", "128");
  gpu->set_option("p_operand", "shared");
  EXPECT_THROW(gpu->set_option("block_k", "224"), SubjectError);
  EXPECT_NE(message(c, gradcheck::make_inputs(c)).find("p_operand=shared with block_k=128 at head dim 128 or 256, or block_k=256 at head dim 128 only"), std::string::npos)
      << message(c, gradcheck::make_inputs(c));
  gradcheck::Case d128 = c;
  d128.shape.head_dim = d128.shape.head_dim_v = 128;
  EXPECT_EQ(message(d128, gradcheck::make_inputs(d128)), "(accepted)");
  // Without turns: P in shared memory only (each group's own barrier hands P to P V); with P in registers no head dim
  // runs it, so the pair is refused whichever comes second (EveryAcceptedOptionSetDeclaresAHeadDim)
  EXPECT_THROW(gpu->set_option("turns", "pingpong"), SubjectError);
  gpu->set_option("p_operand", "registers");
  EXPECT_THROW(gpu->set_option("turns", "none"), SubjectError);
  gpu->set_option("p_operand", "auto"), gpu->set_option("turns", "none");
  EXPECT_THROW(gpu->set_option("p_operand", "registers"), SubjectError);
  EXPECT_NE(message(c, gradcheck::make_inputs(c)).find("turns=none with P in shared memory and block_k=128 (p_operand=shared"), std::string::npos) << message(c, gradcheck::make_inputs(c));
  EXPECT_EQ(message(d128, gradcheck::make_inputs(d128)), "(accepted)");
  // V transposed in the kernel: 128-key tiles only, refused with block_k=224 in either order
  gpu->set_option("turns", "auto");
  EXPECT_THROW(gpu->set_option("v_transpose", "inline"), SubjectError);
  gpu->set_option("v_transpose", "kernel");
  EXPECT_THROW(gpu->set_option("block_k", "224"), SubjectError);
  gpu->set_option("v_transpose", "auto"), gpu->set_option("block_k", "224");
  EXPECT_THROW(gpu->set_option("v_transpose", "kernel"), SubjectError);
  EXPECT_EQ(message(d128, gradcheck::make_inputs(d128)), "(accepted)") << "auto with block_k=224 (the pass)";
  // The persistent scheduler: the kernel with P in shared memory, no turns and the pass only (d = 128, block_k=128)
  EXPECT_THROW(gpu->set_option("scheduler", "lpt"), SubjectError);
  EXPECT_THROW(gpu->set_option("scheduler", "persistent"), SubjectError) << "with block_k=224";
  gpu->set_option("block_k", "128"), gpu->set_option("scheduler", "persistent");
  EXPECT_THROW(gpu->set_option("turns", "ring"), SubjectError);
  EXPECT_THROW(gpu->set_option("block_k", "224"), SubjectError);
  EXPECT_EQ(message(d128, gradcheck::make_inputs(d128)), "(accepted)") << "scheduler=persistent at d = 128";
  EXPECT_NE(message(c, gradcheck::make_inputs(c)).find("got head dim 64"), std::string::npos) << message(c, gradcheck::make_inputs(c));
  gpu->set_option("scheduler", "auto");
  EXPECT_EQ(message(c, gradcheck::make_inputs(c)), "(accepted)") << "auto at d = 64 (the grid)";
  // d = 256: 128-key tiles, V^T from the pass, and turns=none with p_operand=shared only (auto keeps P in registers there)
  gradcheck::Case d256 = c;
  d256.shape.head_dim = d256.shape.head_dim_v = 256;
  EXPECT_EQ(message(d256, gradcheck::make_inputs(d256)), "(accepted)");
  gpu->set_option("block_k", "224");
  EXPECT_NE(message(d256, gradcheck::make_inputs(d256)).find("block_k=224 at head dim 128 only"), std::string::npos) << message(d256, gradcheck::make_inputs(d256));
  gpu->set_option("block_k", "128"), gpu->set_option("v_transpose", "kernel");
  EXPECT_NE(message(d256, gradcheck::make_inputs(d256)).find("v_transpose=kernel at head dim 64 or 128 only"), std::string::npos)
      << message(d256, gradcheck::make_inputs(d256));
  gpu->set_option("v_transpose", "auto"), gpu->set_option("turns", "none");
  EXPECT_NE(message(d256, gradcheck::make_inputs(d256)).find("turns=none with P in shared memory and block_k=128 (p_operand=shared"), std::string::npos)
      << message(d256, gradcheck::make_inputs(d256));
  gpu->set_option("p_operand", "shared");
  EXPECT_EQ(message(d256, gradcheck::make_inputs(d256)), "(accepted)") << "p_operand=shared, turns=none at d = 256";
  gpu->set_option("turns", "auto"), gpu->set_option("p_operand", "auto");
  gradcheck::Case d192 = c;
  d192.shape.head_dim = d192.shape.head_dim_v = 192;
  EXPECT_NE(message(d192, gradcheck::make_inputs(d192)).find("head dim 64, 128 or 256 (got 192)"), std::string::npos) << message(d192, gradcheck::make_inputs(d192));
}

}  // namespace
}  // namespace fc::kernels::cuda
