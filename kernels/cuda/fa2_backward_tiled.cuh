// FA2's dK/dV pass in FlashAttention-2's own block layout (the `bwd_layout=tiled` option): a block of
// 8 warps owns 128 keys of one kv head and walks the query rows that see them in steps of 64, like
// fa2_backward.cuh's dk_dv kernel, but the warps tile each product instead of each owning 16 keys:
//   S = Q K^T, dP = dO V^T     [64 rows x 128 keys]   warps 2 x 4, 32 x 32 each
//   P, dS                      rounded to T and staged in shared memory once ([row][key], swizzled)
//   dV += P^T dO, dK += dS^T Q [128 keys x D]         warps 4 x 2, 32 keys x D/2 each
//   dQ partial = dS K          [64 rows x D]          warps 2 x 4, 32 rows x D/4 each (fast mode)
// Every fragment a warp loads feeds two m-tiles (the warp-keys layout feeds one: each warp re-reads all
// of the step's Q and dO for its 16 keys), so a step needs ~0.45 ldmatrix per HMMA instead of ~0.6; the
// price is the P/dS staging (32 KB written and read per step) and one more barrier per step.
// The rounding points are fa2_backward.cuh's (P and dS from fp32, rounded to T as operands; s applied
// to dK and dQ in fp32 at the end); only the order of fp32 sums differs (the tensor core's per k16 step).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/fa2_backward.cuh"
#include "kernels/cuda/fa2_forward.cuh"
#include "kernels/cuda/output_store.cuh"
#include "kernels/cuda/tile_primitives.cuh"

namespace fc::kernels::cuda {

template <int D>
struct TiledDkDvConfig {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 128;  // keys per block
  static constexpr int kBlockM = 64;   // query rows per step
  // S and dP: warp w owns rows (w / 4) 32.., keys (w % 4) 32..
  static constexpr int kSNBlocks = 4;  // n8 blocks of keys per warp
  // dK and dV: warp w owns keys (w / 2) 32.., columns (w % 2) D / 2..
  static constexpr int kKvCols = D / 2;
  static constexpr int kKvNBlocks = kKvCols / 8;
  // dQ partial: warp w owns rows (w / 4) 32.., columns (w % 4) D / 4..
  static constexpr int kDqCols = D / 4;
  static constexpr int kDqNBlocks = kDqCols / 8;
  static_assert(kDqNBlocks % 2 == 0 && kKvNBlocks % 2 == 0, "pairs of n8 blocks per ldmatrix.x4");
  using KVTile = SwizzledTile<kBlockN, D>;
  using QTile = SwizzledTile<kBlockM, D>;
  using PTile = SwizzledTile<kBlockM, kBlockN>;  // P and dS, [row][key]
  static constexpr int kStageElements = 2 * kBlockM * D;  // Q and dO of one stage
  // K, V; two stages of (Q, dO); P, dS; two stages of (L log2 e, D)
  static constexpr int kSmemBytes = (2 * kBlockN * D + 2 * kStageElements + 2 * kBlockM * kBlockN) * 2 + 2 * 2 * kBlockM * 4;
  // d = 128: dK, dV and the S/dP blocks need ~210 registers, one block per SM (at d = 64, two blocks
  // of 128 registers spill ~400 bytes)
  static constexpr int kMinBlocks = 1;
};

template <class T, int D, bool kDqHere>
__global__ void __launch_bounds__(TiledDkDvConfig<D>::kThreads, TiledDkDvConfig<D>::kMinBlocks)
    dk_dv_tiled_kernel(const BackwardParams p) {
  using Cfg = TiledDkDvConfig<D>;
  using KVTile = typename Cfg::KVTile;
  using QTile = typename Cfg::QTile;
  using PTile = typename Cfg::PTile;
  constexpr int kBlockN = Cfg::kBlockN, kBlockM = Cfg::kBlockM;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  T* sK = reinterpret_cast<T*>(smem_bytes);
  T* sV = sK + kBlockN * D;
  T* sStage0 = sV + kBlockN * D;  // stage x: Q at sStage0 + x kStageElements, dO kBlockM D after it
  T* sP = sStage0 + 2 * Cfg::kStageElements;
  T* sS = sP + kBlockM * kBlockN;  // dS
  float* sStat0 = reinterpret_cast<float*>(sS + kBlockM * kBlockN);  // stage x: L log2 e, then D

  const AttentionShapeParams& s = p.shape;
  const int n_tile = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int group = s.heads_q / s.heads_kv;
  const int key0 = n_tile * kBlockN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int s_row0 = warp / 4 * 32, s_key0 = warp % 4 * 32;                 // S, dP
  const int kv_key0 = warp / 2 * 32, kv_col0 = warp % 2 * Cfg::kKvCols;      // dK, dV
  const int dq_row0 = warp / 4 * 32, dq_col0 = warp % 4 * Cfg::kDqCols;      // dQ partial
  const int offset = s.causal_offset();
  const bool causal = s.mask != CausalMask::none;
  const float scale2 = s.scale * kLog2e;

  load_kv_tiles<kBlockN, D, Cfg::kThreads>(p, hk, b, key0, sK, sV);
  float dk[2][Cfg::kKvNBlocks][4], dv[2][Cfg::kKvNBlocks][4];
  zero_fill(dk);
  zero_fill(dv);

  // The steps, as in dk_dv_key_tile: every query tile from the first that sees a key of the block on,
  // of each query head of the group in order. (Written out in both kernels on purpose: sharing the
  // schedule through a struct changed ptxas's register allocation of this kernel, 255 registers with
  // spills, and cost 12 % of the backward at commit 46b7913; NOTES.md, version 12.)
  const int first_row = causal ? max(0, key0 - offset) : 0;
  const int m_begin = first_row / kBlockM, tiles_m = (s.seq_q + kBlockM - 1) / kBlockM;
  const int per_head = tiles_m - m_begin, steps = group * per_head;
  const TileLoader<kBlockM, D, Cfg::kThreads, T> q_loader(
      static_cast<const T*>(p.q.data) + b * p.q.batch + static_cast<std::int64_t>(hk) * group * p.q.head, p.q.row);
  const TileLoader<kBlockM, D, Cfg::kThreads, T> g_loader(
      static_cast<const T*>(p.dout.data) + b * p.dout.batch + static_cast<std::int64_t>(hk) * group * p.dout.head, p.dout.row);
  // Step i + 1's Q and dO and its rows' L and D (4 bytes each, threads 0..127) by cp.async into the
  // other stage: loads in registers would be sunk by the compiler to their use at the step's end, one
  // exposed L2 round trip per step. Rows past Nq read L = D = 0: their Q and dO rows are zeros, so
  // their P = 1 meets dO = 0 and dS = 0 (nothing reaches dK, dV; their dQ rows are not stored).
  const auto issue_step = [&](int gh, int m_tile, int stage) {
    const int h = hk * group + gh, q0 = m_tile * kBlockM;
    T* sQn = sStage0 + stage * Cfg::kStageElements;
    q_loader.load(sQn, q0, s.seq_q, gh * p.q.head);
    g_loader.load(sQn + kBlockM * D, q0, s.seq_q, gh * p.dout.head);
    static_assert(2 * kBlockM <= Cfg::kThreads, "one row statistic per thread");
    if (threadIdx.x < 2 * kBlockM) {
      const int i = threadIdx.x % kBlockM;
      const bool inside = q0 + i < s.seq_q;
      const std::int64_t row = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q + (inside ? q0 + i : 0);
      const float* src = threadIdx.x < kBlockM ? p.lse + row : p.delta + row;
      cp_async_4(sStat0 + stage * 2 * kBlockM + threadIdx.x, src, inside ? 4 : 0);
    }
    cp_async_commit();
  };
  if (steps > 0) issue_step(0, m_begin, 0);
  int gh = 0, m_tile = m_begin;
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    const int q0 = m_tile * kBlockM;
    const int next_gh = m_tile + 1 < tiles_m ? gh : gh + 1, next_m = m_tile + 1 < tiles_m ? m_tile + 1 : m_begin;
    cp_async_wait<0>();
    __syncthreads();  // this step's tiles and statistics are in; every warp is done with the last P, dS and stage
    if (step + 1 < steps) issue_step(next_gh, next_m, stage ^ 1);
    const T* sQ = sStage0 + stage * Cfg::kStageElements;
    const T* sG = sQ + kBlockM * D;  // dO
    const float* sL = sStat0 + stage * 2 * kBlockM;  // L (natural log)
    const float* sD = sL + kBlockM;

    {
      // S = Q K^T and dP = dO V^T for the warp's 32 rows x 32 keys.
      float sc[2][Cfg::kSNBlocks][4], dp[2][Cfg::kSNBlocks][4];
      zero_fill(sc);
      zero_fill(dp);
      // (S's products, then dP's: the A fragments of one at a time are live beside the accumulators)
      const auto product = [&](float (&acc)[2][Cfg::kSNBlocks][4], const T* sA, const T* sB) {
#pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
          uint32_t a[2][2][4];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            load_a<QTile>(a[mt][0], sA, s_row0 + mt * 16, kk * 16);
            load_a<QTile>(a[mt][1], sA, s_row0 + mt * 16, kk * 16 + 16);
          }
          // (the B fragments of all four n-blocks first, so the two k-steps' products into one
          // accumulator are 8 HMMAs apart instead of back to back)
          uint32_t bf[Cfg::kSNBlocks][4];
#pragma unroll
          for (int nb = 0; nb < Cfg::kSNBlocks; ++nb) load_b_nk<KVTile>(bf[nb], sB, s_key0 + nb * 8, kk * 16);
#pragma unroll
          for (int k2 = 0; k2 < 2; ++k2) {
#pragma unroll
            for (int nb = 0; nb < Cfg::kSNBlocks; ++nb) {
#pragma unroll
              for (int mt = 0; mt < 2; ++mt) mma_16816<T>(acc[mt][nb], a[mt][k2], bf[nb][2 * k2], bf[nb][2 * k2 + 1]);
            }
          }
        }
      };
      product(sc, sQ, sK);
      product(dp, sG, sV);
      // P and dS (fp32), rounded to T into shared memory. Rows past Nq (and rows with no visible key)
      // have L = +inf, so P = 0; keys past Nk and the causal diagonal are masked only in steps that
      // cross them.
      const bool needs_mask = key0 + kBlockN > s.seq_k || (causal && key0 + kBlockN - 1 > q0 + offset);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int qi = s_row0 + mt * 16 + g + 8 * r, row = q0 + qi;
          const float l2 = lse_log2(sL[qi]), dd = sD[qi];
#pragma unroll
          for (int nb = 0; nb < Cfg::kSNBlocks; ++nb) {
            float pv[2], ds[2];
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int key = key0 + s_key0 + nb * 8 + 2 * t + c;
              const bool visible = !needs_mask || (key < s.seq_k && (!causal || key <= row + offset));
              pv[c] = visible ? fast_exp2(fmaf(sc[mt][nb][2 * r + c], scale2, -l2)) : 0.f;
              ds[c] = pv[c] * (dp[mt][nb][2 * r + c] - dd);
            }
            const int at = PTile::chunk_offset(qi, s_key0 / 8 + nb) + 2 * t;
            *reinterpret_cast<uint32_t*>(sP + at) = Storage<T>::pack(pv[0], pv[1]);
            *reinterpret_cast<uint32_t*>(sS + at) = Storage<T>::pack(ds[0], ds[1]);
          }
        }
      }
    }
    __syncthreads();  // all of P and dS staged

    // dV += P^T dO, dK += dS^T Q for the warp's 32 keys x D / 2 columns: A = P^T, dS^T by ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      uint32_t pa[2][4], sa[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        load_a_trans<PTile>(pa[mt], sP, kv_key0 + mt * 16, kk * 16);
        load_a_trans<PTile>(sa[mt], sS, kv_key0 + mt * 16, kk * 16);
      }
#pragma unroll
      for (int nb = 0; nb < Cfg::kKvNBlocks; nb += 2) {
        uint32_t gb[4], qb[4];
        load_b_kn<QTile>(gb, sG, kk * 16, kv_col0 + nb * 8);
        load_b_kn<QTile>(qb, sQ, kk * 16, kv_col0 + nb * 8);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_16816<T>(dv[mt][nb], pa[mt], gb[0], gb[1]);
          mma_16816<T>(dv[mt][nb + 1], pa[mt], gb[2], gb[3]);
          mma_16816<T>(dk[mt][nb], sa[mt], qb[0], qb[1]);
          mma_16816<T>(dk[mt][nb + 1], sa[mt], qb[2], qb[3]);
        }
      }
    }

    if constexpr (kDqHere) {
      // dQ partial dS K for the warp's 32 rows x D / 4 columns, added to the fp32 accumulator with
      // vector reductions (scaled by s in dq_convert).
      float acc[2][Cfg::kDqNBlocks][4];
      zero_fill(acc);
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) load_a<PTile>(a[mt], sS, dq_row0 + mt * 16, kk * 16);
#pragma unroll
        for (int nb = 0; nb < Cfg::kDqNBlocks; nb += 2) {
          uint32_t kb[4];
          load_b_kn<KVTile>(kb, sK, kk * 16, dq_col0 + nb * 8);
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            mma_16816<T>(acc[mt][nb], a[mt], kb[0], kb[1]);
            mma_16816<T>(acc[mt][nb + 1], a[mt], kb[2], kb[3]);
          }
        }
      }
      // (the warp's first row's address once, the rest immediate offsets; a step of whole rows adds
      // without per-row checks, so the base is not recomputed per branch)
      const int row_g = q0 + dq_row0 + g;
      float* dst0 = p.dq_accum + ((static_cast<std::int64_t>(b) * s.heads_q + hk * group + gh) * s.seq_q + row_g) * D + dq_col0 + 2 * t;
      const auto add_rows = [&](auto row_inside) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            if (!row_inside(row_g + mt * 16 + 8 * r)) continue;
            float* dst = dst0 + (mt * 16 + 8 * r) * D;
#pragma unroll
            for (int nb = 0; nb < Cfg::kDqNBlocks; ++nb) {
              // one vector reduction per pair (REDG.E.ADD.F32x2; it flushes fp32 subnormals, below 2^-126)
              atomicAdd(reinterpret_cast<float2*>(dst + nb * 8), make_float2(acc[mt][nb][2 * r], acc[mt][nb][2 * r + 1]));
            }
          }
        }
      };
      if (q0 + kBlockM <= s.seq_q) {
        add_rows([](int) { return true; });
      } else {
        add_rows([&](int row) { return row < s.seq_q; });
      }
    }
    gh = next_gh, m_tile = next_m;
  }
  cp_async_wait<0>();  // (no query tile: the K, V load is still in flight)

  T* dk_out = static_cast<T*>(p.dk.data) + b * p.dk.batch + hk * p.dk.head;
  T* dv_out = static_cast<T*>(p.dv.data) + b * p.dv.batch + hk * p.dv.head;
  const std::uint64_t row_base = (static_cast<std::uint64_t>(b) * s.heads_kv + hk) * s.seq_k;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + kv_key0 + mt * 16 + g + 8 * r;
      if (key >= s.seq_k) continue;
      const std::uint64_t index0 = (row_base + key) * D;
#pragma unroll
      for (int nb = 0; nb < Cfg::kKvNBlocks; ++nb) {
        const int col = kv_col0 + nb * 8 + 2 * t;
        store_pair<T>(dk_out + key * p.dk.row + col, s.scale * dk[mt][nb][2 * r], s.scale * dk[mt][nb][2 * r + 1], p.rounding,
                      p.grad_stream, index0 + col);
        store_pair<T>(dv_out + key * p.dv.row + col, dv[mt][nb][2 * r], dv[mt][nb][2 * r + 1], p.rounding, p.grad_stream, index0 + col);
      }
    }
  }
}

}  // namespace fc::kernels::cuda
