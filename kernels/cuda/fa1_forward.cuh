// FlashAttention (v1)'s forward as its paper's Algorithm 1 orders it: key/value tiles outer, query tiles
// inner. A block loads K_j and V_j once and walks its query tiles; for each it forms the tile's own
// softmax statistics (m~, l~) and P~ V_j, merges them into the row's running (m, l), and rewrites O
// normalised:
//     O <- (l e^(m - m') O + e^(m~ - m') P~ V_j) / l'
// with O kept in HBM in the storage format between key tiles and (m, l) in an fp32 workspace, as FA1
// keeps them. The loop order and the rounding points are cpu.fa1's (kernels/cpu/fa1.cpp):
//   S = s (Q K^T)      exact 16-bit products, fp32 accumulation (tensor-core order)
//   P~ = e^(S - m~)    fp32, natural exp (__expf: ex2.approx of x log2 e, FA1's choice), masked -> 0
//   l~                 sums the fp32 P~
//   P~                 rounded to the storage format (RN) as the A operand of P~ V_j
//   O                  rewritten per key tile and rounded to the storage format: to nearest between
//                      tiles, per the policy (RN or SR) at the last key tile
//   L = m + log l      fp32, at the end
// Key tiles of kBlockN = 64 keys, cpu.fa1's block_k: the tile size sets where O is rounded, so the two
// must match for cuda.fa1 and cpu.fa1 to round at the same points. Query tiles of 64 rows, 16 per warp
// (the query tile size does not change a result: rows are independent).
//
// Parallelism: FA1 parallelises over (batch, head); a head's query tiles may also be split into
// contiguous chunks over grid.x (each row's sequence of operations is the same whichever block runs
// it), so small batch x heads still fill the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/output_store.cuh"
#include "kernels/cuda/tile_primitives.cuh"

namespace fc::kernels::cuda {

template <int D>
struct Fa1ForwardConfig {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 16 * kWarps;  // query rows per tile, 16 per warp
  static constexpr int kBlockN = 64;           // keys per tile: cpu.fa1's block_k
  static constexpr int kNBlocks = kBlockN / 8;
  static constexpr int kDBlocks = D / 8;
  static constexpr int kDSteps = D / 16;
  static constexpr int kNSteps = kBlockN / 16;
  using QTile = SwizzledTile<kBlockM, D>;
  using KVTile = SwizzledTile<kBlockN, D>;
  // K_j, V_j, and two stages of the query tile's Q and O and its rows' m and l: the next query tile's
  // load while this one is computed
  static constexpr int kStageElements = 2 * kBlockM * D;  // Q, O
  static constexpr int kSmemBytes = (2 * kBlockN * D + 2 * kStageElements) * 2 + 2 * 2 * kBlockM * 4;
};

template <class T, int D>
__global__ void __launch_bounds__(128) fa1_forward_kernel(const ForwardParams p) {
  using Cfg = Fa1ForwardConfig<D>;
  using QTile = typename Cfg::QTile;
  using KVTile = typename Cfg::KVTile;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  T* sK = reinterpret_cast<T*>(smem_bytes);
  T* sV = sK + kBlockN * D;
  T* sStage0 = sV + kBlockN * D;  // stage x: Q at sStage0 + x kStageElements, O kBlockM D after it
  float* sStat0 = reinterpret_cast<float*>(sStage0 + 2 * Cfg::kStageElements);  // stage x: m, l at + x 2 kBlockM

  const AttentionShapeParams& s = p.shape;
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (s.heads_q / s.heads_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int offset = s.causal_offset();
  const bool causal = s.mask != CausalMask::none;
  const float scale = s.scale;

  // This block's query tiles: a contiguous chunk of the head's.
  const int tiles_m = (s.seq_q + kBlockM - 1) / kBlockM, tiles_n = (s.seq_k + kBlockN - 1) / kBlockN;
  const int chunk = (tiles_m + gridDim.x - 1) / gridDim.x;
  const int i_begin = blockIdx.x * chunk, i_end = min(tiles_m, i_begin + chunk);
  if (i_begin >= i_end) return;
  const int row_begin = i_begin * kBlockM, row_end = min(s.seq_q, i_end * kBlockM);

  const T* q = static_cast<const T*>(p.q.data) + b * p.q.batch + h * p.q.head;
  const T* k = static_cast<const T*>(p.k.data) + b * p.k.batch + hk * p.k.head;
  const T* v = static_cast<const T*>(p.v.data) + b * p.v.batch + hk * p.v.head;
  T* o = static_cast<T*>(p.o.data) + b * p.o.batch + h * p.o.head;
  const std::int64_t rows_total = static_cast<std::int64_t>(s.batch) * s.heads_q * s.seq_q;
  const std::int64_t stat_row0 = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q;
  float* m_state = p.row_state + stat_row0;               // running max (natural units), -inf: no key yet
  float* l_state = p.row_state + rows_total + stat_row0;  // running sum

  for (int row = row_begin + threadIdx.x; row < row_end; row += Cfg::kThreads) m_state[row] = -INFINITY, l_state[row] = 0.f;
  // (the first __syncthreads of the key loop publishes these to the block)

  // Query tile i sees key tile j when its last row reaches the tile's first key.
  const auto sees = [&](int i, int j) { return !causal || j * kBlockN <= min((i + 1) * kBlockM, s.seq_q) - 1 + offset; };

  const TileLoader<kBlockM, D, Cfg::kThreads, T> q_loader(q, p.q.row), o_loader(o, p.o.row);
  const TileLoader<kBlockN, D, Cfg::kThreads, T> k_loader(k, p.k.row), v_loader(v, p.v.row);
  // Query tile i into a stage: Q and O by cp.async (O as left by the last key tile: global writes of this
  // block, published by a barrier, read back through L2), m and l by loads into registers (L2 too) that
  // the thread of the row stores into the stage after the step (stage_stats).
  const auto issue_query_tile = [&](int i, int stage, float& m_next, float& l_next) {
    T* sQn = sStage0 + stage * Cfg::kStageElements;
    q_loader.load(sQn, i * kBlockM, s.seq_q);
    o_loader.load(sQn + kBlockM * D, i * kBlockM, s.seq_q);
    cp_async_commit();
    const int row = i * kBlockM + static_cast<int>(threadIdx.x);
    const bool mine = threadIdx.x < kBlockM && row < s.seq_q;
    m_next = mine ? __ldcg(m_state + row) : -INFINITY;
    l_next = mine ? __ldcg(l_state + row) : 0.f;
  };
  const auto stage_stats = [&](int stage, float m, float l) {
    if (threadIdx.x < kBlockM) sStat0[stage * 2 * kBlockM + threadIdx.x] = m, sStat0[stage * 2 * kBlockM + kBlockM + threadIdx.x] = l;
  };

  for (int j = 0; j < tiles_n; ++j) {
    int i = i_begin;
    while (i < i_end && !sees(i, j)) ++i;  // visibility grows with the row: the visible tiles are a suffix
    if (i == i_end) continue;
    __syncthreads();  // every warp is done with the previous K_j, V_j and stages; m, l, O written so far visible
    k_loader.load(sK, j * kBlockN, s.seq_k);
    v_loader.load(sV, j * kBlockN, s.seq_k);
    {
      float m0, l0;
      issue_query_tile(i, 0, m0, l0);
      stage_stats(0, m0, l0);
    }
    const int key0 = j * kBlockN;
    const bool last_key_tile = j == tiles_n - 1;
    const bool tile_crosses_nk = key0 + kBlockN > s.seq_k;
    for (int stage = 0; i < i_end; ++i, stage ^= 1) {
      cp_async_wait<0>();
      __syncthreads();  // Q_i, O_i, m, l (and K_j, V_j) landed for every thread; the other stage is free
      float m_next = -INFINITY, l_next = 0.f;
      // (tile i + 1's rows are not written before its own step of this key tile: what loads now is final)
      if (i + 1 < i_end) issue_query_tile(i + 1, stage ^ 1, m_next, l_next);
      const T* sQ = sStage0 + stage * Cfg::kStageElements;
      const T* sO = sQ + kBlockM * D;
      const float* sM = sStat0 + stage * 2 * kBlockM;
      const float* sLs = sM + kBlockM;
      const int row0 = i * kBlockM + warp * 16;

      // S = Q_i K_j^T (unscaled)
      float sc[Cfg::kNBlocks][4];
#pragma unroll
      for (int nb = 0; nb < Cfg::kNBlocks; ++nb) sc[nb][0] = sc[nb][1] = sc[nb][2] = sc[nb][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < Cfg::kDSteps; kk += 2) {
        uint32_t qa[4], qa2[4];
        load_a<QTile>(qa, sQ, warp * 16, kk * 16);
        load_a<QTile>(qa2, sQ, warp * 16, kk * 16 + 16);
#pragma unroll
        for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
          uint32_t bf[4];
          load_b_nk<KVTile>(bf, sK, nb * 8, kk * 16);
          mma_16816<T>(sc[nb], qa, bf[0], bf[1]);
          mma_16816<T>(sc[nb], qa2, bf[2], bf[3]);
        }
      }
      // S = s x; hidden entries -inf; the tile's own max and P~ = e^(S - m~) per row.
      const bool needs_mask = tile_crosses_nk || (causal && key0 + kBlockN - 1 > row0 + offset);
      float m_tile[2], l_tile[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + g + 8 * r;
        float mx = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& x = sc[nb][2 * r + c];
            const int col = key0 + nb * 8 + 2 * t + c;
            x = needs_mask && (col >= s.seq_k || (causal && col > row + offset)) ? -INFINITY : scale * x;
            mx = fmaxf(mx, x);
          }
        }
        m_tile[r] = quad_max(mx);
        float sum = 0.f;
#pragma unroll
        for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& x = sc[nb][2 * r + c];
            x = m_tile[r] == -INFINITY ? 0.f : __expf(x - m_tile[r]);  // exp(-inf) = 0 for hidden entries
            sum += x;
          }
        }
        l_tile[r] = quad_sum(sum);
      }
      // P~ V_j, P~ rounded to T from the S registers
      float pv[Cfg::kDBlocks][4];
#pragma unroll
      for (int db = 0; db < Cfg::kDBlocks; ++db) pv[db][0] = pv[db][1] = pv[db][2] = pv[db][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < Cfg::kNSteps; ++kk) {
        uint32_t pa[4];
        a_from_c<T>(pa, sc[2 * kk], sc[2 * kk + 1]);
#pragma unroll
        for (int db = 0; db < Cfg::kDBlocks; db += 2) {
          uint32_t bf[4];
          load_b_kn<KVTile>(bf, sV, kk * 16, db * 8);
          mma_16816<T>(pv[db], pa, bf[0], bf[1]);
          mma_16816<T>(pv[db + 1], pa, bf[2], bf[3]);
        }
      }
      // Merge into the running statistics and rewrite O (in the storage format) for each row.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + g + 8 * r;
        const int local = warp * 16 + g + 8 * r;  // the row within the query tile
        if (row >= s.seq_q || m_tile[r] == -INFINITY) continue;  // no visible key here: nothing changes
        const float m_old = sM[local], l_old = sLs[local];
        const bool first = m_old == -INFINITY;
        const float m_new = fmaxf(m_old, m_tile[r]);
        const float old_w = first ? 0.f : __expf(m_old - m_new), new_w = __expf(m_tile[r] - m_new);
        const float l_new = old_w * l_old + new_w * l_tile[r];
        const float carried = l_old * old_w;
        T* orow = o + row * p.o.row;
        const std::uint64_t index0 = static_cast<std::uint64_t>(stat_row0 + row) * D;
#pragma unroll
        for (int db = 0; db < Cfg::kDBlocks; ++db) {
          const int col = db * 8 + 2 * t;
          float2 old = make_float2(0.f, 0.f);  // (before the first visible key O holds nothing: not read)
          if (!first) old = Storage<T>::unpack(*reinterpret_cast<const uint32_t*>(sO + QTile::offset(local, db * 8) + 2 * t));
          const float a = (carried * old.x + new_w * pv[db][2 * r]) / l_new;
          const float c = (carried * old.y + new_w * pv[db][2 * r + 1]) / l_new;
          // between key tiles O is rounded to nearest (FA1 stores it); the last tile's write is the output
          store_pair<T>(orow + col, a, c, last_key_tile ? p.rounding : OutputRounding{}, p.o_stream, index0 + col);
        }
        if (t == 0) m_state[row] = m_new, l_state[row] = l_new;
      }
      if (i + 1 < i_end) stage_stats(stage ^ 1, m_next, l_next);  // (nobody reads that stage before the next barrier)
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every row's last update is visible

  // L = m + log l; a row that saw no key: O = 0, L = -inf.
  for (int row = row_begin + threadIdx.x / (D / 2); row < row_end; row += Cfg::kThreads / (D / 2)) {
    const float l = l_state[row];
    const int col = 2 * (threadIdx.x % (D / 2));
    if (l == 0.f) *reinterpret_cast<uint32_t*>(o + row * p.o.row + col) = 0u;  // +0 in bf16 and fp16
    if (col == 0) p.lse[stat_row0 + row] = l == 0.f ? -INFINITY : m_state[row] + logf(l);
  }
}

}  // namespace fc::kernels::cuda
