// fa3-timeline: where a step of cuda.fa3's overlapped forward spends its time (kernels/cuda/NOTES.md, "Where a
// step's time goes"). Launches fa3_forward_ws_kernel directly (bf16, non-causal or causal, B = 16384 / N,
// H = 2048 / d, N(0, 1) inputs): first without stamps (the kernel every launcher runs) for its median time, then
// once with ClockTimeline, whose stamps give each consumer group's phases per step in SM clocks:
//   turn wait   the named barrier of the ping-pong turn;
//   issue       the K and V mbarrier waits and the wgmma instructions of S_{j+1} and P_j V_j (which wait for the
//               tensor pipe to take them);
//   S wait      until S_{j+1} is complete;
//   softmax     the online softmax of S_{j+1};
//   PV wait     until P_j V_j is complete;
//   pack        O's rescale and P_{j+1} into A fragments (with --groups 3 at d = 128: into the group's P tile in shared
//               memory, ws_overlap_pingpong_3groups_p_shared);
//   period      from one step's issue to the next.
// Medians over the steady state (loop steps 2 .. n - 3 of a CTA's n = key tiles - 1) of the 8 CTAs with the last
// query tiles of one head (under a causal mask, the longest). The stamps cost a few percent; the tensor pipe's
// share is the groups' products at the dense rate (4096 bf16 FLOP per clock per SM) over the period.
//
// Usage: fa3-timeline [--d 64|128] [--n N] [--key-tile 128|176] [--groups 2|3] [--causal] [--repeats R]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/fa3_forward.cuh"
#include "kernels/cuda/kernel_launch.cuh"

namespace {

using namespace fc::kernels::cuda;
using namespace fc::kernels::cuda::fa3;
using T = __nv_bfloat16;

struct Config {
  int d = 128, n = 8192, key_tile = 128, groups = 2, repeats = 30;
  bool causal = false;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "fa3-timeline: %s\nusage: fa3-timeline [--d 64|128] [--n N] [--key-tile 128|176] [--groups 2|3] [--causal] [--repeats R]\n",
               what.c_str());
  std::exit(2);
}

int int_arg(int argc, char** argv, int& i) {
  if (i + 1 >= argc) usage_error(std::string(argv[i]) + " needs a value");
  char* end = nullptr;
  const long v = std::strtol(argv[++i], &end, 10);
  if (*end != '\0' || v <= 0 || v > 1 << 20) usage_error(std::string(argv[i - 1]) + " " + argv[i] + ": a positive integer");
  return static_cast<int>(v);
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--d") {
      c.d = int_arg(argc, argv, i);
    } else if (a == "--n") {
      c.n = int_arg(argc, argv, i);
    } else if (a == "--key-tile") {
      c.key_tile = int_arg(argc, argv, i);
    } else if (a == "--groups") {
      c.groups = int_arg(argc, argv, i);
    } else if (a == "--repeats") {
      c.repeats = int_arg(argc, argv, i);
    } else if (a == "--causal") {
      c.causal = true;
    } else {
      usage_error("unknown argument " + a);
    }
  }
  if (c.d != 64 && c.d != 128) usage_error("--d " + std::to_string(c.d) + ": 64 or 128");
  if (c.key_tile != 128 && c.key_tile != 176) usage_error("--key-tile " + std::to_string(c.key_tile) + ": 128 or 176");
  if (c.groups != 2 && c.groups != 3) usage_error("--groups " + std::to_string(c.groups) + ": 2 or 3");
  if (c.groups == 3 && c.key_tile != 128) usage_error("--groups 3 runs with --key-tile 128 only (cuda.fa3's registers)");
  if (c.n > 16384 || 16384 % c.n != 0) usage_error("--n " + std::to_string(c.n) + ": a divisor of 16384 (B = 16384 / N)");
  if (c.n < 8 * c.key_tile) usage_error("--n " + std::to_string(c.n) + ": at least 8 key tiles (" + std::to_string(8 * c.key_tile) + "), for steady-state steps");
  return c;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <int D, int BlockN, int Groups, bool PShared = false>
struct Run {
  using Ops = Wide16Ops<T, D, BlockN, PShared>;
  using Layout = WsLayout<Groups>;
  static constexpr std::size_t kBytes = ws_smem_bytes<Ops, 2, false, Groups>();

  template <class Timeline>
  static void launch(const ForwardParams& p, const Timeline& timeline) {
    const AttentionShapeParams& s = p.shape;
    const CUtensorMap q = map_sw128(p.q, p.type, s, s.heads_q, s.seq_q, kGroupRows);
    const CUtensorMap k = map_sw128(p.k, p.type, s, s.heads_kv, s.seq_k, BlockN);
    const CUtensorMap v = map_sw128(p.v, p.type, s, s.heads_kv, s.seq_k, BlockN);
    auto* kernel = fa3_forward_ws_kernel<Ops, 2, true, true, Fa3Rule, false, Groups, Timeline>;
    allow_smem(kernel, static_cast<int>(kBytes), "fa3-timeline");
    kernel<<<grid_of(s, Layout::kCtaRows, "fa3-timeline"), Layout::kThreads, kBytes>>>(q, k, v, p, WorkTiles{}, BlockExponents{}, timeline);
    check_launch("fa3-timeline");
  }
};

template <int D, int BlockN, int Groups, bool PShared = false>
void measure(const Config& c, const ForwardParams& p) {
  using R = Run<D, BlockN, Groups, PShared>;
  using Layout = typename R::Layout;
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> ms;
  for (int i = 0; i < 10 + c.repeats; ++i) {
    check(cudaEventRecord(start), "cudaEventRecord");
    R::launch(p, NoTimeline{});
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "the kernel");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    if (i >= 10) ms.push_back(t);
  }
  const AttentionShapeParams& s = p.shape;
  const double flops = 4.0 * s.seq_q * static_cast<double>(s.seq_k) * D * s.batch * s.heads_q / (c.causal ? 2 : 1);
  const double t = median(ms);

  constexpr int kCtas = ClockTimeline::kCtas, kGroupsMax = ClockTimeline::kMaxGroups, kSteps = ClockTimeline::kSteps;
  const std::size_t count = static_cast<std::size_t>(kCtas) * kGroupsMax * kSteps * kTimelinePoints;
  long long* stamps = nullptr;
  check(cudaMalloc(&stamps, count * sizeof(long long)), "cudaMalloc (stamps)");
  check(cudaMemset(stamps, 0, count * sizeof(long long)), "cudaMemset");
  ClockTimeline timeline;
  timeline.stamps = stamps, timeline.head = s.heads_q / 2;
  R::launch(p, timeline);
  check(cudaDeviceSynchronize(), "the stamped kernel");
  std::vector<long long> h(count);
  check(cudaMemcpy(h.data(), stamps, count * sizeof(long long), cudaMemcpyDeviceToHost), "cudaMemcpy (stamps)");
  check(cudaFree(stamps), "cudaFree");

  const double products = 64.0 * BlockN * D * 2 * 2 / 4096;  // one group's two products per step, clocks at the dense rate
  std::printf("cuda.fa3 forward, bf16, d = %d, N = %d, B = %d, H = %d, %s, key tile %d, %d consumer groups: %.3f ms, %.1f TFLOP/s (median of %d, no stamps)\n",
              D, s.seq_q, s.batch, s.heads_q, c.causal ? "causal" : "no mask", BlockN, Groups, t, flops / t / 1e9, c.repeats);
  std::printf("one group's products per step at the dense rate: %.0f clocks; medians in SM clocks over the steady-state steps of %d CTAs:\n", products, kCtas);
  std::printf("%-6s %10s %8s %8s %8s %8s %8s %8s %8s %12s\n", "group", "turn wait", "issue", "S wait", "softmax", "PV wait", "pack", "period", "steps",
              "tensor busy");
  const int m_tiles = (s.seq_q + Layout::kCtaRows - 1) / Layout::kCtaRows;
  bool any = false;
  for (int g = 0; g < Groups; ++g) {
    std::vector<double> phase[kTimelinePoints];  // phase i: from point i to point i + 1; the last: the period
    for (int cta = 0; cta < kCtas && cta < m_tiles; ++cta) {
      // (CTA x holds query tile m_tiles - 1 - x, cta_tile(); its key tiles as the kernel counts them)
      const int m0 = (m_tiles - 1 - cta) * Layout::kCtaRows, rows = std::min(Layout::kCtaRows, s.seq_q - m0);
      const int visible = c.causal ? std::min(s.seq_k, m0 + rows + s.causal_offset()) : s.seq_k;
      const int n_tiles = (visible + BlockN - 1) / BlockN;
      for (int j = 2; j + 4 <= n_tiles && j + 1 < kSteps; ++j) {  // (the loop's steps are 0 .. n_tiles - 2)
        const long long* r = h.data() + ((static_cast<std::size_t>(cta) * kGroupsMax + g) * kSteps + j) * kTimelinePoints;
        const long long* next = r + kTimelinePoints;
        if (r[kTurnWait] == 0 || next[kIssue] == 0) continue;
        for (int i = 0; i + 1 < kTimelinePoints; ++i) phase[i].push_back(static_cast<double>(r[i + 1] - r[i]));
        phase[kTimelinePoints - 1].push_back(static_cast<double>(next[kIssue] - r[kIssue]));
      }
    }
    any = any || !phase[0].empty();
    const double period = median(phase[kTimelinePoints - 1]);
    std::printf("%-6d %10.0f %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %8zu %11.0f%%\n", g, median(phase[0]), median(phase[1]), median(phase[2]), median(phase[3]),
                median(phase[4]), median(phase[5]), period, phase[0].size(), 100.0 * Groups * products / period);
  }
  if (!any) throw std::runtime_error("no steady-state step was stamped (too few key tiles per CTA)");
}

template <int D>
void dispatch(const Config& c, const ForwardParams& p) {
  if (c.groups == 3) {
    if constexpr (D == 64) return measure<64, 128, 3>(c, p);
    if constexpr (D == 128) return measure<128, 128, 3, true>(c, p);  // (P in shared memory: O and S fit 160 registers)
  } else if (c.key_tile == 176) {
    return measure<D, 176, 2>(c, p);
  } else {
    return measure<D, 128, 2>(c, p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Config c = parse(argc, argv);
  try {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::fprintf(stderr, "fa3-timeline: no CUDA device\n");
      return 1;
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    if (prop.major != 9) {
      std::fprintf(stderr, "fa3-timeline: cuda.fa3 needs a Hopper GPU (sm_90a); device 0 is %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
      return 1;
    }
    const int b = 16384 / c.n, heads = 2048 / c.d;
    const std::size_t elements = static_cast<std::size_t>(b) * heads * c.n * c.d;
    std::vector<T> host(elements);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    T* qkv[3] = {};
    T* o = nullptr;
    float* lse = nullptr;
    for (T*& x : qkv) {
      check(cudaMalloc(&x, elements * sizeof(T)), "cudaMalloc (inputs)");
      for (T& e : host) e = __float2bfloat16(normal(rng));
      check(cudaMemcpy(x, host.data(), elements * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy (inputs)");
    }
    check(cudaMalloc(&o, elements * sizeof(T)), "cudaMalloc (O)");
    check(cudaMalloc(&lse, static_cast<std::size_t>(b) * heads * c.n * sizeof(float)), "cudaMalloc (L)");
    ForwardParams p;
    p.shape.batch = b, p.shape.heads_q = heads, p.shape.heads_kv = heads, p.shape.seq_q = c.n, p.shape.seq_k = c.n, p.shape.head_dim = c.d;
    p.shape.mask = c.causal ? CausalMask::bottom_right : CausalMask::none;
    p.shape.scale = 1.f / std::sqrt(static_cast<float>(c.d));
    p.type = StorageType::bf16;
    const std::int64_t head = static_cast<std::int64_t>(c.n) * c.d, batch = head * heads;
    p.q = {qkv[0], batch, head, c.d}, p.k = {qkv[1], batch, head, c.d}, p.v = {qkv[2], batch, head, c.d};
    p.o = {o, batch, head, c.d};
    p.lse = lse;
    c.d == 64 ? dispatch<64>(c, p) : dispatch<128>(c, p);
    for (T* x : qkv) cudaFree(x);
    cudaFree(o), cudaFree(lse);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa3-timeline: %s\n", e.what());
    return 1;
  }
  return 0;
}
