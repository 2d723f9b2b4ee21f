// Oracle speed: forward + backward + double backward, the workload of one full Hessian-vector
// product check, at the sizes issue 3 sets goals for (a benchmark: it prints numbers and judges
// nothing). Each figure is the median of `repeats` runs, all threads of this machine.
//
// Usage: oracle-bench [repeats=3]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "oracle/attention.hpp"
#include "oracle/parallel.hpp"

namespace {

using namespace fc::oracle;

double median_seconds(int repeats, const std::function<void()>& run) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class T>
void bench(const char* type, int heads, int n, int d, int repeats, double goal_seconds) {
  AttentionProblem p;
  p.shape = {1, heads, heads, n, n, d, d};
  p.scale = default_scale(d);
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 1.0);
  const auto draw = [&](std::size_t size) {
    std::vector<T> x(size);
    for (T& e : x) e = T(normal(rng));
    return x;
  };
  const auto q = draw(p.shape.q_size()), k = draw(p.shape.k_size()), v = draw(p.shape.v_size()), dout = draw(p.shape.o_size());
  const auto ddq = draw(p.shape.q_size()), ddk = draw(p.shape.k_size()), ddv = draw(p.shape.v_size());
  double t_fwd = 0, t_bwd = 0, t_dbwd = 0;
  const double total = median_seconds(repeats, [&] {
    auto s = std::chrono::steady_clock::now();
    const auto f = attention_forward<T>(p, {q, k, v});
    auto e = std::chrono::steady_clock::now();
    t_fwd = std::chrono::duration<double>(e - s).count();
    const auto g = attention_backward<T>(p, {q, k, v}, dout);
    s = std::chrono::steady_clock::now();
    t_bwd = std::chrono::duration<double>(s - e).count();
    const auto h = attention_double_backward<T>(p, {q, k, v}, dout, {ddq, ddk, ddv});
    t_dbwd = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
    if (!std::isfinite(static_cast<double>(f.o[0] + g.dq[0] + h.dq2[0]))) std::puts("non-finite result");
  });
  std::printf("%-5s B*H=%-2d N=%-5d d=%-3d  fwd %7.3f s  bwd %7.3f s  bwdbwd %7.3f s  total %7.3f s  (goal <= %g s: %s)\n",
              type, heads, n, d, t_fwd, t_bwd, t_dbwd, total, goal_seconds, total <= goal_seconds ? "met" : "NOT met");
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 3;
  if (repeats < 1) {
    std::fprintf(stderr, "usage: oracle-bench [repeats >= 1]\n");
    return 2;
  }
  std::printf("oracle-bench: median of %d runs (total; the per-op split is from the last run), %u threads\n", repeats,
              oracle_threads());
  bench<double>("fp64", 8, 1024, 64, repeats, 5.0);
  bench<quad>("quad", 2, 256, 64, repeats, 30.0);
  return 0;
}
