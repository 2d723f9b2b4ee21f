// Flash Hog, the attention double backward (EQUATIONS.md section 3), on mma.sync tensor cores with
// cpu.hog's pass structure and rounding points (kernels/cpu/hog.cpp):
//   query-tiled passes (hog_query_kernel): a block owns 64 query rows of one head (16 per warp) and walks
//     the key tiles they see, recomputing S, dP = dO V^T, ddS = s (ddQ K^T + Q ddK^T), X = dO ddV^T;
//       kDd:    dd = rowsum(ddS o P)
//       kB:     b = rowsum(dP' o P), dP' = X - dP dd - ddS D + dP ddS
//       kBoth:  dd, r1 = rowsum(P o X), r3 = rowsum(P o dP o ddS), b = r1 + r3 - 2 D dd (2-pass variant)
//       kOut:   dQ' = s (dS ddK + dS' K), ddO = P ddV + ddP V, with dS = P (dP - D), dS' = P (dP' - b),
//               ddP = P (ddS - dd); P, dS, dS', ddP rounded to T (RN) as tensor-core A operands
//   key-tiled pass (hog_key_kernel): a block owns 64 keys of one kv head (16 per warp) and walks every
//     query row of its GQA group that sees them: dK' = s (dS^T ddQ + dS'^T Q), dV' = ddP^T dO.
// Each output is written once by one block: no atomics, deterministic; the extra memory is D, dd and b
// (O(Nq)). Every sum is fp32; the elementwise formulas in fp32; outputs rounded per the policy.
// Both kernels keep two stages of the tiles they walk (key tiles; row tiles and their statistics): the
// next step's cp.async runs during this step's products (kernels/cuda/NOTES.md, cuda.hog version 2).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/fa2_backward.cuh"
#include "kernels/cuda/output_store.cuh"
#include "kernels/cuda/tile_primitives.cuh"

namespace fc::kernels::cuda {

enum class HogPass { kDd, kB, kBoth, kOut };

constexpr int kHogWarps = 4;
constexpr int kHogThreads = 32 * kHogWarps;
constexpr int kHogBlockM = 16 * kHogWarps;  // query rows of a query-pass block
constexpr int kHogBlockN = 32;              // keys per tile of a query pass
constexpr int kHogKeyBlockN = 16 * kHogWarps;  // keys of a key-pass block
constexpr int kHogKeyStep = 32;                // query rows per step of the key pass

template <int D>
struct HogQueryConfig {
  using RowTile = SwizzledTile<kHogBlockM, D>;  // Q, dO, ddQ
  using KeyTile = SwizzledTile<kHogBlockN, D>;  // K, V, ddK, ddV
  static constexpr int kStageElements = 4 * kHogBlockN * D;  // one stage of key tiles
  // Q, dO, ddQ; two stages of K, V, ddK, ddV (d = 128: 48 + 64 KiB, two blocks per SM)
  static constexpr int kSmemBytes = (3 * kHogBlockM * D + 2 * kStageElements) * 2;
};
template <int D>
struct HogKeyConfig {
  using KeyTile = SwizzledTile<kHogKeyBlockN, D>;  // K, V, ddK, ddV
  using RowTile = SwizzledTile<kHogKeyStep, D>;    // Q, dO, ddQ
  static constexpr int kStageElements = 3 * kHogKeyStep * D;  // one stage of row tiles
  static constexpr int kStats = 4 * kHogKeyStep;              // L, D, dd, b of a stage's rows (fp32)
  // K, V, ddK, ddV; two stages of Q, dO, ddQ and of the rows' statistics (d = 128: 64 + 48 + 1 KiB)
  static constexpr int kSmemBytes = (4 * kHogKeyBlockN * D + 2 * kStageElements) * 2 + 2 * kStats * 4;
};

template <class T>
__device__ inline const T* head_ptr(const Strided& x, int b, int h) {
  return static_cast<const T*>(x.data) + b * x.batch + h * x.head;
}

// The four recomputed tiles of one 16-row (or 16-key) m-tile against kN columns, fp32 C fragments.
template <int kN>
struct HogTiles {
  float s[kN / 8][4], dp[kN / 8][4], dds[kN / 8][4], x[kN / 8][4];
};

template <class T, int D, HogPass kPass>
__global__ void __launch_bounds__(kHogThreads) hog_query_kernel(const HogParams p) {
  using Cfg = HogQueryConfig<D>;
  using RowTile = typename Cfg::RowTile;
  using KeyTile = typename Cfg::KeyTile;
  constexpr int kNB = kHogBlockN / 8;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  T* sQ = reinterpret_cast<T*>(smem_bytes);
  T* sG = sQ + kHogBlockM * D;   // dO
  T* sDq = sG + kHogBlockM * D;  // ddQ
  T* sKeys = sDq + kHogBlockM * D;  // two stages of K, V, ddK, ddV
  // The dd pass needs S and ddS only: neither dO nor V, ddV (3 products, not 5).
  constexpr bool kNeedsDp = kPass != HogPass::kDd;

  const AttentionShapeParams& s = p.shape;
  const int tiles_m = (s.seq_q + kHogBlockM - 1) / kHogBlockM;
  const int m_tile = query_tile_of_block(s, tiles_m);
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (s.heads_q / s.heads_kv);
  const int row0 = m_tile * kHogBlockM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int offset = s.causal_offset();
  const bool causal = s.mask != CausalMask::none;
  const float scale2 = s.scale * kLog2e, sc = s.scale;

  load_tile_async<kHogBlockM, D, kHogThreads>(sQ, head_ptr<T>(p.q, b, h), p.q.row, row0, s.seq_q);
  if constexpr (kNeedsDp) load_tile_async<kHogBlockM, D, kHogThreads>(sG, head_ptr<T>(p.dout, b, h), p.dout.row, row0, s.seq_q);
  load_tile_async<kHogBlockM, D, kHogThreads>(sDq, head_ptr<T>(p.ddq, b, h), p.ddq.row, row0, s.seq_q);
  cp_async_commit();

  // The thread's two rows (g and g + 8 of the warp's m-tile) and their statistics.
  const int my_row[2] = {row0 + warp * 16 + g, row0 + warp * 16 + g + 8};
  const std::int64_t stat_row0 = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q;
  float l2[2], dD[2], ddr[2], br[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool inside = my_row[r] < s.seq_q;
    l2[r] = inside ? lse_log2(p.lse[stat_row0 + my_row[r]]) : INFINITY;  // rows past Nq: P = 0
    dD[r] = inside ? p.delta[stat_row0 + my_row[r]] : 0.f;
    ddr[r] = inside && kPass != HogPass::kDd && kPass != HogPass::kBoth ? p.dd[stat_row0 + my_row[r]] : 0.f;
    br[r] = inside && kPass == HogPass::kOut ? p.b[stat_row0 + my_row[r]] : 0.f;
  }
  float sum_a[2] = {0.f, 0.f}, sum_b[2] = {0.f, 0.f}, sum_c[2] = {0.f, 0.f};  // the pass's row sums
  float acc_q[D / 8][4], acc_o[D / 8][4];  // kOut: dQ' / s and ddO
  if constexpr (kPass == HogPass::kOut) {
    zero_fill(acc_q);
    zero_fill(acc_o);
  }

  const int last_row = min(row0 + kHogBlockM, s.seq_q) - 1;
  const int key_end = causal ? max(0, min(s.seq_k, last_row + offset + 1)) : s.seq_k;
  const int n_tiles = (key_end + kHogBlockN - 1) / kHogBlockN;
  const T* k = head_ptr<T>(p.k, b, hk);
  const T* v = head_ptr<T>(p.v, b, hk);
  const T* ddk = head_ptr<T>(p.ddk, b, hk);
  const T* ddv = head_ptr<T>(p.ddv, b, hk);
  const auto issue_tile = [&](int j, int stage) {  // key tile j into a stage: K, V, ddK, ddV
    T* st = sKeys + stage * Cfg::kStageElements;
    const int col0 = j * kHogBlockN;
    load_tile_async<kHogBlockN, D, kHogThreads>(st, k, p.k.row, col0, s.seq_k);
    if constexpr (kNeedsDp) load_tile_async<kHogBlockN, D, kHogThreads>(st + kHogBlockN * D, v, p.v.row, col0, s.seq_k);
    load_tile_async<kHogBlockN, D, kHogThreads>(st + 2 * kHogBlockN * D, ddk, p.ddk.row, col0, s.seq_k);
    if constexpr (kNeedsDp) load_tile_async<kHogBlockN, D, kHogThreads>(st + 3 * kHogBlockN * D, ddv, p.ddv.row, col0, s.seq_k);
    cp_async_commit();
  };
  if (n_tiles > 0) issue_tile(0, 0);
  for (int j = 0; j < n_tiles; ++j) {
    const int col0 = j * kHogBlockN;
    cp_async_wait<0>();
    __syncthreads();  // tile j is in; every warp is done with tile j - 1, whose stage the next load takes
    if (j + 1 < n_tiles) issue_tile(j + 1, (j + 1) & 1);
    const T* sK = sKeys + (j & 1) * Cfg::kStageElements;
    const T* sV = sK + kHogBlockN * D;
    const T* sDk = sV + kHogBlockN * D;  // ddK
    const T* sDv = sDk + kHogBlockN * D;  // ddV

    HogTiles<kHogBlockN> tl;
    zero_fill(tl);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
      uint32_t qa[2][4], ga[2][4], da[2][4];
#pragma unroll
      for (int k2 = 0; k2 < 2; ++k2) {
        load_a<RowTile>(qa[k2], sQ, warp * 16, (kk + k2) * 16);
        if constexpr (kNeedsDp) load_a<RowTile>(ga[k2], sG, warp * 16, (kk + k2) * 16);
        load_a<RowTile>(da[k2], sDq, warp * 16, (kk + k2) * 16);
      }
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        uint32_t kb[4], vb[4], dkb[4], dvb[4];
        load_b_nk<KeyTile>(kb, sK, nb * 8, kk * 16);
        if constexpr (kNeedsDp) load_b_nk<KeyTile>(vb, sV, nb * 8, kk * 16);
        load_b_nk<KeyTile>(dkb, sDk, nb * 8, kk * 16);
        if constexpr (kNeedsDp) load_b_nk<KeyTile>(dvb, sDv, nb * 8, kk * 16);
#pragma unroll
        for (int k2 = 0; k2 < 2; ++k2) {
          mma_16816<T>(tl.s[nb], qa[k2], kb[2 * k2], kb[2 * k2 + 1]);     // Q K^T
          if constexpr (kNeedsDp) mma_16816<T>(tl.dp[nb], ga[k2], vb[2 * k2], vb[2 * k2 + 1]);  // dO V^T
          mma_16816<T>(tl.dds[nb], da[k2], kb[2 * k2], kb[2 * k2 + 1]);   // ddQ K^T
          mma_16816<T>(tl.dds[nb], qa[k2], dkb[2 * k2], dkb[2 * k2 + 1]); // + Q ddK^T
          if constexpr (kNeedsDp) mma_16816<T>(tl.x[nb], ga[k2], dvb[2 * k2], dvb[2 * k2 + 1]);  // dO ddV^T
        }
      }
    }
    // The elementwise formulas (cpu.hog's order), fp32; in kOut the four A operands are formed in place:
    // s <- P, dp <- dS / s, dds <- ddP, x <- dS' / s.
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c / 2, col = col0 + nb * 8 + 2 * t + c % 2;
        const bool visible = col < s.seq_k && (!causal || col <= my_row[r] + offset);
        const float pv = visible ? fast_exp2(fmaf(tl.s[nb][c], scale2, -l2[r])) : 0.f;
        const float dds = tl.dds[nb][c] * sc, dp = tl.dp[nb][c], x = tl.x[nb][c];
        if constexpr (kPass == HogPass::kDd) {
          sum_a[r] += dds * pv;
        } else if constexpr (kPass == HogPass::kBoth) {
          sum_a[r] += dds * pv;
          sum_b[r] += pv * x;
          sum_c[r] += pv * dp * dds;
        } else {
          const float dpp = x - dp * ddr[r] - dds * dD[r] + dp * dds;
          if constexpr (kPass == HogPass::kB) {
            sum_a[r] += dpp * pv;
          } else {
            tl.s[nb][c] = pv;
            tl.dp[nb][c] = pv * (dp - dD[r]);
            tl.dds[nb][c] = pv * (dds - ddr[r]);
            tl.x[nb][c] = pv * (dpp - br[r]);
          }
        }
      }
    }
    if constexpr (kPass == HogPass::kOut) {
      // dQ' / s += dS ddK + dS' K;  ddO += P ddV + ddP V  (B operands [key][d]: ldmatrix.trans)
#pragma unroll
      for (int kk = 0; kk < kHogBlockN / 16; ++kk) {
        uint32_t a_ds[4], a_dsp[4], a_p[4], a_ddp[4];
        a_from_c<T>(a_ds, tl.dp[2 * kk], tl.dp[2 * kk + 1]);
        a_from_c<T>(a_dsp, tl.x[2 * kk], tl.x[2 * kk + 1]);
        a_from_c<T>(a_p, tl.s[2 * kk], tl.s[2 * kk + 1]);
        a_from_c<T>(a_ddp, tl.dds[2 * kk], tl.dds[2 * kk + 1]);
#pragma unroll
        for (int db = 0; db < D / 8; db += 2) {
          uint32_t bf[4];
          load_b_kn<KeyTile>(bf, sDk, kk * 16, db * 8);
          mma_16816<T>(acc_q[db], a_ds, bf[0], bf[1]);
          mma_16816<T>(acc_q[db + 1], a_ds, bf[2], bf[3]);
          load_b_kn<KeyTile>(bf, sK, kk * 16, db * 8);
          mma_16816<T>(acc_q[db], a_dsp, bf[0], bf[1]);
          mma_16816<T>(acc_q[db + 1], a_dsp, bf[2], bf[3]);
          load_b_kn<KeyTile>(bf, sDv, kk * 16, db * 8);
          mma_16816<T>(acc_o[db], a_p, bf[0], bf[1]);
          mma_16816<T>(acc_o[db + 1], a_p, bf[2], bf[3]);
          load_b_kn<KeyTile>(bf, sV, kk * 16, db * 8);
          mma_16816<T>(acc_o[db], a_ddp, bf[0], bf[1]);
          mma_16816<T>(acc_o[db + 1], a_ddp, bf[2], bf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();  // (no key tile: the row tiles' load is still in flight)

  if constexpr (kPass != HogPass::kOut) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float a = quad_sum(sum_a[r]), bb = quad_sum(sum_b[r]), cc = quad_sum(sum_c[r]);
      if (t != 0 || my_row[r] >= s.seq_q) continue;
      const std::int64_t row = stat_row0 + my_row[r];
      if constexpr (kPass == HogPass::kDd) {
        p.dd[row] = a;
      } else if constexpr (kPass == HogPass::kB) {
        p.b[row] = a;
      } else {
        p.dd[row] = a;
        p.b[row] = bb + cc - 2.f * dD[r] * a;  // b = r1 + r3 - 2 D dd
      }
    }
  } else {
    T* dq2 = static_cast<T*>(p.dq2.data) + b * p.dq2.batch + h * p.dq2.head;
    T* ddo = static_cast<T*>(p.ddo.data) + b * p.ddo.batch + h * p.ddo.head;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = my_row[r];
      if (row >= s.seq_q) continue;
      const std::uint64_t index0 = static_cast<std::uint64_t>(stat_row0 + row) * D;
#pragma unroll
      for (int db = 0; db < D / 8; ++db) {
        const int col = db * 8 + 2 * t;
        store_pair<T>(dq2 + row * p.dq2.row + col, sc * acc_q[db][2 * r], sc * acc_q[db][2 * r + 1], p.rounding, p.grad_stream,
                      index0 + col);
        store_pair<T>(ddo + row * p.ddo.row + col, acc_o[db][2 * r], acc_o[db][2 * r + 1], p.rounding, p.grad_stream, index0 + col);
      }
    }
  }
}

// grid (key tiles, kv heads, batch)
template <class T, int D>
__global__ void __launch_bounds__(kHogThreads) hog_key_kernel(const HogParams p) {
  using Cfg = HogKeyConfig<D>;
  using KeyTile = typename Cfg::KeyTile;
  using RowTile = typename Cfg::RowTile;
  constexpr int kM = kHogKeyStep, kNB = kM / 8;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  T* sK = reinterpret_cast<T*>(smem_bytes);
  T* sV = sK + kHogKeyBlockN * D;
  T* sDk = sV + kHogKeyBlockN * D;
  T* sDv = sDk + kHogKeyBlockN * D;
  T* sRows = sDv + kHogKeyBlockN * D;  // two stages of Q, dO, ddQ
  float* sStats = reinterpret_cast<float*>(sRows + 2 * Cfg::kStageElements);  // two stages of L, D, dd, b

  const AttentionShapeParams& s = p.shape;
  const int hk = blockIdx.y, b = blockIdx.z, group = s.heads_q / s.heads_kv;
  const int key0 = blockIdx.x * kHogKeyBlockN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int offset = s.causal_offset();
  const bool causal = s.mask != CausalMask::none;
  const float scale2 = s.scale * kLog2e, sc = s.scale;

  load_tile_async<kHogKeyBlockN, D, kHogThreads>(sK, head_ptr<T>(p.k, b, hk), p.k.row, key0, s.seq_k);
  load_tile_async<kHogKeyBlockN, D, kHogThreads>(sV, head_ptr<T>(p.v, b, hk), p.v.row, key0, s.seq_k);
  load_tile_async<kHogKeyBlockN, D, kHogThreads>(sDk, head_ptr<T>(p.ddk, b, hk), p.ddk.row, key0, s.seq_k);
  load_tile_async<kHogKeyBlockN, D, kHogThreads>(sDv, head_ptr<T>(p.ddv, b, hk), p.ddv.row, key0, s.seq_k);
  cp_async_commit();

  float acc_k[D / 8][4], acc_v[D / 8][4];  // dK' / s, dV'
  zero_fill(acc_k);
  zero_fill(acc_v);
  const int my_key[2] = {key0 + warp * 16 + g, key0 + warp * 16 + g + 8};
  const int first_row = causal ? max(0, key0 - offset) : 0;
  const int m_begin = first_row / kM, tiles_m = (s.seq_q + kM - 1) / kM;

  // The steps: every query row tile of each query head of the group that sees these keys, in order.
  // Step i + 1's Q, dO, ddQ and its rows' L, D, dd, b (4 bytes each by cp.async) go into the other
  // stage during step i. Rows past Nq read zeros (L = D = dd = b = 0 and zero Q, dO, ddQ): their P is 1
  // where visible, but dP, ddS, X and the statistics are 0, so dS, dS' and ddP are 0 and nothing
  // reaches dK', dV'.
  const int per_head = tiles_m - m_begin, steps = group * per_head;
  const auto issue_step = [&](int gh, int m_tile, int stage) {
    const int h = hk * group + gh, q0 = m_tile * kM;
    T* st = sRows + stage * Cfg::kStageElements;
    load_tile_async<kM, D, kHogThreads>(st, head_ptr<T>(p.q, b, h), p.q.row, q0, s.seq_q);
    load_tile_async<kM, D, kHogThreads>(st + kM * D, head_ptr<T>(p.dout, b, h), p.dout.row, q0, s.seq_q);
    load_tile_async<kM, D, kHogThreads>(st + 2 * kM * D, head_ptr<T>(p.ddq, b, h), p.ddq.row, q0, s.seq_q);
    static_assert(Cfg::kStats <= kHogThreads, "one row statistic per thread");
    if (threadIdx.x < Cfg::kStats) {
      const int i = threadIdx.x % kM, which = threadIdx.x / kM;
      const bool inside = q0 + i < s.seq_q;
      const std::int64_t row = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q + (inside ? q0 + i : 0);
      const float* src = (which == 0 ? p.lse : which == 1 ? p.delta : which == 2 ? p.dd : p.b) + row;
      cp_async_4(sStats + stage * Cfg::kStats + threadIdx.x, src, inside ? 4 : 0);
    }
    cp_async_commit();
  };
  if (steps > 0) issue_step(0, m_begin, 0);
  int gh = 0, m_tile = m_begin;
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1, q0 = m_tile * kM;
    const int next_gh = m_tile + 1 < tiles_m ? gh : gh + 1, next_m = m_tile + 1 < tiles_m ? m_tile + 1 : m_begin;
    {
      cp_async_wait<0>();
      __syncthreads();  // this step's rows are in; every warp is done with the last step's stage
      if (step + 1 < steps) issue_step(next_gh, next_m, stage ^ 1);
      const T* sQ = sRows + stage * Cfg::kStageElements;
      const T* sG = sQ + kM * D;
      const T* sDq = sG + kM * D;
      const float* sL = sStats + stage * Cfg::kStats;  // L (natural log), then D, dd, b
      const float* sD = sL + kM;
      const float* sDd = sD + kM;
      const float* sB = sDd + kM;

      // Transposed tiles for the warp's 16 keys against the step's kM rows: S^T = K Q^T,
      // dP^T = V dO^T, ddS^T / s = ddK Q^T + K ddQ^T, X^T = ddV dO^T.
      HogTiles<kM> tl;
      zero_fill(tl);
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t ka[2][4], va[2][4], dka[2][4], dva[2][4];
#pragma unroll
        for (int k2 = 0; k2 < 2; ++k2) {
          load_a<KeyTile>(ka[k2], sK, warp * 16, (kk + k2) * 16);
          load_a<KeyTile>(va[k2], sV, warp * 16, (kk + k2) * 16);
          load_a<KeyTile>(dka[k2], sDk, warp * 16, (kk + k2) * 16);
          load_a<KeyTile>(dva[k2], sDv, warp * 16, (kk + k2) * 16);
        }
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb) {
          uint32_t qb[4], gb[4], dqb[4];
          load_b_nk<RowTile>(qb, sQ, nb * 8, kk * 16);
          load_b_nk<RowTile>(gb, sG, nb * 8, kk * 16);
          load_b_nk<RowTile>(dqb, sDq, nb * 8, kk * 16);
#pragma unroll
          for (int k2 = 0; k2 < 2; ++k2) {
            mma_16816<T>(tl.s[nb], ka[k2], qb[2 * k2], qb[2 * k2 + 1]);
            mma_16816<T>(tl.dp[nb], va[k2], gb[2 * k2], gb[2 * k2 + 1]);
            mma_16816<T>(tl.dds[nb], dka[k2], qb[2 * k2], qb[2 * k2 + 1]);
            mma_16816<T>(tl.dds[nb], ka[k2], dqb[2 * k2], dqb[2 * k2 + 1]);
            mma_16816<T>(tl.x[nb], dva[k2], gb[2 * k2], gb[2 * k2 + 1]);
          }
        }
      }
      // dS^T / s, dS'^T / s, ddP^T into dp, x, dds (cpu.hog's formulas, per (key, row) element)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = my_key[c / 2], qi = nb * 8 + 2 * t + c % 2, row = q0 + qi;
          const bool visible = key < s.seq_k && (!causal || key <= row + offset);
          const float pv = visible ? fast_exp2(fmaf(tl.s[nb][c], scale2, -lse_log2(sL[qi]))) : 0.f;
          const float dds = tl.dds[nb][c] * sc, dp = tl.dp[nb][c], x = tl.x[nb][c];
          const float dd = sDd[qi], dD = sD[qi];
          const float dpp = x - dp * dd - dds * dD + dp * dds;
          tl.dp[nb][c] = pv * (dp - dD);
          tl.x[nb][c] = pv * (dpp - sB[qi]);
          tl.dds[nb][c] = pv * (dds - dd);
        }
      }
      // dK' / s += dS^T ddQ + dS'^T Q;  dV' += ddP^T dO  (B operands [row][d]: ldmatrix.trans)
#pragma unroll
      for (int kk = 0; kk < kM / 16; ++kk) {
        uint32_t a_ds[4], a_dsp[4], a_ddp[4];
        a_from_c<T>(a_ds, tl.dp[2 * kk], tl.dp[2 * kk + 1]);
        a_from_c<T>(a_dsp, tl.x[2 * kk], tl.x[2 * kk + 1]);
        a_from_c<T>(a_ddp, tl.dds[2 * kk], tl.dds[2 * kk + 1]);
#pragma unroll
        for (int db = 0; db < D / 8; db += 2) {
          uint32_t bf[4];
          load_b_kn<RowTile>(bf, sDq, kk * 16, db * 8);
          mma_16816<T>(acc_k[db], a_ds, bf[0], bf[1]);
          mma_16816<T>(acc_k[db + 1], a_ds, bf[2], bf[3]);
          load_b_kn<RowTile>(bf, sQ, kk * 16, db * 8);
          mma_16816<T>(acc_k[db], a_dsp, bf[0], bf[1]);
          mma_16816<T>(acc_k[db + 1], a_dsp, bf[2], bf[3]);
          load_b_kn<RowTile>(bf, sG, kk * 16, db * 8);
          mma_16816<T>(acc_v[db], a_ddp, bf[0], bf[1]);
          mma_16816<T>(acc_v[db + 1], a_ddp, bf[2], bf[3]);
        }
      }
    }
    gh = next_gh, m_tile = next_m;
  }
  cp_async_wait<0>();  // (no step: the key tiles' load is still in flight)

  T* dk2 = static_cast<T*>(p.dk2.data) + b * p.dk2.batch + hk * p.dk2.head;
  T* dv2 = static_cast<T*>(p.dv2.data) + b * p.dv2.batch + hk * p.dv2.head;
  const std::uint64_t row_base = (static_cast<std::uint64_t>(b) * s.heads_kv + hk) * s.seq_k;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = my_key[r];
    if (key >= s.seq_k) continue;
    const std::uint64_t index0 = (row_base + key) * D;
#pragma unroll
    for (int db = 0; db < D / 8; ++db) {
      const int col = db * 8 + 2 * t;
      store_pair<T>(dk2 + key * p.dk2.row + col, sc * acc_k[db][2 * r], sc * acc_k[db][2 * r + 1], p.rounding, p.grad_stream,
                    index0 + col);
      store_pair<T>(dv2 + key * p.dv2.row + col, acc_v[db][2 * r], acc_v[db][2 * r + 1], p.rounding, p.grad_stream, index0 + col);
    }
  }
}

}  // namespace fc::kernels::cuda
