// cuda.fa3's backward on Hopper's wgmma and TMA (kernels/cuda/NOTES.md, plan step 5; EQUATIONS.md section 2).
// Both forms start with D = rowsum(dO o O) (fa2's delta kernel) and share the key-tiled pass: a key tile of 128 keys
// (two consumer warpgroups of 64; a CTA per tile, or with bwd_grid fewer CTAs walking the tiles) walks every query
// tile of 64 rows of every query head of its kv group (GQA summed in registers): S^T = K Q^T and dP^T = V dO^T by
// wgmma m64n64k16 from shared memory (all four K-major), P^T = exp2(s S^T - L) and dS^T = P^T o (dP^T - D) in registers, both rounded to the storage format as A
// fragments, then dV += P^T dO and dK += dS^T Q with dO's and Q's tiles as MN-major B operands (the forward's V form).
//   - fused (p.deterministic false; FA3's default): the same pass adds dQ's partial dS K of every step into an
//     fp32 accumulator by TMA reductions (dS through shared memory, below), then a kernel scales and rounds it.
//     Five products per tile, as counted; the order of dQ's fp32 additions varies from run to run.
//   - two passes (p.deterministic; no atomics, the same bits every run): a query-tiled dQ pass after it, where a CTA
//     owns 128 query rows (two warpgroups of 64) and walks the key tiles of 128: S = Q K^T and dP = dO V^T by
//     m64n128k16, dS as above, dQ += dS K with K's tile as the MN-major B. Seven products per tile (S and dP twice).
// The rounding points are cpu.fa3's (P and dS rounded to the storage format before their products; dK and dQ
// scaled by s at the end), so the CPU twin grades either. A producer warpgroup (setmaxnreg 24) issues every copy,
// and in the key-tiled pass its second warp writes each stage's L and D into shared memory. The key-tiled pass
// overlaps each step's elementwise work with its own products (commit groups, below), not yet the two warpgroups'
// products with each other (the forward's ping-pong); the dQ pass waits for each product.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/fa3_forward.cuh"
#include "kernels/cuda/fa3_kernels.hpp"
#include "kernels/cuda/hopper/grid_dependence.cuh"
#include "kernels/cuda/hopper/tensor_map.hpp"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/key_tile_order.hpp"

namespace fc::kernels::cuda {
namespace {

using namespace fa3;

constexpr int kBwdStages = 2;
constexpr int kQueryRows = 64;  // the dK/dV pass's query tile

// The log2-unit L and D of row `row` of head `stat_row0` (rows past Nq or without a visible key: L = +inf, so P = 0).
__device__ inline float row_l2(const BackwardParams& p, std::int64_t stat_row0, int row) {
  if (row >= p.shape.seq_q) return INFINITY;
  const float l = p.lse[stat_row0 + row];
  return l == -INFINITY ? INFINITY : l * fa3::kLog2e;
}
__device__ inline float row_d(const BackwardParams& p, std::int64_t stat_row0, int row) { return row >= p.shape.seq_q ? 0.f : p.delta[stat_row0 + row]; }
struct RowStat {
  float l2, dd;
};
// (not written as {row_l2, row_d}: that changes the dQ pass's SASS, and this is the code the GPU runs measured)
__device__ inline RowStat row_stat(const BackwardParams& p, std::int64_t stat_row0, int row) {
  if (row >= p.shape.seq_q) return {INFINITY, 0.f};
  const float l = p.lse[stat_row0 + row];
  return {l == -INFINITY ? INFINITY : l * fa3::kLog2e, p.delta[stat_row0 + row]};
}

// --- the dK/dV pass, and the fused backward -------------------------------------------------------------------
// Fused (FusedDq), the same pass also adds each step's dQ partial dS K into the fp32 accumulator p.dq_accum:
// dS^T, already rounded to T as the A fragments of dK's product, is written to a 128-byte swizzled tile
// [key][query] of the CTA's 128 keys (kDsBytes, two buffers by step parity), which is dS as an MN-major A
// operand; K's tiles are the MN-major B. At d = 128 warpgroup g computes dQ's columns 64 g .. 64 g + 63 over all
// 128 keys (both halves of dS^T), at d = 64 all 64 columns over its own 64 keys (each group adds its own partial;
// the buffers' hand-over is the same at both d, more than d = 64 needs). The partials go to p.dq_accum by TMA
// tensor reductions from shared memory (reduce_dq).
constexpr unsigned kDsBytes = kCtaRows * 128;  // 128 keys x 64 16-bit queries
constexpr unsigned kDqStageBytes = kGroupRows * 64 * 4;  // a group's dQ partial, 64 rows x 64 fp32 (reduce_dq)

// dQ's partial dS K of one step: at d = 128 this group's 64 columns of d over all 128 keys, at d = 64 all 64 columns
// over the group's own 64 keys. dS^T's tile is the MN-major A, K's tiles the MN-major B. Issued and committed as one
// group (with its fence); the caller waits for it.
template <class T, int D>
__device__ inline void issue_dq(float (&dq)[8][4], const unsigned char* ds_tile, const unsigned char* sK, int group) {
  constexpr unsigned kGroupBytes = Tiles<T, D>::kQBytes;
  constexpr int kKeySteps = D == 128 ? 8 : 4;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKeySteps; ++kk) {
    const int slab = D == 128 ? kk : 4 * group + kk;  // 16 keys: slab 16 .. of the CTA's 128
    const std::uint64_t a = wgmma_descriptor_advance_mn(wgmma_descriptor_sw128_mn(ds_tile, kQBox), slab);
    const unsigned char* b_tile = sK + (slab / 4) * kGroupBytes + (D == 128 ? group * kQBox : 0);
    wgmma_m64n64k16_ss<Tiles<T, D>::kFp16, true>(reinterpret_cast<float(&)[32]>(dq), a, wgmma_descriptor_advance_mn(wgmma_descriptor_sw128_mn(b_tile, kQBox), slab % 4), kk > 0);
  }
  wgmma_commit();
}

// dQ's partial added into the fp32 accumulator by TMA: the group's 64 query rows x 64 columns staged in `stage` as
// two boxes of 32 columns (the 128-byte swizzle, as dq_map reads them), then one reduction per box, both issued by
// the group's first thread as one bulk group. Two staging buffers a group, alternating: the first thread waits until
// the reduction from this buffer two adds ago has read it, before the group's first barrier. Rows past Nq are
// outside dq_map and skipped. (Atomics from registers before: 8 16-byte vectors a thread, plus the quad shuffles
// that built them; the reductions move full lines.)
template <int D>
__device__ inline void reduce_dq(const float (&dq)[8][4], unsigned char* stage, const CUtensorMap* dq_map, int q0, int h, int b, int group, int warp, int lane) {
  const bool leader = threadIdx.x % 128 == 0;
  if (leader) bulk_wait_read<1>();
  named_barrier_sync(1 + group, 128);
  const int t = lane % 4;
  const std::uint32_t base = smem_address(stage);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 16 * warp + lane / 4 + 8 * r;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const int byte = 4 * ((8 * nb + 2 * t) % 32);
      const std::uint32_t address = base + (nb / 4) * 8192 + row * 128 + ((((byte >> 4) ^ (row & 7)) << 4) | (byte & 15));
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(address), "f"(dq[nb][2 * r]), "f"(dq[nb][2 * r + 1]) : "memory");
    }
  }
  fence_proxy_async_shared();
  named_barrier_sync(1 + group, 128);
  if (leader) {
    const int col0 = D == 128 ? 64 * group : 0;
    tma_reduce_add_4d(dq_map, stage, col0, q0, h, b);
    tma_reduce_add_4d(dq_map, stage + 8192, col0 + 32, q0, h, b);
    bulk_commit();
  }
}

template <class T, int D, bool FusedDq>
constexpr std::size_t dk_dv_smem_bytes() {
  return 2 * kConsumers * Tiles<T, D>::kQBytes + kBwdStages * 2 * Tiles<T, D>::kQBytes + (FusedDq ? 2 * kDsBytes + 2 * kConsumers * kDqStageBytes : 0) + 1024;
}

// dS^T's A fragments (rows: keys key and key + 8 of the CTA's 128; k16 step kk: queries 16 kk + 2 t (+ 1) and
// 16 kk + 8 + 2 t (+ 1), a_from_c's order) into the swizzled tile: row r's 16-byte chunk c sits at chunk c ^ (r % 8),
// TMA's and wgmma's 128-byte swizzle. A warp's 32 four-byte stores of one register hit 32 distinct banks.
__device__ inline void store_ds_tile(unsigned char* tile, const std::uint32_t (&dsa)[4][4], int key, int t) {
  // (st.shared by address: through the generic pointer, whose space ptxas could not prove, these were generic
  // stores on the long scoreboard, and fence.proxy.async waited for them)
  const std::uint32_t base = smem_address(tile) + key * 128;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = key + 8 * (i & 1), byte = 2 * (16 * kk + 8 * (i >> 1) + 2 * t);
      const std::uint32_t address = base + 8 * 128 * (i & 1) + ((((byte >> 4) ^ (row & 7)) << 4) | (byte & 15));
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(address), "r"(dsa[kk][i]) : "memory");
    }
  }
}

// P^T = exp2(s S^T - L) in place on this thread's elements (keys key_row0 and key_row0 + 8, queries q0 + 8 nb + 2 t
// + c). Masked (the warp's pairs cross Nk or the diagonal) tests each key; queries past Nq need no test (their L is
// +inf, so P = 0). Two instantiations, as in the forward's softmax: a runtime test inside the element loop compiled to
// a branch per element.
template <bool Masked>
__device__ inline void p_transposed(float (&st)[8][4], const float (&l2_of)[8][2], float scale2, int q0, int key_row0, int t, int seq_k, bool causal, int offset) {
#pragma unroll
  for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float l2 = l2_of[nb][c];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float& x = st[nb][2 * r + c];
        const float e = fast_exp2(fmaf(x, scale2, -l2));
        if constexpr (Masked) {
          const int key = key_row0 + 8 * r, q = q0 + nb * 8 + 2 * t + c;
          x = key < seq_k && (!causal || key <= q + offset) ? e : 0.f;
        } else {
          x = e;
        }
      }
    }
  }
}

// The group's first thread, after its last dQ reduction of the tile: waits until every bulk group it committed but
// the last `Pending` is complete (with the dK/dV stores committed after the reductions, 1: the reductions' writes are
// done, the stores' may not be), then (dq_ready given) counts the group in: dQ's conversion counts the groups of
// every key tile.
template <int Pending>
__device__ inline void dq_partials_in(const BackwardParams& p, int b, int hk) {
  bulk_wait<Pending>();
  if (p.dq_ready != nullptr) hopper::count_release_after_async_writes(p.dq_ready + static_cast<std::int64_t>(b) * p.shape.heads_kv + hk);
}

// dK (factor s) or dV (factor 1) of the thread's two keys as 16-bit words in a_fragments' order, rounded by the policy:
// the words store_pair would store (index0: the logical index of element 0 of the thread's first key). The policy's
// test is outside the loop (Stochastic): inside it, each pair's nearest path branched over its own Philox code, and
// that straight-line code, run once a CTA, was fetched line by line (NOTES, version 14).
template <class T, int D, bool Stochastic>
__device__ inline void gradient_words(std::uint32_t (&words)[D / 16][4], const float (&acc)[D / 8][4], float factor, const OutputRounding& rounding, std::uint32_t stream,
                                      std::uint64_t index0, int t) {
#pragma unroll
  for (int nb = 0; nb < D / 8; ++nb) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float a = factor * acc[nb][2 * r], b = factor * acc[nb][2 * r + 1];
      if constexpr (Stochastic) {  // (pack_pair's own test stays: pack_pair_stochastic here let ptxas interleave the 64 pairs' Philox rounds, 120 -> 370-450 bytes of spills)
        words[nb / 2][2 * (nb % 2) + r] = pack_pair<T>(a, b, rounding, stream, index0 + 8 * r * D + nb * 8 + 2 * t);
      } else {
        words[nb / 2][2 * (nb % 2) + r] = Storage<T>::pack(a, b);
      }
    }
  }
}

// fn(std::true_type{}) where the policy rounds stochastically, fn(std::false_type{}) otherwise: the epilogue's test of
// the policy, outside gradient_words' pair loop.
template <class Fn>
__device__ inline void with_rounding_policy(const OutputRounding& rounding, Fn&& fn) {
  if (rounding.stochastic) {
    fn(std::true_type{});
  } else {
    fn(std::false_type{});
  }
}

// The same words stored by 4-byte global stores into the rows of out (key_row0 and key_row0 + 8 of the tile's
// [Nk, D] rows, those past Nk skipped).
template <class T, int D, bool Stochastic>
__device__ inline void store_gradient_rows(T* out, std::int64_t row_stride, const float (&acc)[D / 8][4], float factor, const OutputRounding& rounding, std::uint32_t stream,
                                           std::uint64_t kv_row0, int key_row0, int seq_k, int t) {
  std::uint32_t words[D / 16][4];
  gradient_words<T, D, Stochastic>(words, acc, factor, rounding, stream, (kv_row0 + key_row0) * D, t);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_row0 + 8 * r;
    if (key >= seq_k) continue;
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) *reinterpret_cast<std::uint32_t*>(out + key * row_stride + nb * 8 + 2 * t) = words[nb / 2][2 * (nb % 2) + r];
  }
}

// The key-tiled pass. A CTA walks the tiles blockIdx.x, blockIdx.x + gridDim.x, ...: one each with a grid of one CTA
// per tile; with a persistent grid (a CTA per SM, p.key_pass_ctas) each CTA walks about tiles / SMs. The next tile's K
// and V load once this tile's K and V buffers are free (kv_empty): with dK and dV by stores, while this tile's epilogue
// runs (the dQ reductions' completion, the stores); by TMA (the default), once the stores have read dK and dV staged
// in those buffers, at the epilogue's end. The producer issues the next tile's Q and dO after that K/V load, not before.
// Measured with the stores (NOTES, version 12): no faster than a CTA per tile without a mask, and slower under causal
// masks, where the static stride hands the long key tiles to the same CTAs. Steps are counted over the CTA's whole
// walk (g below): the Q/dO ring's stages, the dS^T buffers and their barriers' parities run on across tiles.
template <class T, int D, bool FusedDq>
__global__ void __launch_bounds__(kWsThreads, 1) fa3_dk_dv_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                                                                  const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap dout_map,
                                                                  const __grid_constant__ CUtensorMap dq_map, const __grid_constant__ CUtensorMap dk_map,
                                                                  const __grid_constant__ CUtensorMap dv_map, const BackwardParams p) {
  using Tl = Tiles<T, D>;
  constexpr unsigned kGroupBytes = Tl::kQBytes;  // 64 rows x D: a group's K or V, a Q or dO tile
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sK = aligned_smem(smem_raw);           // group g at + g kGroupBytes
  unsigned char* sV = sK + kConsumers * kGroupBytes;
  unsigned char* sQ = sV + kConsumers * kGroupBytes;    // stage e at + e kGroupBytes
  unsigned char* sG = sQ + kBwdStages * kGroupBytes;    // dO
  unsigned char* sDS = sG + kBwdStages * kGroupBytes;   // (FusedDq) buffer i at + i kDsBytes
  unsigned char* sDQ = sDS + 2 * kDsBytes;              // (FusedDq) group g's staging buffer i at + (2 g + i) kDqStageBytes
  // kv_read: every consumer thread arrives once it has read the tile's K and V for the last time (the dK/dV epilogue
  // stages dK in K's buffer, whose halves both groups' dQ products read). kv_empty: the buffers are free for the next
  // tile's load: at the same point with dK and dV by stores; by TMA once the stores have read the staging (each group's
  // issuing thread arrives after its bulk waits, the others after the group's barrier).
  __shared__ alignas(8) std::uint64_t kv_full, kv_read, kv_empty, q_full[kBwdStages], q_empty[kBwdStages];
  __shared__ alignas(8) std::uint64_t ds_full[2], ds_empty[2];  // (FusedDq) dS^T's buffers; every consumer thread arrives
  // Each stage's query rows' L (log2 units; +inf past Nq or where no key is visible, so P = 0) and D, written by the
  // producer's second warp with the Q and dO tiles: loaded by the consumers from global memory per element, they
  // were half of all stall samples (long scoreboard; ncu, H200).
  __shared__ alignas(16) float stat_l2[kBwdStages][kQueryRows], stat_d[kBwdStages][kQueryRows];

  const AttentionShapeParams& s = p.shape;
  const int group_size = s.heads_q / s.heads_kv;
  const bool causal = s.mask != CausalMask::none;
  const int offset = s.causal_offset();
  const int key_tiles = (s.seq_k + kCtaRows - 1) / kCtaRows, tiles = key_tiles * s.heads_kv * s.batch;
  const KeyTileOrder order = key_tile_order(s, kCtaRows, p.key_pass_tail_heads);  // (key_tile_order.hpp)

  if (threadIdx.x == 0) {
    mbarrier_init(&kv_full, 1), mbarrier_init(&kv_read, kConsumerThreads), mbarrier_init(&kv_empty, kConsumerThreads);
    // q_full: the copying thread's arrival (with the tiles' bytes) and the 32 of the warp writing L and D
    for (int i = 0; i < kBwdStages; ++i) mbarrier_init(&q_full[i], 1 + 32), mbarrier_init(&q_empty[i], kConsumerThreads);
    for (int i = 0; i < 2; ++i) mbarrier_init(&ds_full[i], kConsumerThreads), mbarrier_init(&ds_empty[i], kConsumerThreads);
    mbarrier_init_fence();
  }
  if constexpr (FusedDq) {  // buffer 1's zeros: the dS of "step -1" (below; a later tile's first step finds its CTA's last dS instead)
    for (unsigned i = 16 * threadIdx.x; i < kDsBytes; i += 16 * kWsThreads) *reinterpret_cast<uint4*>(sDS + kDsBytes + i) = make_uint4(0, 0, 0, 0);
    fence_proxy_async_shared();
  }
  __syncthreads();
  if constexpr (FusedDq) hopper::grid_launch_dependents();  // (dQ's conversion may take the SMs the last wave leaves idle)

  if (threadIdx.x >= kConsumerThreads) {
    setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x == kConsumerThreads) {
      int g = 0, walked = 0;  // steps and tiles so far
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++walked) {
        const KeyTile at = key_tile_at(tile, order);
        const RowTileWalk walk = row_tiles_seeing(s, at.k0, kQueryRows);
        if (walked > 0) mbarrier_wait(&kv_empty, (walked - 1) & 1);
        mbarrier_arrive_expect_tx(&kv_full, 2 * kConsumers * kGroupBytes);
        for (int grp = 0; grp < kConsumers; ++grp) {
          for (int half = 0; half < Tl::kHalves; ++half) {
            tma_load_4d(sK + grp * kGroupBytes + half * kQBox, &k_map, &kv_full, 64 * half, at.k0 + grp * kGroupRows, at.hk, at.b);
            tma_load_4d(sV + grp * kGroupBytes + half * kQBox, &v_map, &kv_full, 64 * half, at.k0 + grp * kGroupRows, at.hk, at.b);
          }
        }
        for (int e = 0; e < walk.steps; ++e, ++g) {
          const int stage = g % kBwdStages, h = at.hk * group_size + e / walk.per_head, row0 = (walk.first_tile + e % walk.per_head) * kQueryRows;
          if (g >= kBwdStages) mbarrier_wait(&q_empty[stage], ((g / kBwdStages) - 1) & 1);
          mbarrier_arrive_expect_tx(&q_full[stage], 2 * kGroupBytes);
          for (int half = 0; half < Tl::kHalves; ++half) {
            tma_load_4d(sQ + stage * kGroupBytes + half * kQBox, &q_map, &q_full[stage], 64 * half, row0, h, at.b);
            tma_load_4d(sG + stage * kGroupBytes + half * kQBox, &dout_map, &q_full[stage], 64 * half, row0, h, at.b);
          }
        }
      }
    } else if (threadIdx.x / 32 == kConsumerThreads / 32 + 1) {  // the producer's second warp: L and D
      const int lane = threadIdx.x % 32;
      int g = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const KeyTile at = key_tile_at(tile, order);
        const RowTileWalk walk = row_tiles_seeing(s, at.k0, kQueryRows);
        for (int e = 0; e < walk.steps; ++e, ++g) {
          const int stage = g % kBwdStages, h = at.hk * group_size + e / walk.per_head, row0 = (walk.first_tile + e % walk.per_head) * kQueryRows;
          const std::int64_t stat_row0 = (static_cast<std::int64_t>(at.b) * s.heads_q + h) * s.seq_q;
          if (g >= kBwdStages) mbarrier_wait(&q_empty[stage], ((g / kBwdStages) - 1) & 1);
          for (int i = lane; i < kQueryRows; i += 32) stat_l2[stage][i] = row_l2(p, stat_row0, row0 + i), stat_d[stage][i] = row_d(p, stat_row0, row0 + i);
          mbarrier_arrive(&q_full[stage]);  // (release: the consumers' wait on q_full sees these writes)
        }
      }
    }
    return;
  }

  setmaxnreg_inc<kConsumerRegisters>();
  const int group = warp_uniform(threadIdx.x / 128), warp = warp_uniform((threadIdx.x % 128) / 32);
  const int lane = threadIdx.x % 32, t = lane % 4;
  const float scale2 = s.scale * fa3::kLog2e;
  const bool by_tma = !p.dk_dv_by_stores;  // (the launcher sets dk_dv_by_stores where dK's or dV's layout is not TMA's)
  unsigned g = 0;  // steps so far (unsigned: its remainders and halves are the stage and buffer indices and parities)
  int walked = 0;  // tiles so far
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++walked) {
    const KeyTile at = key_tile_at(tile, order);
    const int k0 = at.k0, hk = at.hk, b = at.b;
    const RowTileWalk walk = row_tiles_seeing(s, k0, kQueryRows);
    const int first_tile = walk.first_tile, per_head = walk.per_head, steps = walk.steps;
    const int key_row0 = k0 + group * kGroupRows + 16 * warp + lane / 4;  // this thread's keys: key_row0, key_row0 + 8
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.f;
    int prev_q0 = 0, prev_h = 0;  // (FusedDq) the previous step's query tile and head
    // Step e's query head and tile, hk group_size + e / per_head and first_tile + e % per_head, counted rather than
    // divided (a division by per_head cost about 25 instructions a step)
    int h = hk * group_size, q_tile = first_tile;
    mbarrier_wait(&kv_full, walked & 1);
    for (int e = 0; e < steps; ++e, ++g) {
      const int stage = static_cast<int>(g % kBwdStages), q0 = q_tile * kQueryRows;
      // The group, the stage's and dS^T's buffer offsets broadcast from lane 0 inside the step: the wgmma descriptors
      // are built from them, and inside the tile loop ptxas otherwise hoists those into vector registers, with an
      // R2UR per wgmma (as in the persistent forward; broadcasting g itself left them there).
      const int grp = warp_uniform(group);
      const unsigned char* sKg = sK + grp * kGroupBytes;
      const unsigned char* sVg = sV + grp * kGroupBytes;
      const int stage_offset = warp_uniform(stage * static_cast<int>(kGroupBytes));
      const int ds_this = warp_uniform(static_cast<int>(g % 2 * kDsBytes)), ds_before = warp_uniform(static_cast<int>((g + 1) % 2 * kDsBytes));
      const unsigned char* sQe = sQ + stage_offset;
      const unsigned char* sGe = sG + stage_offset;
      mbarrier_wait(&q_full[stage], (g / kBwdStages) & 1);
      float st[8][4], dpt[8][4];  // S^T and dP^T: rows = this group's 64 keys, columns = the tile's 64 queries
      float dq[8][4];             // (FusedDq) the previous step's dQ partial: 64 queries x 64 columns of d
      // Five products a step, in commit groups that complete in order: S^T | dP^T | dV | (fused: dQ) | dK. P^T is
      // computed while dP^T runs, dS^T while dV runs, and dQ's reductions are issued while dK runs. (dQ is issued after
      // dV is done: P^T's A fragments and dQ's accumulators live at once spill at d = 128.)
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        wgmma_m64n64k16_ss<Tl::kFp16>(reinterpret_cast<float(&)[32]>(st), wgmma_descriptor_advance(wgmma_descriptor_sw128(sKg + (k / 4) * kQBox), k % 4),
                                      wgmma_descriptor_advance(wgmma_descriptor_sw128(sQe + (k / 4) * kQBox), k % 4), k > 0);
      }
      wgmma_commit();
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        wgmma_m64n64k16_ss<Tl::kFp16>(reinterpret_cast<float(&)[32]>(dpt), wgmma_descriptor_advance(wgmma_descriptor_sw128(sVg + (k / 4) * kQBox), k % 4),
                                      wgmma_descriptor_advance(wgmma_descriptor_sw128(sGe + (k / 4) * kQBox), k % 4), k > 0);
      }
      wgmma_commit();
      // P^T and dS^T; a tile that crosses Nq, Nk or the diagonal for some pair of this warp tests every element.
      const int warp_key_last = k0 + group * kGroupRows + 16 * warp + 15;
      const bool masked = warp_key_last >= s.seq_k || (causal && warp_key_last > q0 + offset);
      float l2[8][2];  // L of this thread's 16 queries, read while S^T computes
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const float2 v = *reinterpret_cast<const float2*>(&stat_l2[stage][nb * 8 + 2 * t]);
        l2[nb][0] = v.x, l2[nb][1] = v.y;
      }
      wgmma_wait<1>();
      if (masked) {
        p_transposed<true>(st, l2, scale2, q0, key_row0, t, s.seq_k, causal, offset);
      } else {
        p_transposed<false>(st, l2, scale2, q0, key_row0, t, s.seq_k, causal, offset);
      }
      std::uint32_t pa[4][4], dsa[4][4];  // P^T and dS^T as A fragments: k16 step kk over queries 16 kk ..
      a_fragments<T>(pa, st);
      const std::uint64_t g_desc = wgmma_descriptor_sw128_mn(sGe, kQBox), q_desc = wgmma_descriptor_sw128_mn(sQe, kQBox);
      wgmma_fence();
      mma_rs_mn_b<T, D, 4>(dv, pa, g_desc);  // over the step's 64 queries: P^T's fragments, dO's tile
      wgmma_commit();
      wgmma_wait<1>();  // dP^T
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float dd = stat_d[stage][nb * 8 + 2 * t + c];
#pragma unroll
          for (int r = 0; r < 2; ++r) dpt[nb][2 * r + c] = st[nb][2 * r + c] * (dpt[nb][2 * r + c] - dd);
        }
      }
      a_fragments<T>(dsa, dpt);
      if constexpr (FusedDq) {
        // dS^T(g) to its buffer (once both groups' dQ(g - 2) products have read it), then dQ's partial of the step
        // before, dS(g - 1) K: a step late, so that the groups need not meet at the same point of every step (with a
        // barrier on dS(g) they ran in lockstep: 9 % of the consumers' stall samples, ncu). The slack is less than a
        // step: the ds_empty wait below needs the other group past its step g - 1's dQ product, which also makes the
        // ds_full wait for dS(g - 1) pass at once (it is kept: it states the dependence; the epilogue's can block).
        // Buffer g % 2 was last read by step g - 1's product (at g = 1 the dummy one of step 0, below).
        if (g > 0) mbarrier_wait(&ds_empty[g % 2], ((g - 1) / 2) & 1);
        store_ds_tile(sDS + ds_this, dsa, group * kGroupRows + 16 * warp + lane / 4, t);
        fence_proxy_async_shared();
        mbarrier_arrive(&ds_full[g % 2]);
        wgmma_wait<0>();  // dV (done by now, as a rule): P^T's registers free before dQ's accumulators are live
        // A tile's first step has no previous dS: it multiplies what buffer (g + 1) % 2 holds (the first tile: the
        // zeros written at the start; later ones: the last tile's last dS) and its partial is dropped. The product is
        // issued at every step all the same: one issued under a condition made ptxas serialise every wgmma.
        if (g > 0) mbarrier_wait(&ds_full[(g - 1) % 2], ((g - 1) / 2) & 1);
        issue_dq<T, D>(dq, sDS + ds_before, sK, grp);
      } else {
        wgmma_fence();
      }
      mma_rs_mn_b<T, D, 4>(dk, dsa, q_desc);  // dS^T's fragments, Q's tile
      wgmma_commit();
      if constexpr (FusedDq) {
        wgmma_wait<1>();  // dQ(g - 1) (dK still running)
        mbarrier_arrive(&ds_empty[(g + 1) % 2]);
        if (e > 0) reduce_dq<D>(dq, sDQ + (2 * group + e % 2) * kDqStageBytes, &dq_map, prev_q0, prev_h, b, group, warp, lane);
        prev_q0 = q0, prev_h = h;
      }
      if (++q_tile == first_tile + per_head) q_tile = first_tile, ++h;
      wgmma_wait<0>();
      // Every consumer thread releases the stage: each read the stage's L and D, which the producer's second warp
      // rewrites after the release, and each thread's arrival orders its own reads. (With lane 0 alone arriving after
      // a __syncwarp, racecheck still reported the reads against the rewrite, though it takes that pattern in the
      // persistent forward.)
      mbarrier_arrive(&q_empty[stage]);
    }
    if constexpr (FusedDq) {  // the last step's dQ partial (issued even without steps, on buffer (g + 1) % 2, as above)
      float dq[8][4];
      if (steps > 0) mbarrier_wait(&ds_full[(g - 1) % 2], ((g - 1) / 2) & 1);
      if (p.dq_ready_test_delay_ns != 0 && group == 1) hopper::sleep_ns(p.dq_ready_test_delay_ns);  // (tests only)
      issue_dq<T, D>(dq, sDS + ((g + 1) % 2) * kDsBytes, sK, group);
      wgmma_wait<0>();
      mbarrier_arrive(&kv_read);  // (K's last read: the product above; V's: the last dP^T)
      if (!by_tma) mbarrier_arrive(&kv_empty);
      if (steps > 0) reduce_dq<D>(dq, sDQ + (2 * group + steps % 2) * kDqStageBytes, &dq_map, prev_q0, prev_h, b, group, warp, lane);
    } else {
      mbarrier_arrive(&kv_read);  // (the last step's wgmma_wait<0> above: K's and V's reads are done)
      if (!by_tma) mbarrier_arrive(&kv_empty);
    }
    // dK = s dS^T Q, dV = P^T dO, rounded as the policy says (the gradients' Philox stream, logical [B, Hkv, Nk, D] index)
    const std::uint64_t kv_row0 = (static_cast<std::uint64_t>(b) * s.heads_kv + hk) * s.seq_k;
    const bool leader = threadIdx.x % 128 == 0;
    if (by_tma) {
      // Through shared memory: dV into this group's V tile (read by no other group), dK into its K tile once both
      // groups are done with K, then one TMA store per 64-column box by the group's first thread; rows past Nk are
      // clipped by the maps. (By 4-byte stores from registers, 64 a thread, the epilogue took about 3.4 steps' time of
      // a CTA; NOTES, version 14.)
      std::uint32_t words[D / 16][4];
      unsigned char* k_boxes[D / 64];
      unsigned char* v_boxes[D / 64];
#pragma unroll
      for (int box = 0; box < D / 64; ++box) k_boxes[box] = sK + group * kGroupBytes + box * kQBox, v_boxes[box] = sV + group * kGroupBytes + box * kQBox;
      const std::uint64_t index0 = (kv_row0 + key_row0) * D;
      with_rounding_policy(p.rounding, [&](auto sr) { gradient_words<T, D, decltype(sr)::value>(words, dv, 1.f, p.rounding, p.grad_stream, index0, t); });
      store_p_boxes<D / 16>(v_boxes, words);  // (and the async-proxy fence)
      mbarrier_wait(&kv_read, walked & 1);
      with_rounding_policy(p.rounding, [&](auto sr) { gradient_words<T, D, decltype(sr)::value>(words, dk, s.scale, p.rounding, p.grad_stream, index0, t); });
      store_p_boxes<D / 16>(k_boxes, words);
      named_barrier_sync(1 + group, 128);
      if (leader) {
        const int key0 = k0 + group * kGroupRows;
#pragma unroll
        for (int box = 0; box < D / 64; ++box) tma_store_4d(&dk_map, k_boxes[box], 64 * box, key0, hk, b), tma_store_4d(&dv_map, v_boxes[box], 64 * box, key0, hk, b);
        bulk_commit();
      }
      // (the dQ reductions were committed before the stores: dq_partials_in<1> below waits for them alone)
    } else {
      if (FusedDq && leader) dq_partials_in<0>(p, b, hk);
      T* dk_out = static_cast<T*>(p.dk.data) + b * p.dk.batch + hk * p.dk.head;
      T* dv_out = static_cast<T*>(p.dv.data) + b * p.dv.batch + hk * p.dv.head;
      with_rounding_policy(p.rounding, [&](auto sr) {
        store_gradient_rows<T, D, decltype(sr)::value>(dk_out, p.dk.row, dk, s.scale, p.rounding, p.grad_stream, kv_row0, key_row0, s.seq_k, t);
        store_gradient_rows<T, D, decltype(sr)::value>(dv_out, p.dv.row, dv, 1.f, p.rounding, p.grad_stream, kv_row0, key_row0, s.seq_k, t);
      });
    }
    if (by_tma) {
      if (leader) {
        if constexpr (FusedDq) dq_partials_in<1>(p, b, hk);  // (the reductions complete; the stores, committed last, need not be)
        bulk_wait_read<0>();  // the stores have read the staging: K and V may be refilled, the CTA's shared memory released
      }
      mbarrier_arrive(&kv_empty);  // (the issuing thread after its waits; the others after the group's barrier)
    }
  }
}

// --- the dQ pass ---------------------------------------------------------------------------------------------
template <class T, int D>
constexpr std::size_t dq_smem_bytes() {
  return 2 * kConsumers * Tiles<T, D>::kQBytes + kBwdStages * 2 * Tiles<T, D>::kTileBytes + 1024;
}

template <class T, int D>
__global__ void __launch_bounds__(kWsThreads, 1) fa3_dq_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                                                               const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap dout_map,
                                                               const BackwardParams p) {
  using Tl = Tiles<T, D>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sQ = aligned_smem(smem_raw);           // group g at + g kQBytes
  unsigned char* sG = sQ + kConsumers * Tl::kQBytes;    // dO
  unsigned char* sK = sG + kConsumers * Tl::kQBytes;    // stage e at + e kTileBytes
  unsigned char* sV = sK + kBwdStages * Tl::kTileBytes;
  __shared__ alignas(8) std::uint64_t q_full, k_full[kBwdStages], v_full[kBwdStages], k_empty[kBwdStages], v_empty[kBwdStages];

  const AttentionShapeParams& s = p.shape;
  const CtaTile cta = cta_tile();
  const int h = cta.h, b = cta.b, hk = h / (s.heads_q / s.heads_kv);
  const int n_tiles = key_tiles(s, cta.m_tile * kCtaRows, kCtaRows);
  constexpr unsigned kReleasers = 4 * kConsumers;
  if (threadIdx.x == 0) {
    mbarrier_init(&q_full, 1);
    for (int i = 0; i < kBwdStages; ++i) {
      mbarrier_init(&k_full[i], 1), mbarrier_init(&v_full[i], 1), mbarrier_init(&k_empty[i], kReleasers), mbarrier_init(&v_empty[i], kReleasers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  const auto parity = [](int e) { return static_cast<unsigned>((e / kBwdStages) & 1); };

  if (threadIdx.x >= kConsumerThreads) {
    setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x == kConsumerThreads) {
      mbarrier_arrive_expect_tx(&q_full, 2 * kConsumers * Tl::kQBytes);
      for (int g = 0; g < kConsumers; ++g) {
        for (int half = 0; half < Tl::kHalves; ++half) {
          tma_load_4d(sQ + g * Tl::kQBytes + half * kQBox, &q_map, &q_full, 64 * half, cta.m_tile * kCtaRows + g * kGroupRows, h, b);
          tma_load_4d(sG + g * Tl::kQBytes + half * kQBox, &dout_map, &q_full, 64 * half, cta.m_tile * kCtaRows + g * kGroupRows, h, b);
        }
      }
      for (int j = 0; j < n_tiles; ++j) {
        const int stage = j % kBwdStages;
        const unsigned reuse = ((j / kBwdStages) - 1) & 1;
        if (j >= kBwdStages) mbarrier_wait(&k_empty[stage], reuse);
        mbarrier_arrive_expect_tx(&k_full[stage], Tl::kTileBytes);
        for (int half = 0; half < Tl::kHalves; ++half) tma_load_4d(sK + stage * Tl::kTileBytes + half * kKVBox, &k_map, &k_full[stage], 64 * half, j * kBlockN, hk, b);
        if (j >= kBwdStages) mbarrier_wait(&v_empty[stage], reuse);
        mbarrier_arrive_expect_tx(&v_full[stage], Tl::kTileBytes);
        for (int half = 0; half < Tl::kHalves; ++half) tma_load_4d(sV + stage * Tl::kTileBytes + half * kKVBox, &v_map, &v_full[stage], 64 * half, j * kBlockN, hk, b);
      }
    }
    return;
  }

  setmaxnreg_inc<kConsumerRegisters>();
  const int group = warp_uniform(static_cast<int>(threadIdx.x / 128));  // (on the uniform datapath: hopper::warp_uniform)
  const bool releaser = threadIdx.x % 32 == 0;
  const GroupThread th(cta.m_tile * kCtaRows + group * kGroupRows, threadIdx.x % 128);
  const unsigned char* sQg = sQ + group * Tl::kQBytes;
  const unsigned char* sGg = sG + group * Tl::kQBytes;
  const float scale2 = s.scale * fa3::kLog2e;
  const bool causal = s.mask != CausalMask::none;
  const int offset = s.causal_offset();
  const std::int64_t stat_row0 = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q;
  const RowStat rs[2] = {row_stat(p, stat_row0, th.row0), row_stat(p, stat_row0, th.row0 + 8)};
  float dq[D / 8][4];
#pragma unroll
  for (auto& x : dq) x[0] = x[1] = x[2] = x[3] = 0.f;
  mbarrier_wait(&q_full, 0);
  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j % kBwdStages;
    const unsigned char* sKj = sK + stage * Tl::kTileBytes;
    mbarrier_wait(&k_full[stage], parity(j));
    float sc[16][4], dp[16][4];
    issue_qk<T, D>(sc, sQg, sKj);
    mbarrier_wait(&v_full[stage], parity(j));
    issue_qk<T, D>(dp, sGg, sV + stage * Tl::kTileBytes);  // dP = dO V^T: V's tile K-major as K's
    wgmma_wait<0>();
    if (releaser) mbarrier_arrive(&v_empty[stage]);
    const int col0 = j * kBlockN;
    const bool masked = col0 + kBlockN > s.seq_k || (causal && col0 + kBlockN - 1 > th.warp_row0 + offset);
#pragma unroll
    for (int nb = 0; nb < 16; ++nb) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c / 2, col = col0 + nb * 8 + 2 * th.t + c % 2;
        const bool visible = !masked || (col < s.seq_k && (!causal || col <= th.row0 + 8 * r + offset));
        const float e = fast_exp2(fmaf(sc[nb][c], scale2, -rs[r].l2));  // (before the select: no branch per element)
        const float pv = visible ? e : 0.f;
        dp[nb][c] = pv * (dp[nb][c] - rs[r].dd);
      }
    }
    std::uint32_t dsa[8][4];
    a_fragments<T>(dsa, dp);  // dS rounded to T
    issue_pv<T, D>(dq, dsa, sKj);  // dQ += dS K: K's tile as the MN-major B (the forward's V form)
    wgmma_wait<0>();
    if (releaser) mbarrier_arrive(&k_empty[stage]);
  }
  T* out = static_cast<T*>(p.dq.data) + b * p.dq.batch + h * p.dq.head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = th.row0 + 8 * r;
    if (row >= s.seq_q) continue;
    const std::uint64_t index0 = static_cast<std::uint64_t>(stat_row0 + row) * D;
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
      const int col = nb * 8 + 2 * th.t;
      store_pair<T>(out + row * p.dq.row + col, s.scale * dq[nb][2 * r], s.scale * dq[nb][2 * r + 1], p.rounding, p.grad_stream, index0 + col);
    }
  }
}

// --- dQ's conversion during the key-tiled pass (p.dq_ready given) ----------------------------------------------
// A block converts dq_convert_kernel's rows once every consumer warpgroup of the kv heads they belong to has counted
// in (`target`: kConsumers per key tile). Launched as the pass's programmatic dependent: its blocks are scheduled
// once every CTA of the pass has started, so with a CTA per key tile they take the SMs the pass's last wave leaves
// idle and convert the heads finished by then, instead of a pass over dQ after the last CTA. (With walkers, bwd_grid:
// a CTA per SM, they start as the walkers exit, nearly together, so the overlap shrinks to the walkers' spread; with
// fewer walkers than SMs they poll on the idle SMs from the start.) Block order follows the order in which the pass
// finishes heads (head by head, key_tile_order.hpp; with a tail, bwd_tail, the tail's heads finish together, at the end,
// so less of their conversion overlaps the pass). The last block also waits for the pass to complete, so that this grid never completes
// before its prerequisite: work queued after it in the stream sees the whole backward done. (What keeps these blocks
// off the pass's SMs is its register file: 384 threads at ptxas's 168 registers hold 64512 of the SM's 65536. Were
// that to change, they would share an SM with a CTA of the pass and poll there: slower, not wrong.)
template <class T>
__global__ void __launch_bounds__(kConvertThreads) dq_convert_ready_kernel(const BackwardParams p, float factor, std::uint32_t target) {
  const AttentionShapeParams& s = p.shape;
  const int rows = s.batch * s.heads_q * s.seq_q, first = static_cast<int>(blockIdx.x) * rows_per_block(s.head_dim / 4);
  const int last = min(first + rows_per_block(s.head_dim / 4), rows) - 1;
  const int group_size = s.heads_q / s.heads_kv;  // kv head of row r (over [B, Hq, Nq]): r / Nq / group_size
  const int kv_first = first / s.seq_q / group_size, kv_last = last / s.seq_q / group_size;
  if (static_cast<int>(threadIdx.x) <= kv_last - kv_first) hopper::wait_count_at_least(p.dq_ready + kv_first + threadIdx.x, target);
  __syncthreads();  // (the acquire above, then the block's barrier: every thread's loads below see the partials)
  convert_dq4<T>(p, factor, dq_convert_slot(s, static_cast<int>(blockIdx.x)));
  if (blockIdx.x == gridDim.x - 1) hopper::grid_wait_prerequisites();
}

template <class T>
void launch_dq_convert_ready(const BackwardParams& p, std::uint32_t target, cudaStream_t stream) {
  const int rows = p.shape.batch * p.shape.heads_q * p.shape.seq_q, per_block = rows_per_block(p.shape.head_dim / 4);
  cudaLaunchAttribute overlap[1];
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3((rows + per_block - 1) / per_block), config.blockDim = dim3(kConvertThreads), config.dynamicSmemBytes = 0;
  config.stream = stream, config.attrs = overlap, config.numAttrs = 1;
  check_launch_result(cudaLaunchKernelEx(&config, dq_convert_ready_kernel<T>, p, p.shape.scale, target),
                      "cuda.fa3 backward: dQ from its accumulator, overlapped with the key-tiled pass");
}

// --- launch --------------------------------------------------------------------------------------------------
CUtensorMap map_of(const Strided& x, const BackwardParams& p, int heads, int rows, std::uint32_t box_rows) {
  if (!tma_readable16(x, p.shape.batch, heads, rows, p.shape.head_dim)) {
    throw std::runtime_error("cuda.fa3 backward: a 16-byte aligned base and strides that are multiples of 8 elements only");
  }
  return map_sw128(x, p.type, p.shape, heads, rows, box_rows);
}

int sm_count(const char* who) {
  int device = 0, sms = 0;
  check_launch_result(cudaGetDevice(&device), who);
  check_launch_result(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), who);
  return sms;
}

// The head pairs launched key tile slowest (BackwardParams::key_pass_tail_heads), at most all of them.
int key_tail_heads(const BackwardParams& p) {
  if (p.key_pass_tail_heads < 0) {
    throw std::runtime_error("cuda.fa3 backward: key_pass_tail_heads " + std::to_string(p.key_pass_tail_heads) + ": a count of head pairs >= 0");
  }
  return std::min(p.key_pass_tail_heads, p.shape.batch * p.shape.heads_kv);
}

template <class T, int D>
void launch_backward(const BackwardParams& given, cudaStream_t stream) {
  BackwardParams p = given;
  const AttentionShapeParams& s = p.shape;
  // (fused: launch_delta refuses a missing or unaligned dq_accum, which the TMA reductions' tensor map needs 16-byte aligned)
  launch_delta<T>(p, stream, "cuda.fa3 backward: D (and, fused, dq_accum's zeros)", !p.deterministic);
  const CUtensorMap q64 = map_of(p.q, p, s.heads_q, s.seq_q, kGroupRows), g64 = map_of(p.dout, p, s.heads_q, s.seq_q, kGroupRows);
  const CUtensorMap k64 = map_of(p.k, p, s.heads_kv, s.seq_k, kGroupRows), v64 = map_of(p.v, p, s.heads_kv, s.seq_k, kGroupRows);
  const CUtensorMap k128 = map_of(p.k, p, s.heads_kv, s.seq_k, kBlockN), v128 = map_of(p.v, p, s.heads_kv, s.seq_k, kBlockN);
  // dK and dV through shared memory and TMA unless asked for stores or their layouts are not TMA's (then q64 fills
  // the unused map slots)
  p.dk_dv_by_stores = !fa3_dk_dv_by_tma(p);
  const CUtensorMap dk64 = p.dk_dv_by_stores ? q64 : map_of(layout_of(p.dk), p, s.heads_kv, s.seq_k, kGroupRows);
  const CUtensorMap dv64 = p.dk_dv_by_stores ? q64 : map_of(layout_of(p.dv), p, s.heads_kv, s.seq_k, kGroupRows);
  if (s.heads_q > 65535 || s.batch > 65535) {
    throw std::runtime_error("cuda.fa3 backward: " + std::to_string(s.heads_q) + " heads and batch " + std::to_string(s.batch) + ": at most 65535 of each");
  }
  // The key-tiled pass: a CTA per key tile of every kv head, or (persistent) a CTA per SM walking them
  const long long tiles = static_cast<long long>((s.seq_k + kCtaRows - 1) / kCtaRows) * s.heads_kv * s.batch;
  // (at most 2^30: a walker's tile index, tile + gridDim.x, stays inside int)
  if (tiles > (1 << 30)) throw std::runtime_error("cuda.fa3 backward: " + std::to_string(tiles) + " key tiles of 128: at most 2^30");
  long long walkers = p.key_pass_ctas > 0 ? p.key_pass_ctas : tiles;
  if (p.key_pass_ctas < 0) walkers = sm_count("cuda.fa3 backward");
  p.key_pass_tail_heads = key_tail_heads(given);  // (after the check above: batch heads_kv <= tiles, so no overflow)
  const dim3 kv_grid(static_cast<unsigned>(std::min(tiles, walkers)));
  if (!p.deterministic) {  // fused: dQ's partials added into p.dq_accum by the key-tiled pass, then scaled and rounded
    constexpr std::size_t bytes = dk_dv_smem_bytes<T, D, true>();
    static_assert(bytes <= kSm90SharedBytesPerBlock, "cuda.fa3 backward: shared memory beyond sm_90's 227 KiB per block");
    auto* kernel = fa3_dk_dv_kernel<T, D, true>;
    allow_smem(kernel, static_cast<int>(bytes), "cuda.fa3 fused backward");
    const std::int64_t rows = s.seq_q, dim = s.head_dim;
    const CUtensorMap dq_map = make_tensor_map_f32_sw128_bhnd(p.dq_accum, s.batch, s.heads_q, s.seq_q, s.head_dim, s.heads_q * rows * dim, rows * dim, dim, kGroupRows);
    kernel<<<kv_grid, kWsThreads, bytes, stream>>>(q64, k64, v64, g64, dq_map, dk64, dv64, p);
    check_launch("cuda.fa3 backward: dK, dV and dQ's partials");
    if (p.dq_ready != nullptr) {
      launch_dq_convert_ready<T>(p, fa3_dq_ready_count(s), stream);
    } else {
      launch_dq_convert<T>(p, s.scale, stream, "cuda.fa3 backward: dQ from its accumulator");
    }
    return;
  }
  {
    constexpr std::size_t bytes = dk_dv_smem_bytes<T, D, false>();
    static_assert(bytes <= kSm90SharedBytesPerBlock, "cuda.fa3 backward: shared memory beyond sm_90's 227 KiB per block");
    auto* kernel = fa3_dk_dv_kernel<T, D, false>;
    allow_smem(kernel, static_cast<int>(bytes), "cuda.fa3 dK/dV");
    kernel<<<kv_grid, kWsThreads, bytes, stream>>>(q64, k64, v64, g64, q64, dk64, dv64, p);  // (dq_map unused: q64 fills the slot)
    check_launch("cuda.fa3 backward: dK/dV");
  }
  {
    constexpr std::size_t bytes = dq_smem_bytes<T, D>();
    static_assert(bytes <= kSm90SharedBytesPerBlock, "cuda.fa3 backward: shared memory beyond sm_90's 227 KiB per block");
    auto* kernel = fa3_dq_kernel<T, D>;
    allow_smem(kernel, static_cast<int>(bytes), "cuda.fa3 dQ");
    kernel<<<grid_of(s, kCtaRows, "cuda.fa3 backward"), kWsThreads, bytes, stream>>>(q64, k128, v128, g64, p);
    check_launch("cuda.fa3 backward: dQ");
  }
}

}  // namespace

bool fa3_dk_dv_by_tma(const BackwardParams& p) {
  const AttentionShapeParams& s = p.shape;
  return !p.dk_dv_by_stores && tma_readable16(layout_of(p.dk), s.batch, s.heads_kv, s.seq_k, s.head_dim) &&
         tma_readable16(layout_of(p.dv), s.batch, s.heads_kv, s.seq_k, s.head_dim);
}

unsigned fa3_dq_ready_count(const AttentionShapeParams& s) { return static_cast<unsigned>(kConsumers * ((s.seq_k + kCtaRows - 1) / kCtaRows)); }

void fa3_backward(const BackwardParams& p, cudaStream_t stream) {
  const AttentionShapeParams& s = p.shape;
  if ((s.head_dim != 64 && s.head_dim != 128) || s.heads_kv < 1 || s.heads_q % s.heads_kv != 0) {
    throw std::runtime_error("cuda.fa3 backward: head dim 64 or 128 (got " + std::to_string(s.head_dim) + "), heads_q a multiple of heads_kv");
  }
  const bool fp16 = p.type == StorageType::fp16;
  if (s.head_dim == 128) {
    fp16 ? launch_backward<__half, 128>(p, stream) : launch_backward<__nv_bfloat16, 128>(p, stream);
  } else {
    fp16 ? launch_backward<__half, 64>(p, stream) : launch_backward<__nv_bfloat16, 64>(p, stream);
  }
}

}  // namespace fc::kernels::cuda
