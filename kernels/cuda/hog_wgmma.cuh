// Flash Hog's passes on Hopper's wgmma and TMA (kernels/cuda/NOTES.md, cuda.hog version 3): the pass structure,
// the elementwise formulas and the rounding points of hog_kernels.cuh (cpu.hog's), on the machinery of cuda.fa3's
// backward (fa3_backward.cu). A producer warpgroup (setmaxnreg 24) issues every TMA copy into 128-byte swizzled
// tiles of 64 rows; two consumer warpgroups of 64 rows each issue wgmma and do the elementwise work.
//   - query passes (hog_wg_query_kernel): a CTA owns 128 query rows of one head; their Q, dO and ddQ stay in shared
//     memory while the key tiles of 64 (K, V, ddK, ddV) stream through two stages. S = Q K^T, ddS / s = ddQ K^T +
//     Q ddK^T, dP = dO V^T and X = dO ddV^T by m64n64k16 (the key tiles K-major B operands; the row tiles A operands,
//     held in registers where they fit: load_fragments). kDd, kB and
//     kBoth sum their rows; kOut adds dQ' / s += dS ddK + dS' K and ddO += P ddV + ddP V, with P, dS / s, dS' / s
//     and ddP rounded to T as A fragments from registers and the key tiles as MN-major B operands.
//   - the key pass (hog_wg_key_kernel): a CTA owns 128 keys of one kv head; their K, V, ddK and ddV stay while the
//     query tiles of 64 of every query head of the group (Q, dO, ddQ, and the rows' L, D, dd, b, written into
//     shared memory by the producer's second warp) stream through two stages: the same four tiles transposed,
//     then dK' / s += dS^T ddQ + dS'^T Q and dV' += ddP^T dO.
// Head dim 64 only: kOut and the key pass hold four 64 x 64 fp32 tiles (128 registers a thread) and two 64 x d
// accumulators (64 at d = 64, 128 at d = 128) beside each other, within the consumers' 240 registers at d = 64 only;
// d = 128 runs hog_kernels.cuh's mma.sync passes. Each output is written once by one CTA: no atomics, deterministic.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <type_traits>

#include "kernels/cuda/fa2_backward.cuh"  // lse_log2
#include "kernels/cuda/fa3_forward.cuh"
#include "kernels/cuda/hog_kernels.cuh"  // HogPass

namespace fc::kernels::cuda::hog_wg {

using namespace fa3;

constexpr int kTileRows = kGroupRows;  // rows of every tile: a warpgroup's queries or keys, a streamed step
constexpr int kStages = 2;
constexpr int kFragSteps = kTileRows / 16;  // k16 steps of the output products over a step's 64 keys (or rows)

// One operand tile in shared memory: 64 rows x D, D / 64 boxes of kQBox (128-byte swizzle).
template <class T, int D>
constexpr unsigned kTileBytes = Tiles<T, D>::kQBytes;

template <class T, int D>
constexpr std::size_t query_smem_bytes() {
  return (3 * kConsumers + 4 * kStages) * kTileBytes<T, D> + 1024;  // Q, dO, ddQ of both groups; K, V, ddK, ddV per stage
}
template <class T, int D>
constexpr std::size_t key_smem_bytes() {
  return (4 * kConsumers + 3 * kStages) * kTileBytes<T, D> + 1024;  // K, V, ddK, ddV of both groups; Q, dO, ddQ per stage
}

// d (+)= A B^T over d for two 64-row tiles in shared memory, both K-major: m64n64k16, D / 16 steps. accumulate false
// overwrites d with the first step. The caller fences and commits.
template <class T, int D>
__device__ inline void mma_rows(float (&d)[8][4], const unsigned char* a_tile, const unsigned char* b_tile, bool accumulate) {
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    const std::uint64_t a = wgmma_descriptor_advance(wgmma_descriptor_sw128(a_tile + (k / 4) * kQBox), k % 4);
    const std::uint64_t b = wgmma_descriptor_advance(wgmma_descriptor_sw128(b_tile + (k / 4) * kQBox), k % 4);
    wgmma_m64n64k16_ss<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[32]>(d), a, b, accumulate || k > 0);
  }
}

// d (+)= A B^T over d with A's fragments in registers (load_fragments) and B a 64-row K-major tile in shared memory.
template <class T, int D>
__device__ inline void mma_held(float (&d)[8][4], const std::uint32_t (&a)[D / 16][4], const unsigned char* b_tile, bool accumulate) {
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    const std::uint64_t b = wgmma_descriptor_advance(wgmma_descriptor_sw128(b_tile + (k / 4) * kQBox), k % 4);
    wgmma_m64n64k16_rs_nt<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[32]>(d), a[k], b, accumulate || k > 0);
  }
}

// acc += A B over a step's 64 keys (or rows): A's four k16 fragments from registers, B the 64-row tile read MN-major.
template <class T, int D>
__device__ inline void mma_frags(float (&acc)[D / 8][4], const std::uint32_t (&a)[kFragSteps][4], const unsigned char* b_tile) {
  mma_rs_mn_b<T, D, kFragSteps>(acc, a, wgmma_descriptor_sw128_mn(b_tile, kQBox));
}

// --- the query-tiled passes ------------------------------------------------------------------------------------
// grid (query tiles of 128, last first; heads; batch): cta_tile()
template <class T, int D, HogPass kPass>
__global__ void __launch_bounds__(kWsThreads, 1)
    hog_wg_query_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                        const __grid_constant__ CUtensorMap dout_map, const __grid_constant__ CUtensorMap ddq_map, const __grid_constant__ CUtensorMap ddk_map,
                        const __grid_constant__ CUtensorMap ddv_map, const HogParams p) {
  constexpr unsigned kTile = kTileBytes<T, D>;
  constexpr bool kNeedsDp = kPass != HogPass::kDd;  // the dd pass needs S and ddS only: neither dO nor V, ddV
  constexpr bool kOut = kPass == HogPass::kOut;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sRows = aligned_smem(smem_raw);          // group g's Q, dO, ddQ at + (3 g + i) kTile
  unsigned char* sKeys = sRows + 3 * kConsumers * kTile;  // stage e's K, V, ddK, ddV at + (4 e + i) kTile
  __shared__ alignas(8) std::uint64_t rows_full, keys_full[kStages], keys_empty[kStages];

  const AttentionShapeParams& s = p.shape;
  const CtaTile cta = cta_tile();
  const int h = cta.h, b = cta.b, hk = h / (s.heads_q / s.heads_kv), m0 = cta.m_tile * kCtaRows;
  const bool causal = s.mask != CausalMask::none;
  const int offset = s.causal_offset();
  const int last_row = min(m0 + kCtaRows, s.seq_q) - 1;
  const int key_end = causal ? max(0, min(s.seq_k, last_row + offset + 1)) : s.seq_k;
  const int n_tiles = (key_end + kTileRows - 1) / kTileRows;
  constexpr unsigned kReleasers = 4 * kConsumers;  // one arrival per consumer warp
  if (threadIdx.x == 0) {
    mbarrier_init(&rows_full, 1);
    for (int i = 0; i < kStages; ++i) mbarrier_init(&keys_full[i], 1), mbarrier_init(&keys_empty[i], kReleasers);
    mbarrier_init_fence();
  }
  __syncthreads();

  if (threadIdx.x >= kConsumerThreads) {
    setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x == kConsumerThreads) {
      mbarrier_arrive_expect_tx(&rows_full, kConsumers * (kNeedsDp ? 3 : 2) * kTile);
      for (int g = 0; g < kConsumers; ++g) {
        unsigned char* rows = sRows + 3 * g * kTile;
        load_rows64<T, D>(rows, &q_map, &rows_full, m0 + g * kGroupRows, h, b);
        if (kNeedsDp) load_rows64<T, D>(rows + kTile, &dout_map, &rows_full, m0 + g * kGroupRows, h, b);
        load_rows64<T, D>(rows + 2 * kTile, &ddq_map, &rows_full, m0 + g * kGroupRows, h, b);
      }
      for (int j = 0; j < n_tiles; ++j) {
        const int stage = j % kStages;
        unsigned char* keys = sKeys + 4 * stage * kTile;
        if (j >= kStages) mbarrier_wait(&keys_empty[stage], ((j / kStages) - 1) & 1);
        mbarrier_arrive_expect_tx(&keys_full[stage], (kNeedsDp ? 4 : 2) * kTile);
        load_rows64<T, D>(keys, &k_map, &keys_full[stage], j * kTileRows, hk, b);
        if (kNeedsDp) load_rows64<T, D>(keys + kTile, &v_map, &keys_full[stage], j * kTileRows, hk, b);
        load_rows64<T, D>(keys + 2 * kTile, &ddk_map, &keys_full[stage], j * kTileRows, hk, b);
        if (kNeedsDp) load_rows64<T, D>(keys + 3 * kTile, &ddv_map, &keys_full[stage], j * kTileRows, hk, b);
      }
    }
    return;
  }

  setmaxnreg_inc<kConsumerRegisters>();
  const int group = warp_uniform(threadIdx.x / 128);
  const bool releaser = threadIdx.x % 32 == 0;
  const GroupThread th(m0 + group * kGroupRows, threadIdx.x % 128);
  const unsigned char* sQ = sRows + 3 * group * kTile;
  const unsigned char* sG = sQ + kTile;  // dO
  const unsigned char* sDq = sG + kTile;
  const float scale2 = s.scale * fa3::kLog2e, sc = s.scale;
  const std::int64_t stat_row0 = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q;
  float l2[2], dD[2], ddr[2], br[2];  // this thread's rows th.row0 and th.row0 + 8: L (log2 units; +inf past Nq: P = 0), D, dd, b
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = th.row0 + 8 * r;
    const bool inside = row < s.seq_q;
    l2[r] = inside ? lse_log2(p.lse[stat_row0 + row]) : INFINITY;
    dD[r] = inside ? p.delta[stat_row0 + row] : 0.f;
    ddr[r] = inside && (kPass == HogPass::kB || kOut) ? p.dd[stat_row0 + row] : 0.f;
    br[r] = inside && kOut ? p.b[stat_row0 + row] : 0.f;
  }
  float sum_a[2] = {0.f, 0.f}, sum_b[2] = {0.f, 0.f}, sum_c[2] = {0.f, 0.f};  // the pass's row sums
  float acc_q[D / 8][4], acc_o[D / 8][4];                                       // kOut: dQ' / s and ddO
  if constexpr (kOut) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) acc_q[i][0] = acc_q[i][1] = acc_q[i][2] = acc_q[i][3] = acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.f;
  }

  mbarrier_wait(&rows_full, 0);
  // Q (read by two of the products) held as register A fragments, 16 registers at d = 64, and in the statistics
  // passes dO and ddQ as well: those products then read only the key tiles from shared memory. (m64n64k16 with both
  // operands from shared memory reads 4 KiB per 32 tensor-core cycles, the SM's 128 bytes a cycle of shared memory
  // bandwidth.) kOut keeps dO and ddQ in shared memory: beside its accumulators, dO's fragments spilled 48 bytes.
  constexpr bool kHeld = !kOut;
  std::uint32_t qa[D / 16][4], ga[kHeld && kNeedsDp ? D / 16 : 1][4], da[kHeld ? D / 16 : 1][4];
  {
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    load_fragments<D>(qa, sQ, warp, lane);
    if constexpr (kHeld && kNeedsDp) load_fragments<D>(ga, sG, warp, lane);
    if constexpr (kHeld) load_fragments<D>(da, sDq, warp, lane);
  }
  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j % kStages, col0 = j * kTileRows;
    const unsigned char* sK = sKeys + 4 * stage * kTile;
    const unsigned char* sV = sK + kTile;
    const unsigned char* sDk = sK + 2 * kTile;
    const unsigned char* sDv = sK + 3 * kTile;
    mbarrier_wait(&keys_full[stage], (j / kStages) & 1);
    // Two commit groups, completing in order: S and ddS / s, then dP and X (P is computed while they run).
    float sv[8][4], dds[8][4], dp[8][4], x[8][4];
    wgmma_fence();
    mma_held<T, D>(sv, qa, sK, false);
    if constexpr (kHeld) {
      mma_held<T, D>(dds, da, sK, false);
    } else {
      mma_rows<T, D>(dds, sDq, sK, false);
    }
    mma_held<T, D>(dds, qa, sDk, true);
    wgmma_commit();
    if constexpr (kNeedsDp) {
      if constexpr (kHeld) {
        mma_held<T, D>(dp, ga, sV, false);
        mma_held<T, D>(x, ga, sDv, false);
      } else {
        mma_rows<T, D>(dp, sG, sV, false);
        mma_rows<T, D>(x, sG, sDv, false);
      }
      wgmma_commit();
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    // P where visible; a tile that crosses Nk or the diagonal for some row of this warp tests every element, in a
    // copy of the loop of its own (one loop with the test under `masked` computed it for every element: 120 of the
    // step's 870 instructions, with the selects).
    const auto p_tile = [&](auto masked_tag) {
      // (masked) column col0 + 8 nb + 2 t + (c & 1) is visible from row r iff 8 nb + (c & 1) <= last[r]: one compare
      // with a constant an element
      int last[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) last[r] = (causal ? min(s.seq_k - 1, th.row0 + 8 * r + offset) : s.seq_k - 1) - col0 - 2 * th.t;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float e = fast_exp2(fmaf(sv[nb][c], scale2, -l2[c / 2]));  // (before the select: no branch per element)
          if constexpr (decltype(masked_tag)::value) {
            sv[nb][c] = nb * 8 + c % 2 <= last[c / 2] ? e : 0.f;
          } else {
            sv[nb][c] = e;
          }
        }
      }
    };
    if (col0 + kTileRows > s.seq_k || (causal && col0 + kTileRows - 1 > th.warp_row0 + offset)) {
      p_tile(std::true_type{});
    } else {
      p_tile(std::false_type{});
    }
    if constexpr (kNeedsDp) wgmma_wait<0>();
    if constexpr (!kOut) {  // the key tiles are read: release the stage before the row sums
      if (releaser) mbarrier_arrive(&keys_empty[stage]);
    }
    // The elementwise formulas (cpu.hog's order), fp32; in kOut the four A operands are formed in place:
    // sv <- P, dp <- dS / s, dds <- ddP, x <- dS' / s.
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c / 2;
        const float pv = sv[nb][c], ds2 = dds[nb][c] * sc;
        if constexpr (kPass == HogPass::kDd) {
          sum_a[r] += ds2 * pv;
        } else if constexpr (kPass == HogPass::kBoth) {
          sum_a[r] += ds2 * pv;
          sum_b[r] += pv * x[nb][c];
          sum_c[r] += pv * dp[nb][c] * ds2;
        } else {
          const float d = dp[nb][c];
          const float dpp = x[nb][c] - d * ddr[r] - ds2 * dD[r] + d * ds2;
          if constexpr (kPass == HogPass::kB) {
            sum_a[r] += dpp * pv;
          } else {
            dp[nb][c] = pv * (d - dD[r]);
            dds[nb][c] = pv * (ds2 - ddr[r]);
            x[nb][c] = pv * (dpp - br[r]);
          }
        }
      }
    }
    if constexpr (kOut) {
      // dQ' / s += dS ddK + dS' K;  ddO += P ddV + ddP V  (the key tiles MN-major)
      std::uint32_t a_p[kFragSteps][4], a_ds[kFragSteps][4], a_dsp[kFragSteps][4], a_ddp[kFragSteps][4];
      a_fragments<T>(a_p, sv);
      a_fragments<T>(a_ds, dp);
      a_fragments<T>(a_dsp, x);
      a_fragments<T>(a_ddp, dds);
      wgmma_fence();
      mma_frags<T, D>(acc_q, a_ds, sDk);
      mma_frags<T, D>(acc_q, a_dsp, sK);
      mma_frags<T, D>(acc_o, a_p, sDv);
      mma_frags<T, D>(acc_o, a_ddp, sV);
      wgmma_commit();
      wgmma_wait<0>();
      if (releaser) mbarrier_arrive(&keys_empty[stage]);
    }
  }

  if constexpr (!kOut) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float a = quad_sum(sum_a[r]), bb = quad_sum(sum_b[r]), cc = quad_sum(sum_c[r]);
      const int row = th.row0 + 8 * r;
      if (th.t != 0 || row >= s.seq_q) continue;
      if constexpr (kPass == HogPass::kDd) {
        p.dd[stat_row0 + row] = a;
      } else if constexpr (kPass == HogPass::kB) {
        p.b[stat_row0 + row] = a;
      } else {
        p.dd[stat_row0 + row] = a;
        p.b[stat_row0 + row] = bb + cc - 2.f * dD[r] * a;  // b = r1 + r3 - 2 D dd
      }
    }
  } else {
    T* dq2 = static_cast<T*>(p.dq2.data) + b * p.dq2.batch + h * p.dq2.head;
    T* ddo = static_cast<T*>(p.ddo.data) + b * p.ddo.batch + h * p.ddo.head;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = th.row0 + 8 * r;
      if (row >= s.seq_q) continue;
      const std::uint64_t index0 = static_cast<std::uint64_t>(stat_row0 + row) * D;
#pragma unroll
      for (int db = 0; db < D / 8; ++db) {
        const int col = db * 8 + 2 * th.t;
        store_pair<T>(dq2 + row * p.dq2.row + col, sc * acc_q[db][2 * r], sc * acc_q[db][2 * r + 1], p.rounding, p.grad_stream, index0 + col);
        store_pair<T>(ddo + row * p.ddo.row + col, acc_o[db][2 * r], acc_o[db][2 * r + 1], p.rounding, p.grad_stream, index0 + col);
      }
    }
  }
}

// --- the key-tiled pass ----------------------------------------------------------------------------------------
// grid (key tiles of 128, kv heads, batch)
template <class T, int D>
__global__ void __launch_bounds__(kWsThreads, 1)
    hog_wg_key_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                      const __grid_constant__ CUtensorMap dout_map, const __grid_constant__ CUtensorMap ddq_map, const __grid_constant__ CUtensorMap ddk_map,
                      const __grid_constant__ CUtensorMap ddv_map, const HogParams p) {
  constexpr unsigned kTile = kTileBytes<T, D>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sKeys = aligned_smem(smem_raw);          // group g's K, V, ddK, ddV at + (4 g + i) kTile
  unsigned char* sRows = sKeys + 4 * kConsumers * kTile;  // stage e's Q, dO, ddQ at + (3 e + i) kTile
  __shared__ alignas(8) std::uint64_t keys_full, rows_full[kStages], rows_empty[kStages];
  // Each stage's rows' L (log2 units; +inf past Nq, so P = 0), D, dd and b, written by the producer's second warp
  // (the consumers read them per element; from global memory they were half of fa3's backward's stall samples).
  __shared__ alignas(16) float stat_l2[kStages][kTileRows], stat_d[kStages][kTileRows], stat_dd[kStages][kTileRows], stat_b[kStages][kTileRows];

  const AttentionShapeParams& s = p.shape;
  const int k0 = blockIdx.x * kCtaRows, hk = blockIdx.y, b = blockIdx.z, group_size = s.heads_q / s.heads_kv;
  const bool causal = s.mask != CausalMask::none;
  const int offset = s.causal_offset();
  const RowTileWalk walk = row_tiles_seeing(s, k0, kTileRows);
  const int first_tile = walk.first_tile, per_head = walk.per_head, steps = walk.steps;
  if (threadIdx.x == 0) {
    mbarrier_init(&keys_full, 1);
    // rows_full: the copying thread's arrival (with the tiles' bytes) and the 32 of the warp writing the statistics
    for (int i = 0; i < kStages; ++i) mbarrier_init(&rows_full[i], 1 + 32), mbarrier_init(&rows_empty[i], kConsumerThreads);
    mbarrier_init_fence();
  }
  __syncthreads();

  if (threadIdx.x >= kConsumerThreads) {
    setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x == kConsumerThreads) {
      mbarrier_arrive_expect_tx(&keys_full, 4 * kConsumers * kTile);
      for (int g = 0; g < kConsumers; ++g) {
        unsigned char* keys = sKeys + 4 * g * kTile;
        const int key0 = k0 + g * kGroupRows;
        load_rows64<T, D>(keys, &k_map, &keys_full, key0, hk, b);
        load_rows64<T, D>(keys + kTile, &v_map, &keys_full, key0, hk, b);
        load_rows64<T, D>(keys + 2 * kTile, &ddk_map, &keys_full, key0, hk, b);
        load_rows64<T, D>(keys + 3 * kTile, &ddv_map, &keys_full, key0, hk, b);
      }
      for (int e = 0; e < steps; ++e) {
        const int stage = e % kStages, h = hk * group_size + e / per_head, row0 = (first_tile + e % per_head) * kTileRows;
        unsigned char* rows = sRows + 3 * stage * kTile;
        if (e >= kStages) mbarrier_wait(&rows_empty[stage], ((e / kStages) - 1) & 1);
        mbarrier_arrive_expect_tx(&rows_full[stage], 3 * kTile);
        load_rows64<T, D>(rows, &q_map, &rows_full[stage], row0, h, b);
        load_rows64<T, D>(rows + kTile, &dout_map, &rows_full[stage], row0, h, b);
        load_rows64<T, D>(rows + 2 * kTile, &ddq_map, &rows_full[stage], row0, h, b);
      }
    } else if (threadIdx.x / 32 == kConsumerThreads / 32 + 1) {  // the producer's second warp: the rows' statistics
      const int lane = threadIdx.x % 32;
      for (int e = 0; e < steps; ++e) {
        const int stage = e % kStages, h = hk * group_size + e / per_head, row0 = (first_tile + e % per_head) * kTileRows;
        const std::int64_t stat_row0 = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q;
        if (e >= kStages) mbarrier_wait(&rows_empty[stage], ((e / kStages) - 1) & 1);
        for (int i = lane; i < kTileRows; i += 32) {
          const int row = row0 + i;
          const bool inside = row < s.seq_q;
          stat_l2[stage][i] = inside ? lse_log2(p.lse[stat_row0 + row]) : INFINITY;
          stat_d[stage][i] = inside ? p.delta[stat_row0 + row] : 0.f;
          stat_dd[stage][i] = inside ? p.dd[stat_row0 + row] : 0.f;
          stat_b[stage][i] = inside ? p.b[stat_row0 + row] : 0.f;
        }
        mbarrier_arrive(&rows_full[stage]);  // (release: the consumers' wait on rows_full sees these writes)
      }
    }
    return;
  }

  setmaxnreg_inc<kConsumerRegisters>();
  const int group = warp_uniform(threadIdx.x / 128), warp = warp_uniform((threadIdx.x % 128) / 32);
  const int lane = threadIdx.x % 32, t = lane % 4;
  const int key_row0 = k0 + group * kGroupRows + 16 * warp + lane / 4;  // this thread's keys: key_row0, key_row0 + 8
  const int warp_key_last = k0 + group * kGroupRows + 16 * warp + 15;
  const unsigned char* sK = sKeys + 4 * group * kTile;
  const unsigned char* sV = sK + kTile;
  const unsigned char* sDk = sK + 2 * kTile;
  const unsigned char* sDv = sK + 3 * kTile;
  const float scale2 = s.scale * fa3::kLog2e, sc = s.scale;
  float acc_k[D / 8][4], acc_v[D / 8][4];  // dK' / s, dV'
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc_k[i][0] = acc_k[i][1] = acc_k[i][2] = acc_k[i][3] = acc_v[i][0] = acc_v[i][1] = acc_v[i][2] = acc_v[i][3] = 0.f;

  mbarrier_wait(&keys_full, 0);
  // K, read by two of the five products, held as register A fragments (16 registers at d = 64; V, ddK and ddV as well
  // would not fit beside the accumulators): those two read only the row tiles from shared memory.
  std::uint32_t ka[D / 16][4];
  load_fragments<D>(ka, sK, warp, lane);
  for (int e = 0; e < steps; ++e) {
    const int stage = e % kStages, q0 = (first_tile + e % per_head) * kTileRows;
    const unsigned char* sQ = sRows + 3 * stage * kTile;
    const unsigned char* sG = sQ + kTile;  // dO
    const unsigned char* sDq = sQ + 2 * kTile;
    mbarrier_wait(&rows_full[stage], (e / kStages) & 1);
    // Transposed tiles, rows = this group's 64 keys, columns = the step's 64 queries: S^T = K Q^T,
    // ddS^T / s = K ddQ^T + ddK Q^T | dP^T = V dO^T, X^T = ddV dO^T (two commit groups; P^T while the second runs).
    float sv[8][4], dds[8][4], dp[8][4], x[8][4];
    wgmma_fence();
    mma_held<T, D>(sv, ka, sQ, false);
    mma_held<T, D>(dds, ka, sDq, false);
    mma_rows<T, D>(dds, sDk, sQ, true);
    wgmma_commit();
    mma_rows<T, D>(dp, sV, sG, false);
    mma_rows<T, D>(x, sDv, sG, false);
    wgmma_commit();
    // A step that crosses Nk or the diagonal for some key of this warp tests every element (queries past Nq need no
    // test: their L is +inf).
    // (the masked and unmasked loops are separate copies, as in the query passes)
    const auto p_tile = [&](auto masked_tag) {
      // (masked) query q0 + 8 nb + 2 t + (c & 1) sees key r iff 8 nb + (c & 1) >= first[r]: one compare with a
      // constant an element (keys past Nk see nothing)
      int first[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = key_row0 + 8 * r;
        first[r] = key >= s.seq_k ? INT_MAX : causal ? key - offset - q0 - 2 * t : INT_MIN;
      }
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int qi = nb * 8 + 2 * t + c % 2;
          const float e2 = fast_exp2(fmaf(sv[nb][c], scale2, -stat_l2[stage][qi]));
          if constexpr (decltype(masked_tag)::value) {
            sv[nb][c] = nb * 8 + c % 2 >= first[c / 2] ? e2 : 0.f;
          } else {
            sv[nb][c] = e2;
          }
        }
      }
    };
    const bool masked = warp_key_last >= s.seq_k || (causal && warp_key_last > q0 + offset);
    wgmma_wait<1>();
    if (masked) {
      p_tile(std::true_type{});
    } else {
      p_tile(std::false_type{});
    }
    wgmma_wait<0>();
    // dS^T / s, dS'^T / s, ddP^T into dp, x, dds (cpu.hog's formulas, per (key, row) element)
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int qi = nb * 8 + 2 * t + c % 2;
        const float pv = sv[nb][c], ds2 = dds[nb][c] * sc, d = dp[nb][c];
        const float dd = stat_dd[stage][qi], dD = stat_d[stage][qi];
        const float dpp = x[nb][c] - d * dd - ds2 * dD + d * ds2;
        dp[nb][c] = pv * (d - dD);
        x[nb][c] = pv * (dpp - stat_b[stage][qi]);
        dds[nb][c] = pv * (ds2 - dd);
      }
    }
    // dK' / s += dS^T ddQ + dS'^T Q;  dV' += ddP^T dO  (the row tiles MN-major)
    std::uint32_t a_ds[kFragSteps][4], a_dsp[kFragSteps][4], a_ddp[kFragSteps][4];
    a_fragments<T>(a_ds, dp);
    a_fragments<T>(a_dsp, x);
    a_fragments<T>(a_ddp, dds);
    wgmma_fence();
    mma_frags<T, D>(acc_k, a_ds, sDq);
    mma_frags<T, D>(acc_k, a_dsp, sQ);
    mma_frags<T, D>(acc_v, a_ddp, sG);
    wgmma_commit();
    wgmma_wait<0>();
    // Every consumer thread releases the stage: each read the stage's statistics, which the producer's second warp
    // rewrites after the release (fa3_backward.cu: racecheck wants each reader's own arrival).
    mbarrier_arrive(&rows_empty[stage]);
  }

  T* dk2 = static_cast<T*>(p.dk2.data) + b * p.dk2.batch + hk * p.dk2.head;
  T* dv2 = static_cast<T*>(p.dv2.data) + b * p.dv2.batch + hk * p.dv2.head;
  const std::uint64_t kv_row0 = (static_cast<std::uint64_t>(b) * s.heads_kv + hk) * s.seq_k;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_row0 + 8 * r;
    if (key >= s.seq_k) continue;
    const std::uint64_t index0 = (kv_row0 + key) * D;
#pragma unroll
    for (int db = 0; db < D / 8; ++db) {
      const int col = db * 8 + 2 * t;
      store_pair<T>(dk2 + key * p.dk2.row + col, sc * acc_k[db][2 * r], sc * acc_k[db][2 * r + 1], p.rounding, p.grad_stream, index0 + col);
      store_pair<T>(dv2 + key * p.dv2.row + col, acc_v[db][2 * r], acc_v[db][2 * r + 1], p.rounding, p.grad_stream, index0 + col);
    }
  }
}

}  // namespace fc::kernels::cuda::hog_wg
