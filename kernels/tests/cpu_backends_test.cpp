// The CPU flash backends against cpu.naive, without the harness: in fp64 every backend is plain
// attention up to summation order, so they must agree to a few units of fp64 at the scale of the
// summed terms; options change tiling, not results; FA4's counters and exp2 emulation; bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_call.hpp"
#include "kernels/builtin_subjects.hpp"
#include "kernels/cpu/flash_attention.hpp"

namespace fc::kernels {
namespace {

// Owned fp64 tensors of one problem and a call viewing them.
struct Problem {
  AttentionShape shape;
  Mask mask = Mask::none;
  std::vector<double> q, k, v, dout, ddq, ddk, ddv;
  std::vector<double> o, lse, dq, dk, dv, dq2, dk2, dv2, ddo;

  Problem(AttentionShape s, Mask m, unsigned seed) : shape(s), mask(m) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<double> normal;
    const auto fill = [&](std::vector<double>& x, std::size_t n) {
      x.resize(n);
      for (double& e : x) e = normal(gen);
    };
    const std::size_t nq = static_cast<std::size_t>(s.batch) * s.heads_q * s.seq_q, nk = static_cast<std::size_t>(s.batch) * s.heads_kv * s.seq_k;
    fill(q, nq * s.head_dim), fill(k, nk * s.head_dim), fill(v, nk * s.head_dim_v), fill(dout, nq * s.head_dim_v);
    fill(ddq, nq * s.head_dim), fill(ddk, nk * s.head_dim), fill(ddv, nk * s.head_dim_v);
  }

  TensorView view(std::vector<double>& x, int heads, int n, int cols) {
    return contiguous_view(x.data(), Format::fp64, {shape.batch, heads, n, cols});
  }

  // Runs fwd, then `op` from the subject's own O and L (fp64 storage, `accumulate` inside).
  void run(Subject& s, Op op, Format accumulate = Format::fp64) {
    const AttentionShape& h = shape;
    o.assign(q.size() / h.head_dim * h.head_dim_v, 0), lse.assign(q.size() / h.head_dim, 0);
    AttentionCall c;
    c.shape = h, c.mask = mask, c.scale = 1 / std::sqrt(static_cast<double>(h.head_dim));
    c.policy = PrecisionPolicy::uniform(Format::fp64);
    c.policy.accumulate = accumulate;
    c.q = view(q, h.heads_q, h.seq_q, h.head_dim), c.k = view(k, h.heads_kv, h.seq_k, h.head_dim);
    c.v = view(v, h.heads_kv, h.seq_k, h.head_dim_v);
    c.out_o = view(o, h.heads_q, h.seq_q, h.head_dim_v), c.out_lse = view(lse, h.heads_q, h.seq_q, 1);
    s.run(Op::fwd, c);
    if (op == Op::fwd) return;
    c.out_o = {}, c.out_lse = {};
    c.o = view(o, h.heads_q, h.seq_q, h.head_dim_v), c.lse = view(lse, h.heads_q, h.seq_q, 1);
    c.dout = view(dout, h.heads_q, h.seq_q, h.head_dim_v);
    if (op == Op::bwd) {
      dq.assign(q.size(), 0), dk.assign(k.size(), 0), dv.assign(v.size(), 0);
      c.dq = view(dq, h.heads_q, h.seq_q, h.head_dim), c.dk = view(dk, h.heads_kv, h.seq_k, h.head_dim);
      c.dv = view(dv, h.heads_kv, h.seq_k, h.head_dim_v);
      s.run(Op::bwd, c);
      return;
    }
    c.ddq = view(ddq, h.heads_q, h.seq_q, h.head_dim), c.ddk = view(ddk, h.heads_kv, h.seq_k, h.head_dim);
    c.ddv = view(ddv, h.heads_kv, h.seq_k, h.head_dim_v);
    dq2.assign(q.size(), 0), dk2.assign(k.size(), 0), dv2.assign(v.size(), 0), ddo.assign(o.size(), 0);
    c.dq2 = view(dq2, h.heads_q, h.seq_q, h.head_dim), c.dk2 = view(dk2, h.heads_kv, h.seq_k, h.head_dim);
    c.dv2 = view(dv2, h.heads_kv, h.seq_k, h.head_dim_v), c.ddo = view(ddo, h.heads_q, h.seq_q, h.head_dim_v);
    s.run(Op::bwdbwd, c);
  }

  std::vector<const std::vector<double>*> outputs(Op op) const {
    if (op == Op::fwd) return {&o, &lse};
    if (op == Op::bwd) return {&dq, &dk, &dv};
    return {&dq2, &dk2, &dv2, &ddo};
  }
};

// max |a - b| / (1 + max |b|): with N(0, 1) inputs and 1/sqrt(d) scaling every summed term is O(1)
// and there are at most a few hundred per entry, so two fp64 summation orders differ by well under
// 1e-12 (= 4500 u of fp64, n u with n the longest chain, about 300 here, and a margin of 15 for the
// products feeding each sum). A wrong tile boundary or mask costs O(1).
double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && a[i] == b[i]) continue;  // L = -inf for a fully masked row
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}
constexpr double kAgree = 1e-12;

struct Shapes {
  AttentionShape shape;
  Mask mask;
};

std::vector<Shapes> shapes() {
  return {
      {{1, 1, 1, 1, 1, 8, 8}, Mask::none},                      // a single key
      {{2, 4, 2, 130, 70, 16, 12}, Mask::causal_bottom_right},  // GQA, Nk < Nq, rows fully masked
      {{1, 3, 1, 65, 200, 32, 32}, Mask::causal_top_left},      // tails in both tile directions
      {{1, 2, 2, 129, 129, 64, 64}, Mask::none},
  };
}

TEST(CpuBackends, EveryFlashBackendIsPlainAttentionInFp64) {
  auto subjects = make_builtin_subjects();
  Subject* naive = nullptr;
  for (auto& s : subjects) {
    if (s->info().name == "cpu.naive") naive = s.get();
  }
  ASSERT_NE(naive, nullptr);
  int compared = 0;
  for (auto& s : subjects) {
    if (s.get() == naive || s->info().family != Family::attention || !s->info().supports(Format::fp64) ||
        !s->info().name.starts_with("cpu.")) {
      continue;
    }
    for (Op op : s->info().ops) {
      for (const Shapes& sh : shapes()) {
        Problem mine(sh.shape, sh.mask, 11), ref(sh.shape, sh.mask, 11);
        mine.run(*s, op);
        ref.run(*naive, op);
        const auto a = mine.outputs(op), b = ref.outputs(op);
        for (std::size_t i = 0; i < a.size(); ++i) {
          EXPECT_LE(relative_difference(*a[i], *b[i]), kAgree)
              << s->info().name << " " << name(op) << " output " << i << " Nq=" << sh.shape.seq_q << " Nk=" << sh.shape.seq_k;
        }
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 5 * 4 * 2) << "cpu.fa1, fa2, fa4, hog, hog.2pass, each op, each shape";
}

// Tile sizes and FA4's threshold move only rounding: any tiling gives plain attention in fp64.
TEST(CpuBackends, TileSizesAndThresholdsChangeTheScheduleNotTheResult) {
  auto fa2 = cpu::make_cpu_fa2();
  const Shapes sh{{1, 2, 1, 77, 93, 16, 16}, Mask::causal_bottom_right};
  Problem base(sh.shape, sh.mask, 5);
  base.run(*fa2, Op::bwd);
  for (const auto& [option, value] : std::vector<std::pair<std::string, std::string>>{
           {"block_q", "1"}, {"block_q", "7"}, {"block_k", "3"}, {"block_k", "256"}, {"block_k_large_d", "5"}, {"tau", "8"}, {"tau", "30"}}) {
    auto s = cpu::make_cpu_fa2();
    s->set_option(option, value);
    bool shown = false;
    for (const SubjectOption& o : s->info().options) shown = shown || (o.name == option && std::stod(o.value) == std::stod(value));
    EXPECT_TRUE(shown) << option << " is not reported as " << value;
    Problem p(sh.shape, sh.mask, 5);
    p.run(*s, Op::bwd);
    for (const Op op : {Op::bwd}) {
      const auto a = p.outputs(op), b = base.outputs(op);
      for (std::size_t i = 0; i < a.size(); ++i) EXPECT_LE(relative_difference(*a[i], *b[i]), kAgree) << option << "=" << value;
    }
  }
}

// cpu.fa4 tiles its keys as cuda.fa4 does: 128 at d <= 128, 64 above (block_k_large_d), where the tiles decide which
// running max each P is rounded against. So at d = 160 its default gives block_k=64's bits, and at d = 128 (the boundary,
// which keeps 128) block_k=128's.
TEST(CpuBackends, Fa4TilesKeysBy64AboveHeadDim128) {
  for (const int d : {128, 160}) {
    const Shapes sh{{1, 2, 1, 70, 200, d, d}, Mask::none};
    auto by_default = cpu::make_cpu_fa4(), fixed = cpu::make_cpu_fa4();
    fixed->set_option("block_k_large_d", "0");
    fixed->set_option("block_k", d > 128 ? "64" : "128");
    Problem a(sh.shape, sh.mask, 9), b(sh.shape, sh.mask, 9);
    a.run(*by_default, Op::fwd);
    b.run(*fixed, Op::fwd);
    const auto x = a.outputs(Op::fwd), y = b.outputs(Op::fwd);
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(relative_difference(*x[i], *y[i]), 0.0) << "d " << d << ", output " << i;
    if (d > 128) {  // (and the tile matters: 128-key tiles give other bits there, so the test can tell the two apart)
      auto by_128 = cpu::make_cpu_fa4();
      by_128->set_option("block_k_large_d", "0");
      Problem c(sh.shape, sh.mask, 9);
      c.run(*by_128, Op::fwd);
      EXPECT_GT(relative_difference(*c.outputs(Op::fwd)[0], *x[0]), 0.0) << "d " << d << ": 64- and 128-key tiles gave the same O";
    }
  }
}

TEST(CpuBackends, BadOptionsAreRefusedByName) {
  auto s = cpu::make_cpu_fa4();
  for (const auto& [option, value] : std::vector<std::pair<std::string, std::string>>{
           {"block_q", "0"}, {"block_k", "x"}, {"block_k_large_d", "-1"}, {"tau", "-1"}, {"tau", "nan"}, {"exp2_fraction", "2"}, {"warp_size", "32"}}) {
    try {
      s->set_option(option, value);
      ADD_FAILURE() << option << "=" << value << " accepted";
    } catch (const SubjectError& e) {
      EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
    }
  }
}

// Without a rescale P reaches 2^tau and is stored in V's format: fp16 (max 65504) holds 2^15 but
// not 2^16, so tau = 16 with fp16 storage is refused before any work, tau = 15 is not.
TEST(CpuBackends, Fa4RefusesAThresholdItsPFormatCannotHold) {
  auto s = cpu::make_cpu_fa4();
  AttentionCall c;
  c.policy = PrecisionPolicy::uniform(Format::fp16);
  s->set_option("tau", "16");
  try {
    s->run(Op::fwd, c);
    ADD_FAILURE() << "tau=16 with fp16 storage accepted";
  } catch (const SubjectError& e) {
    EXPECT_NE(std::string(e.what()).find("tau=16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tau <= 15"), std::string::npos) << e.what();
  }
  s->set_option("tau", "15");
  try {
    s->run(Op::fwd, c);  // the empty call is refused, but for its tensors, not for tau
    ADD_FAILURE() << "an empty call accepted";
  } catch (const SubjectError& e) {
    EXPECT_EQ(std::string(e.what()).find("tau"), std::string::npos) << e.what();
  }
}

// FA4 rescales only when a tile's max exceeds the running max by tau: with tau = 0 (FA2) every
// growth rescales, so the count can only drop as tau rises, and tau = 30 (2^30 headroom) leaves
// only the first tile of each row.
TEST(CpuBackends, Fa4RescalesLessAsTheThresholdRises) {
  const Shapes sh{{1, 1, 1, 64, 1024, 32, 32}, Mask::none};
  double previous = std::numeric_limits<double>::infinity();
  for (const char* tau : {"0", "2", "8", "30"}) {
    auto s = cpu::make_cpu_fa4();
    s->set_option("tau", tau);
    s->set_option("block_k", "64");
    Problem p(sh.shape, sh.mask, 3);
    p.run(*s, Op::fwd);
    double rescales = -1;
    for (const Counter& c : s->counters()) {
      if (c.name == "rescales") rescales = c.value;
    }
    ASSERT_GE(rescales, 0) << "no rescales counter";
    EXPECT_LE(rescales, previous) << "tau = " << tau;
    previous = rescales;
  }
  EXPECT_EQ(previous, 0) << "with 2^30 headroom no rescale beyond each row's first tile";
}

// The emulated exponentials are the columns j of a key tile with (j / 8) % 8 < round(8 f): the n8 blocks that
// cuda.fa4 emulates warp-uniformly in each tile (kernels/cuda/fa3_forward.cuh, SoftmaxRule). With tiles of 128 keys
// and 1024 keys that is exactly the fraction f of the exponentials, for each fraction the GPU compiles. With tiles
// of 96 keys (12 blocks) the rule restarts in each tile: at f = 0.5 blocks 0-3 and 8-11 of each of the ten full
// tiles and blocks 0-3 of the last tile of 64 keys, 672 of the 1024 columns (a rule on the key's global index
// would give 512).
TEST(CpuBackends, Fa4EmulatesTheFractionOfColumnsTheGpuEmulates) {
  const Shapes sh{{1, 1, 1, 16, 1024, 32, 32}, Mask::none};
  const auto emulated_and_total = [&](const char* fraction, const char* block_k) {
    auto s = cpu::make_cpu_fa4();  // (cpu.fa4.emulated's code with its fraction)
    s->set_option("exp2_fraction", fraction);
    s->set_option("block_k", block_k);
    Problem p(sh.shape, sh.mask, 5);
    p.run(*s, Op::fwd, Format::fp32);  // (an emulated exp2 accumulates in fp32 only)
    double emulated = -1, total = -1;
    for (const Counter& c : s->counters()) {
      if (c.name == "exp2_emulated") emulated = c.value;
      if (c.name == "exp2_total") total = c.value;
    }
    return std::pair{emulated, total};
  };
  for (const char* fraction : {"0.125", "0.5"}) {
    const auto [emulated, total] = emulated_and_total(fraction, "128");
    ASSERT_EQ(total, 16.0 * 1024) << "one exponential per (row, key)";
    EXPECT_EQ(emulated, std::stod(fraction) * total) << "exp2_fraction " << fraction;
  }
  const auto [emulated, total] = emulated_and_total("0.5", "96");
  ASSERT_EQ(total, 16.0 * 1024);
  EXPECT_EQ(emulated, 16.0 * 672) << "the rule counts blocks within each 96-key tile";
}

TEST(CpuBackends, AnEmulatedExp2RefusesAnFp64Accumulation) {
  auto s = cpu::make_cpu_fa4();
  Problem p({1, 1, 1, 4, 64, 8, 8}, Mask::none, 5);
  p.run(*s, Op::fwd);  // (fp64 without emulation)
  s->set_option("exp2_fraction", "0.5");
  try {
    p.run(*s, Op::fwd);
    ADD_FAILURE() << "cpu.fa4 with exp2_fraction 0.5 accepted an fp64 accumulation";
  } catch (const SubjectError& e) {
    EXPECT_NE(std::string(e.what()).find("fp64"), std::string::npos) << e.what();
  }
}

TEST(CpuBackends, NonFiniteInputsAreRefusedWithTheTensorsName) {
  for (auto& s : make_builtin_subjects()) {
    if (s->info().family != Family::attention || !s->info().supports(Format::fp64)) continue;  // AttnRes: attnres_test.cpp
    Problem p({1, 1, 1, 4, 4, 8, 8}, Mask::none, 1);
    p.k[5] = std::numeric_limits<double>::quiet_NaN();
    try {
      p.run(*s, Op::fwd);
      ADD_FAILURE() << s->info().name << " accepted a NaN in K";
    } catch (const SubjectError& e) {
      EXPECT_NE(std::string(e.what()).find("K"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fc::kernels
