// No flash backend allocates O(Nq Nk) memory: a counting allocator records the peak bytes a call
// allocates (beyond what was live before it), at N = 256 .. 2048 with d = 64. Doubling N must at most
// double the peak (x2.3 allowed: constant tile buffers make the early doublings slightly less than
// 2, never more); cpu.naive, which materialises [Nq, Nk] by design, is the control whose peak nearly
// quadruples -- proof that the counter sees quadratic growth. The flash backends' peaks are copies of
// the inputs and outputs, K^T and V^T (O(N d)), and per-task tiles.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "kernels/builtin_subjects.hpp"
#include "kernels/memory_counter.hpp"

namespace fc::kernels {
namespace {

// Peak bytes allocated during one call of `op` at sequence length n (d = dv = 64, fp32 policy).
long long peak_bytes(Subject& s, Op op, int n) {
  const std::int64_t d = 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  const auto tensor = [&](std::int64_t rows, std::int64_t cols) {
    std::vector<float> x(static_cast<std::size_t>(rows * cols));
    for (float& e : x) e = normal(rng);
    return x;
  };
  auto q = tensor(n, d), k = tensor(n, d), v = tensor(n, d), dout = tensor(n, d), ddq = tensor(n, d), ddk = tensor(n, d), ddv = tensor(n, d);
  std::vector<float> o(q.size()), lse(static_cast<std::size_t>(n)), g1(q.size()), g2(q.size()), g3(q.size()), g4(q.size());
  AttentionCall c;
  c.shape = {1, 1, 1, n, n, static_cast<int>(d), static_cast<int>(d)};
  c.scale = 0.125;
  c.policy = PrecisionPolicy::uniform(Format::fp32);
  const auto view = [&](std::vector<float>& x, std::int64_t cols) { return contiguous_view(x.data(), Format::fp32, {1, 1, n, cols}); };
  c.q = view(q, d), c.k = view(k, d), c.v = view(v, d);
  c.out_o = view(o, d), c.out_lse = view(lse, 1);
  s.run(Op::fwd, c);  // the saved O and L for bwd and bwdbwd
  c.o = view(o, d), c.lse = view(lse, 1), c.dout = view(dout, d), c.ddq = view(ddq, d), c.ddk = view(ddk, d), c.ddv = view(ddv, d);
  c.out_o = {}, c.out_lse = {};
  if (op == Op::bwd) c.dq = view(g1, d), c.dk = view(g2, d), c.dv = view(g3, d);
  if (op == Op::bwdbwd) c.dq2 = view(g1, d), c.dk2 = view(g2, d), c.dv2 = view(g3, d), c.ddo = view(g4, d);
  if (op == Op::fwd) c.out_o = view(o, d), c.out_lse = view(lse, 1);
  memory::reset_peak();
  const long long before = memory::live_bytes();
  s.run(op, c);
  return memory::peak_bytes() - before;
}

TEST(Memory, FlashBackendsGrowLinearlyAndNaiveQuadratically) {
  for (auto& subject : make_builtin_subjects()) {
    // measured in fp32 (cpu.fa4.emulated, 16-bit only, runs cpu.fa4's code, measured here)
    if (!subject->info().supports(Format::fp32) || subject->info().family != Family::attention) continue;
    for (Op op : subject->info().ops) {
      std::vector<long long> peaks;
      for (int n : {256, 512, 1024, 2048}) peaks.push_back(peak_bytes(*subject, op, n));
      const double growth = static_cast<double>(peaks[3]) / static_cast<double>(peaks[2]);
      std::printf("%-18s %-6s peak bytes at N = 256, 512, 1024, 2048: %lld %lld %lld %lld (x%.2f per doubling at the end)\n",
                  subject->info().name.c_str(), std::string(name(op)).c_str(), peaks[0], peaks[1], peaks[2], peaks[3], growth);
      if (subject->info().name == "cpu.naive") {
        EXPECT_GT(growth, 3.5) << "the control must show quadratic growth";
      } else {
        EXPECT_LT(growth, 2.3) << subject->info().name << " " << name(op) << " grows faster than linearly";
      }
    }
  }
}

}  // namespace
}  // namespace fc::kernels
