// cuda.fa3's and cuda.fa4's forward in 16-bit formats (kernels/cuda/NOTES.md, "cuda.fa3, cuda.fa4"; d = 256: "Head dim 256"): FlashAttention-3
// on Hopper's TMA and warpgroup MMA, in the schedules the plan's steps add, each kept so that one run measures them
// side by side:
//   - one_group (step 1, this file): one warpgroup per 64 query rows; thread 0 refills a 2-stage K/V ring; each
//     product is waited for before the softmax that needs it;
//   - ws, ws_overlap, ws_overlap_pingpong (steps 2 and 3) and cuda.fa4's variants: fa3_forward.cuh's
//     warp-specialised kernel, instantiated here with Wide16Ops (bf16 or fp16 operands).
// The arithmetic is the same in every schedule: S by wgmma m64n128k16 (m64n64k16 with cuda.fa4's 64-key tiles at d = 256)
// from shared memory (Q and K K-major);
// FA2's online softmax (exp2 in log2 units, the row max by quads, masks only on tiles that cross Nk or the
// diagonal); P rounded to the storage format (bf16 or fp16) in registers and O += P V by wgmma with A from
// registers and V's tile as an MN-major B (HopperPrimitives.IdentityTimesVFromAnMnMajorTileIsExact checks that
// descriptor); fa2's epilogue (O / l rounded RN or SR, L in natural log). Schedules differ only in when things
// happen, so they produce the same bits.
//
// Shared memory (dynamic, 1024-byte aligned: the 128-byte swizzle's atom): Q as boxes of 64 rows x 64 d (8 KiB
// each; d / 64 per warpgroup), then per stage K as d / 64 boxes of 128 keys x 64 d (16 KiB each; at d = 256 boxes of 64
// keys, 8 KiB), then per stage V the same.
#include "kernels/cuda/fa3_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/cuda/fa3_forward.cuh"
#include "kernels/cuda/hopper/tensor_map.hpp"
#include "kernels/cuda/kernel_launch.cuh"

namespace fc::kernels::cuda {
namespace {

using namespace fa3;

// --- step 1: one warpgroup per 64 rows -------------------------------------------------------------------
template <class T, int D>
constexpr std::size_t one_group_smem_bytes() {
  return Tiles<T, D>::kQBytes + 2 * 2 * Tiles<T, D>::kTileBytes + 1024;
}

template <class T, int D>
__global__ void __launch_bounds__(128, 1) fa3_forward_one_group_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                                                                       const __grid_constant__ CUtensorMap v_map, const ForwardParams p) {
  using Tl = Tiles<T, D>;
  constexpr unsigned kTileBytes = Tl::kTileBytes;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sQ = aligned_smem(smem_raw);
  unsigned char* sK = sQ + Tl::kQBytes;  // stage s at + s kTileBytes
  unsigned char* sV = sK + 2 * kTileBytes;
  __shared__ alignas(8) std::uint64_t q_full, kv_full[2];

  const AttentionShapeParams& s = p.shape;
  const CtaTile cta = cta_tile();
  const int h = cta.h, b = cta.b, hk = h / (s.heads_q / s.heads_kv);
  const GroupThread th(cta.m_tile * kGroupRows, threadIdx.x);
  const int n_tiles = key_tiles(s, th.m0, kGroupRows);

  const auto issue_kv = [&](int j) {  // thread 0: tile j's K and V into stage j % 2
    const int stage = j & 1;
    mbarrier_arrive_expect_tx(&kv_full[stage], 2 * kTileBytes);
    for (int half = 0; half < Tl::kHalves; ++half) {
      tma_load_4d(sK + stage * kTileBytes + half * kKVBox, &k_map, &kv_full[stage], 64 * half, j * kBlockN, hk, b);
      tma_load_4d(sV + stage * kTileBytes + half * kKVBox, &v_map, &kv_full[stage], 64 * half, j * kBlockN, hk, b);
    }
  };
  if (threadIdx.x == 0) {
    mbarrier_init(&q_full, 1), mbarrier_init(&kv_full[0], 1), mbarrier_init(&kv_full[1], 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&q_full, Tl::kQBytes);
    for (int half = 0; half < Tl::kHalves; ++half) tma_load_4d(sQ + half * kQBox, &q_map, &q_full, 64 * half, th.m0, h, b);
    for (int j = 0; j < 2 && j < n_tiles; ++j) issue_kv(j);
  }

  const float scale2 = s.scale * fa3::kLog2e;
  float o[D / 8][4];  // O's accumulator (hopper/wgmma_tma.cuh's layout)
#pragma unroll
  for (auto& x : o) x[0] = x[1] = x[2] = x[3] = 0.f;
  RowStats st;
  mbarrier_wait(&q_full, 0);
  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j & 1;
    mbarrier_wait(&kv_full[stage], (j >> 1) & 1);
    float sc[16][4];
    issue_qk<T, D>(sc, sQ, sK + stage * kTileBytes);
    wgmma_wait<0>();
    float alpha[2];
    softmax_tile<Fa3Rule>(sc, st, alpha, j, th, s, scale2);
    rescale(o, alpha);
    std::uint32_t pa[8][4];
    a_fragments<T>(pa, sc);
    issue_pv<T, D>(o, pa, sV + stage * kTileBytes);
    wgmma_wait<0>();
    __syncthreads();  // every product on this stage is complete: thread 0 may refill it
    if (threadIdx.x == 0 && j + 2 < n_tiles) issue_kv(j + 2);
  }
  store_rows<T, D>(o, st, th, p, h, b);
}


CUtensorMap map_of(const Strided& x, const ForwardParams& p, int heads, int rows, std::uint32_t box_rows) {
  return map_sw128(x, p.type, p.shape, heads, rows, box_rows);
}

struct Maps {
  CUtensorMap q, k, v;
  CUtensorMap o{};        // (o_by_tma: O's map, the same boxes as Q's)
  bool o_by_tma = false;  // O stored through shared memory and TMA (store_rows_by_tma): rounded to nearest, TMA-writable
};

template <class T, int D>
void launch_one_group(const Maps& m, const ForwardParams& p, cudaStream_t stream, const char* name) {
  constexpr std::size_t bytes = one_group_smem_bytes<T, D>();
  auto* kernel = fa3_forward_one_group_kernel<T, D>;
  allow_smem(kernel, static_cast<int>(bytes), name);
  kernel<<<grid_of(p.shape, kGroupRows, "cuda.fa3"), 128, bytes, stream>>>(m.q, m.k, m.v, p);
}

template <class T, int D, int Stages, bool Overlap, bool PingPong, class Rule = Fa3Rule, bool Persistent = false, int BlockN = kBlockN, int Groups = 2,
          bool PShared = false>
void launch_ws(const Maps& m, const ForwardParams& p, cudaStream_t stream, const char* name) {
  using Ops = Wide16Ops<T, D, BlockN, PShared>;
  using Layout = WsLayout<Groups>;
  constexpr std::size_t bytes = ws_smem_bytes<Ops, Stages, Persistent, Groups>();
  static_assert(bytes <= kSm90SharedBytesPerBlock, "cuda.fa3 forward: shared memory beyond sm_90's 227 KiB per block");
  auto* kernel = fa3_forward_ws_kernel<Ops, Stages, Overlap, PingPong, Rule, Persistent, Groups>;
  allow_smem(kernel, static_cast<int>(bytes), name);
  const AttentionShapeParams& s = p.shape;
  const dim3 grid = grid_of(s, Layout::kCtaRows, "cuda.fa3");
  if constexpr (!Persistent) {
    WorkTiles work;
    work.o_by_tma = m.o_by_tma;
    work.ctas_in_flight = device_sm_count(name);
    kernel<<<grid, Layout::kThreads, bytes, stream>>>(m.q, m.k, m.v, m.o, p, work, BlockExponents{}, NoTimeline{});
  } else {
    int device = 0, l2_bytes = 0;
    const int sms = device_sm_count(name);
    check_launch_result(cudaGetDevice(&device), name);
    check_launch_result(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device), name);
    WorkTiles work = persistent_work_tiles(s, static_cast<int>(grid.x), sizeof(T), l2_bytes);
    work.o_by_tma = m.o_by_tma;
    kernel<<<std::min(work.m_tiles * work.pairs, sms), Layout::kThreads, bytes, stream>>>(m.q, m.k, m.v, m.o, p, work, BlockExponents{}, NoTimeline{});
  }
}

// (the grid scheduler with kForwardGroups<D> consumer warpgroups; the persistent one keeps two: with three, its
// work loop's state spills about 1.8 KB of reloads in ptxas's count. d = 256: the grid with key tiles of 64 only, since
// the persistent kernel's second Q buffer does not fit beside the K/V ring: fa4_forward refuses it)
template <class T, int D>
void launch_fa4(const Fa4Options& options, const Maps& m, const ForwardParams& p, cudaStream_t stream, const char* name) {
  constexpr int G = kForwardGroups<D>;
  const int variant = options.emulated_eighths * 2 + (options.persistent ? 1 : 0);
  if constexpr (D == 256) {
    switch (variant) {
      case 0: return launch_ws<T, D, 2, true, true, SoftmaxRule<true, 0>, false, kFa4KeyTileD256, G>(m, p, stream, name);
      case 2: return launch_ws<T, D, 2, true, true, SoftmaxRule<true, 1>, false, kFa4KeyTileD256, G>(m, p, stream, name);
      case 8: return launch_ws<T, D, 2, true, true, SoftmaxRule<true, 4>, false, kFa4KeyTileD256, G>(m, p, stream, name);
      default: throw std::runtime_error("cuda.fa4 at head dim 256: exp2 emulation on " + std::to_string(options.emulated_eighths) + " eighths: compiled for 0, 1, 4");
    }
  } else {
    switch (variant) {
      case 0: return launch_ws<T, D, 2, true, true, SoftmaxRule<true, 0>, false, kBlockN, G>(m, p, stream, name);
      case 1: return launch_ws<T, D, 2, true, true, SoftmaxRule<true, 0>, true>(m, p, stream, name);
      case 2: return launch_ws<T, D, 2, true, true, SoftmaxRule<true, 1>, false, kBlockN, G>(m, p, stream, name);
      case 3: return launch_ws<T, D, 2, true, true, SoftmaxRule<true, 1>, true>(m, p, stream, name);
      case 8: return launch_ws<T, D, 2, true, true, SoftmaxRule<true, 4>, false, kBlockN, G>(m, p, stream, name);
      case 9: return launch_ws<T, D, 2, true, true, SoftmaxRule<true, 4>, true>(m, p, stream, name);
      default: throw std::runtime_error("cuda.fa4: exp2 emulation on " + std::to_string(options.emulated_eighths) + " eighths: compiled for 0, 1, 4");
    }
  }
}

template <class T, int D>
void launch(Fa3Schedule schedule, int key_tile, const Maps& m, const ForwardParams& p, cudaStream_t stream, const char* name) {
  if (key_tile == 176) return launch_ws<T, D, 2, true, true, Fa3Rule, false, 176>(m, p, stream, name);  // (ws_overlap_pingpong)
  switch (schedule) {
    case Fa3Schedule::one_group: return launch_one_group<T, D>(m, p, stream, name);
    case Fa3Schedule::ws: return launch_ws<T, D, 2, false, false>(m, p, stream, name);
    case Fa3Schedule::ws_overlap: return launch_ws<T, D, 2, true, false>(m, p, stream, name);
    case Fa3Schedule::ws_overlap_pingpong: return launch_ws<T, D, 2, true, true>(m, p, stream, name);
    case Fa3Schedule::ws_overlap_pingpong_3stage: return launch_ws<T, D, 3, true, true>(m, p, stream, name);
    case Fa3Schedule::ws_overlap_pingpong_3groups:
      // (d = 64 only, checked by fa3_forward: at d = 128 ptxas serialises every wgmma for want of registers)
      if constexpr (D == 64) return launch_ws<T, D, 2, true, true, Fa3Rule, false, kBlockN, 3>(m, p, stream, name);
      break;
    case Fa3Schedule::ws_overlap_pingpong_3groups_p_shared:
      // (d = 128 only, checked by fa3_forward: at d = 64 three groups hold P in registers)
      if constexpr (D == 128) return launch_ws<T, D, 2, true, true, Fa3Rule, false, kBlockN, 3, true>(m, p, stream, name);
      break;
    case Fa3Schedule::ws_overlap_3groups:
      if constexpr (D == 64) return launch_ws<T, D, 2, true, false, Fa3Rule, false, kBlockN, 3>(m, p, stream, name);
      break;
    case Fa3Schedule::ws_overlap_3groups_p_shared:
      if constexpr (D == 128) return launch_ws<T, D, 2, true, false, Fa3Rule, false, kBlockN, 3, true>(m, p, stream, name);
      break;
    case Fa3Schedule::automatic: return launch_ws<T, D, 2, true, true, Fa3Rule, false, kBlockN, kForwardGroups<D>>(m, p, stream, name);
  }
  throw std::logic_error(std::string("cuda.fa3 forward: schedule ") + name + " at head dim " + std::to_string(D));
}

}  // namespace

const char* fa3_schedule_name(Fa3Schedule schedule) {
  switch (schedule) {
    case Fa3Schedule::one_group: return "one_group";
    case Fa3Schedule::ws: return "ws";
    case Fa3Schedule::ws_overlap: return "ws_overlap";
    case Fa3Schedule::ws_overlap_pingpong: return "ws_overlap_pingpong";
    case Fa3Schedule::ws_overlap_pingpong_3stage: return "ws_overlap_pingpong_3stage";
    case Fa3Schedule::ws_overlap_pingpong_3groups: return "ws_overlap_pingpong_3groups";
    case Fa3Schedule::ws_overlap_pingpong_3groups_p_shared: return "ws_overlap_pingpong_3groups_p_shared";
    case Fa3Schedule::ws_overlap_3groups: return "ws_overlap_3groups";
    case Fa3Schedule::ws_overlap_3groups_p_shared: return "ws_overlap_3groups_p_shared";
    case Fa3Schedule::automatic: return "auto";
  }
  return "?";
}

namespace {
bool supports_with(const ForwardParams& p, bool d256) {
  const AttentionShapeParams& s = p.shape;
  const bool head_dim = s.head_dim == 64 || s.head_dim == 128 || (d256 && s.head_dim == 256);
  if (!head_dim || s.heads_kv < 1 || s.heads_q % s.heads_kv != 0) return false;
  const std::pair<const Strided*, int> tensors[] = {{&p.q, s.heads_q}, {&p.k, s.heads_kv}, {&p.v, s.heads_kv}};
  for (const auto& [x, heads] : tensors) {
    const int rows = x == &p.q ? s.seq_q : s.seq_k;
    if (!tma_readable16(*x, s.batch, heads, rows, s.head_dim)) return false;
  }
  return true;
}
}  // namespace

bool fa3_supports(const ForwardParams& p) { return supports_with(p, false); }

namespace {
Maps maps_of(const ForwardParams& p, const char* family, Fa3Epilogue epilogue, int key_tile = kBlockN, bool d256 = false) {
  if (!supports_with(p, d256)) {
    throw std::runtime_error(std::string(family) + (d256 ? ": head dim 64, 128 or 256 (got " : ": head dim 64 or 128 (got ") + std::to_string(p.shape.head_dim) +
                             "), heads_q a multiple of heads_kv, a 16-byte aligned base and strides that are multiples of 8 elements only");
  }
  const AttentionShapeParams& s = p.shape;
  const auto box = static_cast<std::uint32_t>(key_tile);
  Maps m{map_of(p.q, p, s.heads_q, s.seq_q, kGroupRows), map_of(p.k, p, s.heads_kv, s.seq_k, box), map_of(p.v, p, s.heads_kv, s.seq_k, box)};
  m.o_by_tma = epilogue == Fa3Epilogue::automatic && o_storable_by_tma(p);
  if (m.o_by_tma) m.o = map_of(layout_of(p.o), p, s.heads_q, s.seq_q, kGroupRows);
  return m;
}
}  // namespace

void fa3_forward(const ForwardParams& p, Fa3Schedule schedule, cudaStream_t stream, int key_tile, Fa3Epilogue epilogue, Fa3Scheduler scheduler) {
  const bool two_group_pingpong = schedule == Fa3Schedule::ws_overlap_pingpong || schedule == Fa3Schedule::automatic;
  if (key_tile != 128 && !(key_tile == 176 && two_group_pingpong)) {
    throw std::runtime_error("cuda.fa3 forward: key tiles of " + std::to_string(key_tile) + " keys with schedule " + fa3_schedule_name(schedule) +
                             ": 128 with every schedule, 176 with ws_overlap_pingpong or auto");
  }
  const bool persistent = scheduler == Fa3Scheduler::persistent;
  if (persistent && (!two_group_pingpong || key_tile != 128)) {
    throw std::runtime_error(std::string("cuda.fa3 forward: the persistent scheduler with schedule ") + fa3_schedule_name(schedule) + " and " +
                             std::to_string(key_tile) + "-key tiles: it runs schedule auto or ws_overlap_pingpong with 128-key tiles only");
  }
  if (persistent && p.work_counter == nullptr) throw std::runtime_error("cuda.fa3 forward: the persistent scheduler needs a work counter (ForwardParams::work_counter, 0 at the launch)");
  const AttentionShapeParams& s = p.shape;
  const Maps m = maps_of(p, "cuda.fa3", epilogue, key_tile);  // (refuses head dims other than 64 and 128 first)
  const char* name = fa3_schedule_name(schedule);
  const bool three_groups_p_registers = schedule == Fa3Schedule::ws_overlap_pingpong_3groups || schedule == Fa3Schedule::ws_overlap_3groups;
  const bool three_groups_p_shared = schedule == Fa3Schedule::ws_overlap_pingpong_3groups_p_shared || schedule == Fa3Schedule::ws_overlap_3groups_p_shared;
  if (three_groups_p_registers && s.head_dim != 64) {
    throw std::runtime_error(std::string("cuda.fa3 forward: schedule ") + name + " at head dim 64 only (got " + std::to_string(s.head_dim) +
                             "): at 128, O, S and P of a group do not fit its 160 registers");
  }
  if (three_groups_p_shared && s.head_dim != 128) {
    throw std::runtime_error(std::string("cuda.fa3 forward: schedule ") + name + " at head dim 128 only (got " + std::to_string(s.head_dim) +
                             "): at 64, three groups hold P in registers");
  }
  const bool fp16 = p.type == StorageType::fp16;
  if (persistent) {
    // (ws_overlap_pingpong's kernel under the persistent scheduler: two groups, as cuda.fa4's)
    if (s.head_dim == 128) {
      fp16 ? launch_ws<__half, 128, 2, true, true, Fa3Rule, true>(m, p, stream, name) : launch_ws<__nv_bfloat16, 128, 2, true, true, Fa3Rule, true>(m, p, stream, name);
    } else {
      fp16 ? launch_ws<__half, 64, 2, true, true, Fa3Rule, true>(m, p, stream, name) : launch_ws<__nv_bfloat16, 64, 2, true, true, Fa3Rule, true>(m, p, stream, name);
    }
  } else if (s.head_dim == 128) {
    fp16 ? launch<__half, 128>(schedule, key_tile, m, p, stream, name) : launch<__nv_bfloat16, 128>(schedule, key_tile, m, p, stream, name);
  } else {
    fp16 ? launch<__half, 64>(schedule, key_tile, m, p, stream, name) : launch<__nv_bfloat16, 64>(schedule, key_tile, m, p, stream, name);
  }
  check_launch((std::string("cuda.fa3 forward, schedule ") + name + (persistent ? ", persistent scheduler" : "")).c_str());
}

void fa4_forward(const ForwardParams& p, const Fa4Options& options, cudaStream_t stream) {
  const AttentionShapeParams& s = p.shape;
  if (s.head_dim == 256 && options.persistent) {
    throw std::runtime_error("cuda.fa4: the persistent scheduler at head dim 64 or 128 only (got 256): its second Q buffer does not fit beside the K/V ring");
  }
  const Maps m = maps_of(p, "cuda.fa4", options.epilogue, s.head_dim == 256 ? kFa4KeyTileD256 : kBlockN, true);
  const char* name = "fa4";
  const bool fp16 = p.type == StorageType::fp16;
  if (s.head_dim == 256) {
    fp16 ? launch_fa4<__half, 256>(options, m, p, stream, name) : launch_fa4<__nv_bfloat16, 256>(options, m, p, stream, name);
  } else if (s.head_dim == 128) {
    fp16 ? launch_fa4<__half, 128>(options, m, p, stream, name) : launch_fa4<__nv_bfloat16, 128>(options, m, p, stream, name);
  } else {
    fp16 ? launch_fa4<__half, 64>(options, m, p, stream, name) : launch_fa4<__nv_bfloat16, 64>(options, m, p, stream, name);
  }
  check_launch("cuda.fa4 forward");
}

}  // namespace fc::kernels::cuda
