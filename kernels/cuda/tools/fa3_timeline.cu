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
// Then, without a mask, each work tile's own span (kernels/cuda/fa3_forward.cuh's tile points, every tile of the
// launch): the prologue (Q in shared memory to the first turn), the turns, the epilogue (the last P V's turn to O
// stored), and the span between consecutive tiles' stores on one SM less the tile's steps at the steady period: what a
// tile costs beyond its steps (the launch, Q's load, the pipeline's fill and drain, the stores), in clocks and steps.
// --scheduler persistent runs the persistent grid (one CTA per SM, tiles claimed longest first; cuda.fa3's and
// cuda.fa4's scheduler=persistent) with the chosen rule, so that the two schedulers' tiles compare; with --dtype e4m3,
// cuda.fa3.fp8's (d = 128, --groups 3 --turns none: auto's kernel).
// Medians over the steady state (loop steps 2 .. n - 3 of a CTA's n = key tiles - 1) of the 8 CTAs with the last
// query tiles of one head (under a causal mask, the longest); the tensor pipe's share is the groups' products at the
// dense rate (4096 bf16 FLOP per clock per SM) over the period. The step stamps slow the CTAs that write them: their
// step, from their own tile stamps, is printed beside every tile's (on an H200: + 20 % for the 16-bit two-group kernel,
// + 7-8 % for FP8's three groups; NOTES "The step stamps' own cost"). So the phases describe those slower CTAs, and a
// change is judged by the unstamped TFLOP/s (alternated with the base in one call), not by the stamped period. Every
// tile's step comes from the stamped launch, another build of the kernel, and can miss a change that the unstamped
// kernel shows (NOTES "fa3-timeline on RunTimer, and the ring position two ways").
//
// --dtype e4m3 runs cuda.fa3.fp8's kernels (E4m3Ops, O in bf16, block exponents all 0, V's bytes drawn as they are and
// transposed once by transpose_v_e4m3; the launcher's tensor maps, fa3_fp8_tensor_maps): --groups 3 at d = 128 is
// P in shared memory (auto's with --turns none), --groups 2 P in
// registers with --key-tile 128 or 224, and with --key-tile 256 P in shared memory (block_k=256's auto: the two groups
// take turns at their exponentials, so the turn wait column is the group's own barrier before the issue, and the turn
// itself falls inside the softmax column; grid or persistent); d = 64 runs three groups. Its tensor pipe's share counts FP8's dense rate (8192
// FLOP per clock per SM). The pass's own time is printed first (V read and V^T written, in TB/s). --v-transpose
// kernel: the kernels that transpose V's tiles themselves (v_transpose=kernel, 128-key tiles); pass (the default)
// reads the V^T written before, and the pass is not in its time. Both give the same checksum.
//
// Usage: fa3-timeline [--d 64|128] [--n N] [--batch B] [--heads H] [--dtype bf16|e4m3] [--key-tile 128|176|224|256] [--groups 2|3] [--scheduler grid|persistent]
//                     [--causal] [--section S] [--epilogue tma|stores] [--turns ring|none] [--v-transpose pass|kernel] [--rule fa3|fa4] [--repeats R]
// --rule fa4: FA4's selective rule at tau = 8, cuda.fa4's (bf16, two groups, 128-key tiles) or, with --dtype e4m3
// --key-tile 256, cuda.fa3.fp8's `block_k=256 tau=8` (the stale maxima first, turns ending at seven eighths of the
// exponentials).
// --batch, --heads: B and H in place of 16384 / N and 2048 / d (other CTA counts against the SM count: the last wave).
// Each run prints a checksum of O and L (of the unstamped launches), so that two builds can be compared bit for bit.
// --epilogue stores: O by store_rows' 4-byte global stores instead of the launchers' shared memory and TMA store.
// --turns none: three groups issue without turns (cuda.fa3's ws_overlap_3groups*; e4m3 at d = 128 only, P in shared
// memory); with P in shared memory each group syncs its own 128 threads there, and the turn wait column is that wait.
// --extra-smem BYTES: that many unused bytes of dynamic shared memory added to the launch (the persistent kernel's second
// Q buffer is 32 KiB at d = 128: does the shared-memory size alone, and the L1 it leaves, move the grid kernel's step?).
// --section S: the persistent scheduler's (batch, head) pairs per section (the launcher's choice otherwise:
// persistent_work_tiles, one pair without a mask, L2-sized sections under a causal mask).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/fa3_forward.cuh"
#include "kernels/cuda/fa3_fp8_kernels.hpp"
#include "kernels/cuda/fa3_fp8_ops.cuh"
#include "kernels/cuda/hopper/tensor_map.hpp"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/run_timer.hpp"

namespace {

using namespace fc::kernels::cuda;
using namespace fc::kernels::cuda::fa3;
using T = __nv_bfloat16;

struct Config {
  int d = 128, n = 8192, key_tile = 128, groups = 2, repeats = 30, section = 0;  // (section 0: the launcher's choice)
  int batch = 0, heads = 0;  // (0 until parse() resolves them: the bench's B = 16384 / N and H = 2048 / d)
  int extra_smem = 0;        // (--extra-smem: unused bytes of dynamic shared memory added to the launch)
  bool causal = false, persistent = false, o_by_tma = true, e4m3 = false, turns = true, v_in_kernel = false;
  bool selective = false;  // (--rule fa4: cuda.fa4's selective rescaling, tau = 8; with --dtype e4m3 --key-tile 256, cuda.fa3.fp8's tau=8)
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "fa3-timeline: %s\nusage: fa3-timeline [--d 64|128] [--n N] [--batch B] [--heads H] [--dtype bf16|e4m3] [--key-tile 128|176|224|256] [--groups 2|3] "
               "[--scheduler grid|persistent] [--section S] [--epilogue tma|stores] [--turns ring|none] [--v-transpose pass|kernel] [--rule fa3|fa4] [--causal] [--extra-smem BYTES] [--repeats R]\n",
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

// Whether the value after argv[i] is `second` (false: `first`); any other value is a usage error.
bool second_of_two(int argc, char** argv, int& i, const std::string& first, const std::string& second) {
  if (i + 1 >= argc) usage_error(std::string(argv[i]) + " needs a value");
  const std::string v = argv[++i];
  if (v != first && v != second) usage_error(std::string(argv[i - 1]) + " " + v + ": " + first + " or " + second);
  return v == second;
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--d") {
      c.d = int_arg(argc, argv, i);
    } else if (a == "--n") {
      c.n = int_arg(argc, argv, i);
    } else if (a == "--batch") {
      c.batch = int_arg(argc, argv, i);
    } else if (a == "--heads") {
      c.heads = int_arg(argc, argv, i);
    } else if (a == "--key-tile") {
      c.key_tile = int_arg(argc, argv, i);
    } else if (a == "--groups") {
      c.groups = int_arg(argc, argv, i);
    } else if (a == "--repeats") {
      c.repeats = int_arg(argc, argv, i);
    } else if (a == "--scheduler") {
      c.persistent = second_of_two(argc, argv, i, "grid", "persistent");
    } else if (a == "--rule") {
      c.selective = second_of_two(argc, argv, i, "fa3", "fa4");
    } else if (a == "--epilogue") {
      c.o_by_tma = !second_of_two(argc, argv, i, "tma", "stores");
    } else if (a == "--turns") {
      c.turns = !second_of_two(argc, argv, i, "ring", "none");
    } else if (a == "--v-transpose") {
      c.v_in_kernel = second_of_two(argc, argv, i, "pass", "kernel");
    } else if (a == "--dtype") {
      c.e4m3 = second_of_two(argc, argv, i, "bf16", "e4m3");
    } else if (a == "--section") {
      c.section = int_arg(argc, argv, i);
    } else if (a == "--extra-smem") {
      c.extra_smem = int_arg(argc, argv, i);
    } else if (a == "--causal") {
      c.causal = true;
    } else {
      usage_error("unknown argument " + a);
    }
  }
  if (c.d != 64 && c.d != 128) usage_error("--d " + std::to_string(c.d) + ": 64 or 128");
  if (c.key_tile != 128 && !(c.e4m3 ? c.key_tile == 224 || c.key_tile == 256 : c.key_tile == 176)) {
    usage_error("--key-tile " + std::to_string(c.key_tile) + (c.e4m3 ? ": 128, 224 or 256 (e4m3)" : ": 128 or 176 (bf16)"));
  }
  if (c.key_tile == 256 && (c.d != 128 || c.groups != 2 || !c.turns || c.v_in_kernel)) {
    usage_error("--key-tile 256 runs d = 128, two groups in turns and --v-transpose pass (cuda.fa3.fp8's block_k=256)");
  }
  if (c.groups != 2 && c.groups != 3) usage_error("--groups " + std::to_string(c.groups) + ": 2 or 3");
  if (c.groups == 3 && c.key_tile != 128) usage_error("--groups 3 runs with --key-tile 128 only (cuda.fa3's registers)");
  if (c.e4m3 && c.persistent && c.key_tile != 256 && (c.d != 128 || c.groups != 3 || c.turns || c.v_in_kernel)) {
    usage_error("--dtype e4m3 --scheduler persistent runs d = 128, three groups, --turns none and --v-transpose pass, or --key-tile 256 (cuda.fa3.fp8's)");
  }
  if (c.e4m3 && c.d == 64 && (c.groups != 3 || c.key_tile != 128)) usage_error("--dtype e4m3 at d = 64 runs three groups and 128-key tiles (cuda.fa3.fp8's)");
  if (c.section > 0 && !c.persistent) usage_error("--section applies to --scheduler persistent");
  if (!c.e4m3 && c.persistent && (c.groups != 2 || c.key_tile != 128)) usage_error("--scheduler persistent runs two groups and 128-key tiles (cuda.fa4's)");
  if (c.selective && (c.groups != 2 || c.key_tile != (c.e4m3 ? 256 : 128))) {
    usage_error("--rule fa4 runs two groups with bf16's 128-key tiles (cuda.fa4's) or e4m3's 256-key tiles (cuda.fa3.fp8's tau=8)");
  }
  if (!c.turns && (c.groups != 3 || (c.e4m3 && c.d != 128))) usage_error("--turns none runs three groups (e4m3: at d = 128, P in shared memory) only");
  if (c.v_in_kernel && (!c.e4m3 || c.key_tile != 128)) usage_error("--v-transpose kernel: e4m3 with 128-key tiles only (cuda.fa3.fp8's)");
  if (c.batch == 0 && (c.n > 16384 || 16384 % c.n != 0)) usage_error("--n " + std::to_string(c.n) + ": a divisor of 16384 (B = 16384 / N), or give --batch");
  if (c.batch == 0) c.batch = 16384 / c.n;  // (the bench's shapes unless given)
  if (c.heads == 0) c.heads = 2048 / c.d;
  if (static_cast<double>(c.batch) * c.heads * c.n * c.d > 1.5e9) usage_error("B x H x N x d above 1.5e9 elements a tensor");
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

// FNV-1a (64 bits) of O's and L's bytes after a launch: two builds that must give the same bits (a change that keeps
// the arithmetic) print the same checksum for the same flags.
unsigned long long output_checksum(const ForwardParams& p) {
  const AttentionShapeParams& s = p.shape;
  const std::size_t rows = static_cast<std::size_t>(s.batch) * s.heads_q * s.seq_q;
  std::vector<unsigned char> bytes(rows * s.head_dim * sizeof(T) + rows * sizeof(float));
  check(cudaDeviceSynchronize(), "the kernel");
  check(cudaMemcpy(bytes.data(), p.o.data, rows * s.head_dim * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy (O)");
  check(cudaMemcpy(bytes.data() + rows * s.head_dim * sizeof(T), p.lse, rows * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (L)");
  unsigned long long h = 14695981039346656037ull;
  for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

// The FP8 kernels' extra inputs: V ([B, H, N, d]) and V^T (transpose_v_e4m3's), and zero block exponents.
struct Fp8Inputs {
  Strided v;
  const void* vt = nullptr;
  BlockExponents ex;
};

// Turns: the consumer groups take turns to issue (the kernel's PingPong); without, P in shared memory only.
template <class Ops, int Groups, bool Persistent = false, bool Turns = true, class Rule = Fa3Rule>
struct Run {
  static constexpr int D = Ops::kD, BlockN = Ops::kBlockN;
  using Layout = WsLayout<Groups>;
  static constexpr std::size_t kBytes = ws_smem_bytes<Ops, 2, Persistent, Groups>();
  static constexpr bool kOByTma = kOStagingFits<Ops>;  // (the kernel's kCanStageO)

  // (persistent: the tile counter, cleared before each launch)
  template <class Timeline>
  static void launch(ForwardParams p, const Fp8Inputs& fp8, const Timeline& timeline, int* counter, int section, bool o_by_tma, int extra_smem) {
    const AttentionShapeParams& s = p.shape;
    CUtensorMap q{}, k{}, v{};
    if constexpr (Ops::kBlockScales) {  // (the maps cuda.fa3.fp8's launcher builds)
      Fp8ForwardParams f;
      f.p = p, f.vt = fp8.vt, f.v = fp8.v, f.block_k = BlockN;
      f.v_transpose = Ops::kVRawBytes > 0 ? Fp8VTranspose::kernel : Fp8VTranspose::pass;
      f.p_operand = Ops::kPBytes > 0 ? Fp8POperand::shared : Fp8POperand::registers;
      const Fp8TensorMaps m = fa3_fp8_tensor_maps(f);
      q = m.q, k = m.k, v = m.vt;
    } else {
      q = map_sw128(p.q, p.type, s, s.heads_q, s.seq_q, kGroupRows);
      k = map_sw128(p.k, p.type, s, s.heads_kv, s.seq_k, BlockN);
      v = map_sw128(p.v, p.type, s, s.heads_kv, s.seq_k, BlockN);
    }
    const CUtensorMap o = map_sw128(layout_of(p.o), p.type, s, s.heads_q, s.seq_q, kGroupRows);
    auto* kernel = fa3_forward_ws_kernel<Ops, 2, true, Turns, Rule, Persistent, Groups, Timeline>;
    const std::size_t bytes = kBytes + static_cast<std::size_t>(extra_smem);
    if (bytes > kSm90SharedBytesPerBlock) {
      throw std::runtime_error("--extra-smem " + std::to_string(extra_smem) + ": the kernel's " + std::to_string(kBytes) + " bytes and the extra exceed sm_90's " +
                               std::to_string(kSm90SharedBytesPerBlock) + " a block");
    }
    allow_smem(kernel, static_cast<int>(bytes), "fa3-timeline");
    const dim3 grid = grid_of(s, Layout::kCtaRows, "fa3-timeline");
    if constexpr (Persistent) {
      int sms = 0, l2_bytes = 0;
      check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
      check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0), "cudaDeviceGetAttribute");
      WorkTiles work = persistent_work_tiles(s, static_cast<int>(grid.x), Ops::kBlockScales ? kFp8SectionElementBytes : sizeof(T), l2_bytes);
      if (section > 0) work.section = std::min(section, work.pairs);
      check(cudaMemsetAsync(counter, 0, sizeof(int)), "cudaMemsetAsync (the tile counter)");
      p.work_counter = counter;
      work.o_by_tma = o_by_tma;
      kernel<<<std::min(static_cast<int>(grid.x * grid.y * grid.z), sms), Layout::kThreads, bytes>>>(q, k, v, o, p, work, fp8.ex, timeline);
    } else {
      WorkTiles work;
      work.o_by_tma = o_by_tma;
      work.ctas_in_flight = device_sm_count("fa3-timeline");
      kernel<<<grid, Layout::kThreads, bytes>>>(q, k, v, o, p, work, fp8.ex, timeline);
    }
    check_launch("fa3-timeline");
  }
};

// Each work tile's span on its SM (non-causal: every tile walks the same key tiles), from the tile stamps of one launch.
// `stamped`: the items of the CTAs that also stamp every step (ClockTimeline::mark); their own step from the tile stamps is
// printed beside every tile's, since the step stamps slow the CTAs that write them.
void print_tiles(const std::vector<long long>& rec, int items, int groups, int n_tiles, const std::vector<int>& stamped) {
  constexpr int kRecord = ClockTimeline::kTileRecord;
  struct Tile {
    long long sm, open, loop, last, stored;
  };
  std::vector<Tile> tiles;
  std::vector<double> prologue, turns, epilogue, stamped_turns;
  for (int i = 0; i < items; ++i) {
    const long long* r = rec.data() + static_cast<std::size_t>(i) * kRecord;
    Tile t{r[kRecord - 1], 0, 0, 0, 0};
    bool complete = true;
    for (int g = 0; g < groups; ++g) {
      const long long* p = r + g * kTilePoints;
      complete = complete && p[kTileOpen] != 0 && p[kTileLoop] != 0 && p[kTileLastTurn] != 0 && p[kTileStored] != 0;
      if (g == 0) t.open = p[kTileOpen], t.loop = p[kTileLoop], t.last = p[kTileLastTurn], t.stored = p[kTileStored];
      t.open = std::min(t.open, p[kTileOpen]), t.stored = std::max(t.stored, p[kTileStored]);
    }
    if (!complete) continue;
    tiles.push_back(t);
    prologue.push_back(static_cast<double>(t.loop - t.open));
    turns.push_back(static_cast<double>(t.last - t.loop));
    if (std::find(stamped.begin(), stamped.end(), i) != stamped.end()) stamped_turns.push_back(turns.back());
    epilogue.push_back(static_cast<double>(t.stored - t.last));
  }
  if (tiles.size() != static_cast<std::size_t>(items)) throw std::runtime_error("a work tile was not stamped");
  std::sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.sm != b.sm ? a.sm < b.sm : a.stored < b.stored; });
  std::vector<double> span, gap;
  for (std::size_t i = 1; i < tiles.size(); ++i) {
    if (tiles[i].sm != tiles[i - 1].sm) continue;
    span.push_back(static_cast<double>(tiles[i].stored - tiles[i - 1].stored));
    gap.push_back(static_cast<double>(tiles[i].open - tiles[i - 1].stored));
  }
  const double step = median(turns) / (n_tiles - 1), fixed = median(span) - n_tiles * step;
  std::printf("work tiles (%d, %d key tiles each), medians in SM clocks (group 0's points; open and stored over the groups):\n", items, n_tiles);
  std::printf("  prologue (Q in shared memory -> first turn) %.0f; turns %.0f (%.0f a step); epilogue (last P V's turn -> stored) %.0f\n",
              median(prologue), median(turns), step, median(epilogue));
  std::printf("  between one tile's store and the next's on the SM: %.0f (Q of the next in shared memory %.0f after the store)\n", median(span), median(gap));
  std::printf("  beyond the tile's %d steps: %.0f clocks, %.2f steps\n", n_tiles, fixed, fixed / step);
  if (!stamped_turns.empty()) {
    const double stamped_step = median(stamped_turns) / (n_tiles - 1);
    std::printf("  the %zu CTAs that stamp every step (the table below): %.0f a step, %+.1f %% against every tile's: the step stamps' own cost\n",
                stamped_turns.size(), stamped_step, 100.0 * (stamped_step / step - 1));
  }
}

template <class Ops, int Groups, bool Persistent = false, bool Turns = true, class Rule = Fa3Rule>
void measure(const Config& c, const ForwardParams& p, const Fp8Inputs& fp8) {
  using R = Run<Ops, Groups, Persistent, Turns, Rule>;
  constexpr int D = R::D, BlockN = R::BlockN;
  int* counter = nullptr;
  check(cudaMalloc(&counter, sizeof(int)), "cudaMalloc (the tile counter)");
  using Layout = typename R::Layout;
  // (10 untimed runs, then RunTimer's: the stream is held while the host builds the tensor maps and enqueues the launch,
  // so the events see the device's work alone, as in flashcheck bench; for the persistent kernel that work includes
  // the counter's cudaMemsetAsync, as in its launchers. Before this the host's launch work sat inside every timed run:
  // NOTES "A caveat on fa3-timeline's TFLOP/s")
  const std::vector<double> ms =
      time_runs("fa3-timeline", 10, 0.0, c.repeats, [&] { R::launch(p, fp8, NoTimeline{}, counter, c.section, c.o_by_tma, c.extra_smem); }).milliseconds;
  const AttentionShapeParams& s = p.shape;
  const double flops = 4.0 * s.seq_q * static_cast<double>(s.seq_k) * D * s.batch * s.heads_q / (c.causal ? 2 : 1);
  const double t = median(ms);
  const unsigned long long checksum = output_checksum(p);

  constexpr int kCtas = ClockTimeline::kCtas, kGroupsMax = ClockTimeline::kMaxGroups, kSteps = ClockTimeline::kSteps;
  const std::size_t count = static_cast<std::size_t>(kCtas) * kGroupsMax * kSteps * kTimelinePoints;
  long long* stamps = nullptr;
  check(cudaMalloc(&stamps, count * sizeof(long long)), "cudaMalloc (stamps)");
  check(cudaMemset(stamps, 0, count * sizeof(long long)), "cudaMemset");
  const int m_tiles = (s.seq_q + Layout::kCtaRows - 1) / Layout::kCtaRows, items = m_tiles * s.heads_q * s.batch;
  const std::size_t tile_count = static_cast<std::size_t>(items) * ClockTimeline::kTileRecord;
  long long* tile_stamps = nullptr;
  check(cudaMalloc(&tile_stamps, tile_count * sizeof(long long)), "cudaMalloc (tile stamps)");
  check(cudaMemset(tile_stamps, 0, tile_count * sizeof(long long)), "cudaMemset");
  ClockTimeline timeline;
  timeline.stamps = stamps, timeline.head = s.heads_q / 2, timeline.tiles = tile_stamps, timeline.items = items;
  R::launch(p, fp8, timeline, counter, c.section, c.o_by_tma, c.extra_smem);
  check(cudaDeviceSynchronize(), "the stamped kernel");
  std::vector<long long> h(count), tile_h(tile_count);
  check(cudaMemcpy(h.data(), stamps, count * sizeof(long long), cudaMemcpyDeviceToHost), "cudaMemcpy (stamps)");
  check(cudaMemcpy(tile_h.data(), tile_stamps, tile_count * sizeof(long long), cudaMemcpyDeviceToHost), "cudaMemcpy (tile stamps)");
  check(cudaFree(stamps), "cudaFree");
  check(cudaFree(tile_stamps), "cudaFree");
  check(cudaFree(counter), "cudaFree");

  // (one group's two products per step, clocks at the dense rate: 4096 16-bit or 8192 FP8 FLOP per clock per SM)
  const double products = 64.0 * BlockN * D * 2 * 2 / (Ops::kBlockScales ? 8192 : 4096);
  std::printf("%s forward, %s, d = %d, N = %d, B = %d, H = %d, %s, key tile %d, %d consumer groups%s%s%s%s, %s scheduler, O by %s: %.3f ms, %.1f TFLOP/s (median of %d, no stamps)\n",
              Ops::kBlockScales ? "cuda.fa3.fp8" : "cuda.fa3", Ops::kBlockScales ? "e4m3 (O bf16)" : "bf16", D, s.seq_q, s.batch, s.heads_q,
              c.causal ? "causal" : "no mask", BlockN, Groups, Ops::kPBytes > 0 ? " (P in shared memory)" : "", Turns ? "" : " without turns",
              Ops::kVRawBytes > 0 ? ", V transposed in the kernel" : "", Rule::kSelective ? ", cuda.fa4's rule (tau = 8)" : "",
              !Persistent ? "grid" : c.section > 0 ? ("persistent (section " + std::to_string(c.section) + ")").c_str() : "persistent",
              c.o_by_tma && R::kOByTma ? "TMA" : "stores", t, flops / t / 1e9, c.repeats);
  std::printf("O and L checksum (FNV-1a 64 of their bytes, the unstamped launches' outputs): %016llx\n", checksum);
  std::vector<int> stamped;  // (the grid's CTAs x < kCtas of head timeline.head, batch 0: item (head m_tiles + x))
  if (!Persistent) {
    for (int x = 0; x < kCtas && x < m_tiles; ++x) stamped.push_back(timeline.head * m_tiles + x);
  }
  if (!c.causal) print_tiles(tile_h, items, Groups, s.seq_k / BlockN, stamped);
  if (Persistent) return;  // (the step stamps follow the grid's CTAs)
  std::printf("one group's products per step at the dense rate: %.0f clocks; medians in SM clocks over the steady-state steps of %d CTAs:\n", products, kCtas);
  std::printf("%-6s %10s %8s %8s %8s %8s %8s %8s %8s %12s\n", "group", "turn wait", "issue", "S wait", "softmax", "PV wait", "pack", "period", "steps",
              "tensor busy");
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
  // How the groups' softmaxes fall against each other: over each CTA's steady state (from the last group's first stamped
  // issue to the first group's last), the share of the time with 0, 1, 2 or 3 groups between S ready and softmax done
  // (stamped by each group's first warp). Staggered groups (FA3's aim: one group's softmax under the others' products)
  // spend it with one group at a time; groups in step pile up.
  std::vector<double> share(kGroupsMax + 1, 0.0);
  double window_total = 0;
  for (int cta = 0; cta < kCtas && cta < m_tiles; ++cta) {
    std::vector<std::pair<long long, int>> edges;  // (clock, +1 entering a softmax, -1 leaving)
    long long lo = 0, hi = 0;
    bool first = true;
    for (int g = 0; g < Groups; ++g) {
      long long g_lo = 0, g_hi = 0;
      for (int j = 2; j + 1 < kSteps; ++j) {
        const long long* r = h.data() + ((static_cast<std::size_t>(cta) * kGroupsMax + g) * kSteps + j) * kTimelinePoints;
        const long long* next = r + kTimelinePoints;
        if (r[kTurnWait] == 0 || next[kIssue] == 0) break;
        if (g_lo == 0) g_lo = r[kIssue];
        g_hi = next[kIssue];
        edges.push_back({r[kSReady], +1}), edges.push_back({r[kSoftmaxDone], -1});
      }
      if (g_lo == 0) continue;
      lo = first ? g_lo : std::max(lo, g_lo), hi = first ? g_hi : std::min(hi, g_hi), first = false;
    }
    if (first || hi <= lo) continue;
    std::sort(edges.begin(), edges.end());
    int inside = 0;
    long long at = lo;
    for (const auto& [clock, step] : edges) {
      const long long t = std::min(std::max(clock, lo), hi);
      share[std::min(std::max(inside, 0), kGroupsMax)] += static_cast<double>(t - at);
      at = t, inside += step;
    }
    share[std::min(std::max(inside, 0), kGroupsMax)] += static_cast<double>(hi - at);
    window_total += static_cast<double>(hi - lo);
  }
  if (window_total > 0) {
    std::printf("time with 0 / 1 / 2 / 3 groups in their softmax (steady state, %d CTAs):", kCtas);
    for (int k = 0; k <= Groups; ++k) std::printf(" %.0f%%", 100.0 * share[k] / window_total);
    std::printf("\n");
  }
}

template <int D>
void dispatch(const Config& c, const ForwardParams& p, const Fp8Inputs& fp8) {
  using Fa4Rule = SoftmaxRule<true, 0>;  // (--rule fa4: the selective rule at tau = 8)
  if (c.e4m3) {
    using Out = __nv_bfloat16;
    if (c.groups == 3) {
      if constexpr (D == 64) return c.v_in_kernel ? measure<E4m3Ops<Out, 64, 128, false, true>, 3>(c, p, fp8) : measure<E4m3Ops<Out, 64>, 3>(c, p, fp8);
      if constexpr (D == 128) {  // (auto's: P in shared memory, without turns)
        if (!c.turns && c.persistent) return measure<E4m3Ops<Out, 128, 128, true>, 3, true, false>(c, p, fp8);
        if (!c.turns) {
          return c.v_in_kernel ? measure<E4m3Ops<Out, 128, 128, true, true>, 3, false, false>(c, p, fp8) : measure<E4m3Ops<Out, 128, 128, true>, 3, false, false>(c, p, fp8);
        }
        return c.v_in_kernel ? measure<E4m3Ops<Out, 128, 128, true, true>, 3>(c, p, fp8) : measure<E4m3Ops<Out, 128, 128, true>, 3>(c, p, fp8);
      }
    } else if constexpr (D == 128) {
      if (c.key_tile == 224) return measure<E4m3Ops<Out, 128, 224>, 2>(c, p, fp8);
      if (c.key_tile == 256) {  // (block_k=256's auto: P in shared memory, turns at the exponentials)
        if (c.selective) {  // (tau=8: the selective rule, stale maxima first)
          return c.persistent ? measure<E4m3Ops<Out, 128, 256, true>, 2, true, true, Fa4Rule>(c, p, fp8) : measure<E4m3Ops<Out, 128, 256, true>, 2, false, true, Fa4Rule>(c, p, fp8);
        }
        return c.persistent ? measure<E4m3Ops<Out, 128, 256, true>, 2, true>(c, p, fp8) : measure<E4m3Ops<Out, 128, 256, true>, 2>(c, p, fp8);
      }
      return c.v_in_kernel ? measure<E4m3Ops<Out, 128, 128, false, true>, 2>(c, p, fp8) : measure<E4m3Ops<Out, 128>, 2>(c, p, fp8);
    }
    return;  // (parse refused the rest)
  }
  if (c.groups == 3) {
    if constexpr (D == 64) {
      if (!c.turns) return measure<Wide16Ops<T, 64>, 3, false, false>(c, p, fp8);
      return measure<Wide16Ops<T, 64>, 3>(c, p, fp8);
    }
    if constexpr (D == 128) {  // (P in shared memory: O and S fit 160 registers)
      if (!c.turns) return measure<Wide16Ops<T, 128, 128, true>, 3, false, false>(c, p, fp8);
      return measure<Wide16Ops<T, 128, 128, true>, 3>(c, p, fp8);
    }
  } else if (c.selective) {  // (cuda.fa4's rule)
    if (c.persistent) return measure<Wide16Ops<T, D>, 2, true, true, Fa4Rule>(c, p, fp8);
    return measure<Wide16Ops<T, D>, 2, false, true, Fa4Rule>(c, p, fp8);
  } else if (c.persistent) {
    return measure<Wide16Ops<T, D>, 2, true>(c, p, fp8);
  } else if (c.key_tile == 176) {
    return measure<Wide16Ops<T, D, 176>, 2>(c, p, fp8);
  } else {
    return measure<Wide16Ops<T, D>, 2>(c, p, fp8);
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
    const int b = c.batch, heads = c.heads;
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
    p.rescale_threshold = c.selective ? 8.f : 0.f;  // (cuda.fa4's tau)
    // e4m3: Q, K and V as bytes of N(0, 1) values rounded to e4m3 (strides in bytes), V^T from V, every block exponent 0
    Fp8Inputs fp8;
    std::uint8_t* fp8_tensors[3] = {};
    void* vt = nullptr;
    int* exponents = nullptr;
    if (c.e4m3) {
      std::vector<std::uint8_t> bytes(elements);
      for (std::uint8_t*& x : fp8_tensors) {
        check(cudaMalloc(&x, elements), "cudaMalloc (e4m3 inputs)");
        for (std::uint8_t& e : bytes) e = __nv_cvt_float_to_fp8(normal(rng), __NV_SATFINITE, __NV_E4M3);
        check(cudaMemcpy(x, bytes.data(), elements, cudaMemcpyHostToDevice), "cudaMemcpy (e4m3 inputs)");
      }
      const int blocks = (c.n + 127) / 128;  // (at least the blocks of any key tile)
      check(cudaMalloc(&exponents, static_cast<std::size_t>(b) * heads * blocks * sizeof(int)), "cudaMalloc (exponents)");
      check(cudaMemset(exponents, 0, static_cast<std::size_t>(b) * heads * blocks * sizeof(int)), "cudaMemset (exponents)");
      p.q = {fp8_tensors[0], batch, head, c.d}, p.k = {fp8_tensors[1], batch, head, c.d};
      const std::size_t vt_bytes = static_cast<std::size_t>(b) * heads * c.d * fp8_vt_keys(c.n);
      check(cudaMalloc(&vt, vt_bytes), "cudaMalloc (V^T)");
      fp8.v = {fp8_tensors[2], batch, head, c.d};
      transpose_v_e4m3(fp8.v, b, heads, c.n, c.d, vt, nullptr);
      fp8.vt = vt;
      // the pass's own time (the forward's below leaves it out): median of c.repeats, and the bytes it moves
      std::vector<double> pass_ms;
      cudaEvent_t start = nullptr, stop = nullptr;
      check(cudaEventCreate(&start), "cudaEventCreate"), check(cudaEventCreate(&stop), "cudaEventCreate");
      for (int r = 0; r < c.repeats; ++r) {
        check(cudaEventRecord(start), "cudaEventRecord");
        transpose_v_e4m3(fp8.v, b, heads, c.n, c.d, vt, nullptr);
        check(cudaEventRecord(stop), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        pass_ms.push_back(ms);
      }
      cudaEventDestroy(start), cudaEventDestroy(stop);
      const double pass = median(pass_ms);
      std::printf("V^T pass (transpose_v_e4m3): %.1f us, %.2f TB/s (V read, V^T written; median of %d)\n", 1e3 * pass, (elements + vt_bytes) / (pass * 1e-3) / 1e12,
                  c.repeats);
      fp8.ex = {exponents, exponents, exponents, blocks, (c.n + c.key_tile - 1) / c.key_tile};
    }
    c.d == 64 ? dispatch<64>(c, p, fp8) : dispatch<128>(c, p, fp8);
    for (T* x : qkv) cudaFree(x);
    for (std::uint8_t* x : fp8_tensors) cudaFree(x);
    cudaFree(exponents), cudaFree(vt), cudaFree(o), cudaFree(lse);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa3-timeline: %s\n", e.what());
    return 1;
  }
  return 0;
}
