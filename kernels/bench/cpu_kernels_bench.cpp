// CPU backend speed: GFLOP/s at N = 2048, d = 64 in the fp32 policy (issue 5: goal >= 5 GFLOP/s per
// core for cpu.fa2). A benchmark, not a test: medians of `repeats` runs after a warm-up, all threads.
// FLOP counts (EQUATIONS.md): forward 4 N^2 d per head, backward 10 N^2 d (non-causal); the double
// backward counts the [N, N, d] products its passes perform, stated per subject.
//
// Usage: cpu-kernels-bench [N=2048] [heads=2] [repeats=3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/builtin_subjects.hpp"
#include "kernels/cpu/thread_pool.hpp"

using namespace fc;
using namespace fc::kernels;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2048, heads = argc > 2 ? std::atoi(argv[2]) : 2, repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  if (n < 1 || heads < 1 || repeats < 1) {
    std::fprintf(stderr, "usage: cpu-kernels-bench [N >= 1] [heads >= 1] [repeats >= 1]\n");
    return 2;
  }
  const int d = 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  const std::size_t elems = static_cast<std::size_t>(heads) * n * d;
  const auto tensor = [&](std::size_t size) {
    std::vector<float> x(size);
    for (float& e : x) e = normal(rng);
    return x;
  };
  auto q = tensor(elems), k = tensor(elems), v = tensor(elems), dout = tensor(elems), ddq = tensor(elems), ddk = tensor(elems), ddv = tensor(elems);
  std::vector<float> o(elems), lse(static_cast<std::size_t>(heads) * n), g1(elems), g2(elems), g3(elems), g4(elems);
  const auto view = [&](std::vector<float>& x, std::int64_t cols) { return contiguous_view(x.data(), Format::fp32, {1, heads, n, cols}); };
  const unsigned threads = cpu::pool_threads();
  std::printf("cpu-kernels-bench: B=1 H=%d N=%d d=%d, fp32 policy, non-causal, %u threads, median of %d\n", heads, n, d, threads, repeats);
  std::printf("%-16s %-7s %10s %12s %10s %14s  %s\n", "subject", "op", "ms", "GFLOP", "GFLOP/s", "GFLOP/s/core", "FLOP count");
  const double nn_d = static_cast<double>(n) * n * d * heads;
  for (auto& s : make_builtin_subjects()) {
    if (s->info().name == "cpu.naive" || !s->info().supports(Format::fp32)) continue;
    for (Op op : s->info().ops) {
      if ((s->info().name == "cpu.hog" || s->info().name == "cpu.hog.2pass") && op != Op::bwdbwd) continue;  // = cpu.fa2's
      AttentionCall c;
      c.shape = {1, heads, heads, n, n, d, d};
      c.scale = 0.125;
      c.policy = PrecisionPolicy::uniform(Format::fp32);
      c.q = view(q, d), c.k = view(k, d), c.v = view(v, d), c.out_o = view(o, d), c.out_lse = view(lse, 1);
      s->run(Op::fwd, c);
      c.o = view(o, d), c.lse = view(lse, 1), c.dout = view(dout, d), c.ddq = view(ddq, d), c.ddk = view(ddk, d), c.ddv = view(ddv, d);
      if (op != Op::fwd) c.out_o = {}, c.out_lse = {};
      if (op == Op::bwd) c.dq = view(g1, d), c.dk = view(g2, d), c.dv = view(g3, d);
      if (op == Op::bwdbwd) c.dq2 = view(g1, d), c.dk2 = view(g2, d), c.dv2 = view(g3, d), c.ddo = view(g4, d);
      double flops = 0;
      std::string count;
      if (op == Op::fwd) flops = 4 * nn_d, count = "4 N^2 d";
      if (op == Op::bwd) flops = 10 * nn_d, count = "10 N^2 d";
      if (op == Op::bwdbwd) {
        const int products = s->info().name == "cpu.hog" ? 25 : 22;  // see hog.cpp: 3 + 5 + 9 + 8, or 5 + 9 + 8
        flops = 2.0 * products * nn_d;
        count = std::to_string(products) + " products x 2 N^2 d (as performed)";
      }
      s->run(op, c);  // warm-up
      std::vector<double> ms;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        s->run(op, c);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2], gf = flops / (med * 1e6);
      std::printf("%-16s %-7s %10.1f %12.2f %10.2f %14.2f  %s\n", s->info().name.c_str(), std::string(name(op)).c_str(), med, flops / 1e9, gf,
                  gf / threads, count.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
