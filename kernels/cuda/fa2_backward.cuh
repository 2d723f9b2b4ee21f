// FlashAttention-2's backward on mma.sync tensor cores (EQUATIONS.md section 2), in three kernels:
//   delta     D = rowsum(dO o O) from the stored O, in fp32
//   dk_dv     a block owns kBlockN keys of one kv head and walks every query row that sees them (all
//             query heads of its GQA group, in order): S^T = K Q^T, P^T, dP^T = V dO^T,
//             dS^T = P^T o (dP^T - D), dV += P^T dO, dK += dS^T Q; written once, no atomics
//   dq        a block owns kBlockM query rows and walks the key tiles they see: S, P, dP = dO V^T, dS,
//             dQ += dS K; written once, no atomics (the deterministic mode: it recomputes S and dP
//             instead of adding dQ partials with atomics)
// and two other ways to get dQ out of the dk_dv pass (DqMode): FA2's fast mode, where each dk_dv step
// also forms its dQ partial dS K from dS^T staged in shared memory and adds it to an fp32 accumulator
// with atomics (5 products instead of 7, not bitwise reproducible: the order of the additions varies),
// and FA1's sequential mode (cuda.fa1), where one block walks every key tile of its kv head in order
// and adds s dS K_j to the accumulator with plain read-modify-writes (FA1's Algorithm 4, deterministic);
// dq_convert then rounds the accumulator to the storage format.
// Rounding points, the same as cpu.fa2's: P = exp2(fma(S, s log2 e, -L log2 e)) in fp32; dS from the
// fp32 P; P and dS rounded to the storage format (RN) as tensor-core operands; dK = s (dS^T Q) and
// dQ = s (dS K) scaled in fp32 at the end; every sum in fp32; outputs rounded per the policy.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/fa2_forward.cuh"
#include "kernels/cuda/output_store.cuh"
#include "kernels/cuda/tile_primitives.cuh"

namespace fc::kernels::cuda {

// D = rowsum(dO o O) in fp32: a row per d / 8 threads, each reading 16 bytes of O and of dO (vector
// loads: rows are 16-byte aligned), summed over the row's threads by shuffles. Launched with
// kConvertThreads threads and rows_per_block(d / 8) rows per block. With ZeroDqAccum each thread also
// zeroes its 8 entries of the fp32 dQ accumulator (logical [B, Hq, Nq, d]; 16-byte aligned): the zeroing of
// the backwards that sum dQ in fp32 (fa1, fa2.fast, fa3 fused), in the same pass over the rows instead of a
// separate memset before their dK/dV pass; and, where p.dq_ready is given (fa3 fused), its B x Hkv counts (rows
// 0 .. B Hkv - 1: there are B Hq Nq >= B Hkv rows).
constexpr int kConvertThreads = 256;
__host__ __device__ constexpr int rows_per_block(int threads_per_row) { return kConvertThreads / threads_per_row; }

template <class T, bool ZeroDqAccum>
__global__ void __launch_bounds__(kConvertThreads) delta_kernel(const BackwardParams p) {
  const AttentionShapeParams& s = p.shape;
  const int per_row = s.head_dim / 8;  // a power of two <= 32 (d in 64, 128): a row's threads share a warp
  const int rows = s.batch * s.heads_q * s.seq_q;
  const int r = blockIdx.x * rows_per_block(per_row) + threadIdx.x / per_row, c = threadIdx.x % per_row * 8;
  float sum = 0.f;
  if (r < rows) {
    const int n = r % s.seq_q, h = r / s.seq_q % s.heads_q, b = r / s.seq_q / s.heads_q;
    const uint4 o = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.o.data) + b * p.o.batch + h * p.o.head + n * p.o.row + c);
    const uint4 g =
        *reinterpret_cast<const uint4*>(static_cast<const T*>(p.dout.data) + b * p.dout.batch + h * p.dout.head + n * p.dout.row + c);
    const uint32_t ow[4] = {o.x, o.y, o.z, o.w}, gw[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 of = Storage<T>::unpack(ow[i]), gf = Storage<T>::unpack(gw[i]);
      sum = fmaf(of.x, gf.x, sum);
      sum = fmaf(of.y, gf.y, sum);
    }
    if constexpr (ZeroDqAccum) {
      float4* dst = reinterpret_cast<float4*>(p.dq_accum + static_cast<std::int64_t>(r) * s.head_dim + c);
      dst[0] = dst[1] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (p.dq_ready != nullptr && c == 0 && r < s.batch * s.heads_kv) p.dq_ready[r] = 0;  // (fa3 fused: the per-kv-head counts)
    }
  }
  for (int m = per_row / 2; m > 0; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (r < rows && c == 0) p.delta[r] = sum;
}

// Query rows per dk_dv step (and keys per dq tile): 64, or 32 at d = 128, where 64 spills (registers).
// FA1's backward runs the same pass with the same steps.
template <int D>
constexpr int kDkDvStep = D > 64 ? 32 : 64;

// How the dk_dv pass delivers dQ (see the top of the file).
enum class DqMode { separate_pass, atomic, sequential };

// Every element of a (multi-dimensional) register array of floats set to 0.
template <class Array>
__device__ inline void zero_fill(Array& a) {
  float* f = reinterpret_cast<float*>(&a);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Array) / sizeof(float)); ++i) f[i] = 0.f;
}

// The K and V tiles of a dK/dV block (kBlockN keys from key0 of kv head hk), by cp.async, one group.
template <int kBlockN, int D, int kThreads, class T>
__device__ inline void load_kv_tiles(const BackwardParams& p, int hk, int b, int key0, T* sK, T* sV) {
  const T* k = static_cast<const T*>(p.k.data) + b * p.k.batch + hk * p.k.head;
  const T* v = static_cast<const T*>(p.v.data) + b * p.v.batch + hk * p.v.head;
  load_tile_async<kBlockN, D, kThreads>(sK, k, p.k.row, key0, p.shape.seq_k);
  load_tile_async<kBlockN, D, kThreads>(sV, v, p.v.row, key0, p.shape.seq_k);
  cp_async_commit();
}

// L in log2 units for P = exp2(S s log2 e - L log2 e); a row with no visible key (L = -inf) gets +inf,
// so its P = exp2(-inf) = 0.
__device__ inline float lse_log2(float l) { return l == -INFINITY ? INFINITY : l * kLog2e; }

template <int D, int kWarps, int kBlockM>
struct DkDvConfig {
  static constexpr int kBlockN = 16 * kWarps;  // keys per block, 16 per warp
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMBlocks = kBlockM / 8;  // n8 blocks of S^T (query columns)
  static constexpr int kDBlocks = D / 8;
  static constexpr int kDSteps = D / 16;
  static constexpr int kMSteps = kBlockM / 16;
  using KVTile = SwizzledTile<kBlockN, D>;
  using QTile = SwizzledTile<kBlockM, D>;
  // dS^T staged for dQ = dS K (DqMode atomic and sequential): [key][query row], padded rows
  using DsTile = PaddedTile<kBlockN, kBlockM>;
  // dQ partial of a step ([kBlockM, D]): a grid of kDqWarpsM x kDqWarpsN warps, each kDqRows x kDqCols
  static constexpr int kDqWarpsN = kWarps < D / 16 ? kWarps : D / 16;  // at least two n8 blocks each
  static constexpr int kDqWarpsM = kWarps / kDqWarpsN;
  static constexpr int kDqCols = D / kDqWarpsN;
  static constexpr int kDqRows = kBlockM / kDqWarpsM;
  static constexpr int kDqNBlocks = kDqCols / 8;
  static constexpr int kDqMTiles = kDqRows / 16;
  static_assert(kDqRows % 16 == 0, "whole m16 tiles per warp");
  static_assert(kDqNBlocks % 2 == 0, "dQ columns per warp in pairs of n8 blocks");
  // K, V; two stages of (Q, dO) and of (L log2 e, D): step i + 1's load while step i computes
  static constexpr int kStageElements = 2 * kBlockM * D;  // Q and dO of one stage
  static constexpr int kSmemBytes = (2 * kBlockN * D + 2 * kStageElements) * 2 + 2 * 2 * kBlockM * 4;
  static constexpr int kSmemBytesWithDs = kSmemBytes + DsTile::kElements * 2;
};

// dQ's partial from one dk_dv step, dS K_j for the step's kBlockM query rows, added to the fp32
// accumulator p.dq_accum ([B, Hq, Nq, D] contiguous): with atomics (fast mode; scaled by s in
// dq_convert) or, in the sequential mode where this block is the only writer of these rows, as
// s (dS K_j) by a read-modify-write (cpu.fa1's dq += s dq_tile). A = dS from the staged dS^T
// (ldmatrix.trans), B = K_j from shared memory ([key][d]).
template <class T, int D, int kWarps, int kBlockM, DqMode kDq>
__device__ inline void add_dq_partial(const BackwardParams& p, const T* sDs, const T* sK, std::int64_t stat_row0, int q0) {
  using Cfg = DkDvConfig<D, kWarps, kBlockM>;
  using KVTile = typename Cfg::KVTile;
  using DsTile = typename Cfg::DsTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int col0 = warp % Cfg::kDqWarpsN * Cfg::kDqCols, row0 = warp / Cfg::kDqWarpsN * Cfg::kDqRows;
  float acc[Cfg::kDqMTiles][Cfg::kDqNBlocks][4];
#pragma unroll
  for (int mt = 0; mt < Cfg::kDqMTiles; ++mt) {
#pragma unroll
    for (int nb = 0; nb < Cfg::kDqNBlocks; ++nb) acc[mt][nb][0] = acc[mt][nb][1] = acc[mt][nb][2] = acc[mt][nb][3] = 0.f;
  }
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
    uint32_t a[Cfg::kDqMTiles][4];
#pragma unroll
    for (int mt = 0; mt < Cfg::kDqMTiles; ++mt) load_a_trans<DsTile>(a[mt], sDs, row0 + mt * 16, kk * 16);
#pragma unroll
    for (int nb = 0; nb < Cfg::kDqNBlocks; nb += 2) {
      uint32_t bf[4];
      load_b_kn<KVTile>(bf, sK, kk * 16, col0 + nb * 8);
#pragma unroll
      for (int mt = 0; mt < Cfg::kDqMTiles; ++mt) {
        mma_16816<T>(acc[mt][nb], a[mt], bf[0], bf[1]);
        mma_16816<T>(acc[mt][nb + 1], a[mt], bf[2], bf[3]);
      }
    }
  }
  const float s = p.shape.scale;
#pragma unroll
  for (int mt = 0; mt < Cfg::kDqMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = q0 + row0 + mt * 16 + g + 8 * r;
      if (row >= p.shape.seq_q) continue;
      float* dst = p.dq_accum + (stat_row0 + row) * D + col0 + 2 * t;
#pragma unroll
      for (int nb = 0; nb < Cfg::kDqNBlocks; ++nb) {
        float2* pair = reinterpret_cast<float2*>(dst + nb * 8);  // 8-byte aligned: D and 2t are even
        if constexpr (kDq == DqMode::atomic) {
          // one vector reduction per pair (SASS: REDG.E.ADD.F32x2; it flushes fp32 subnormals, below 2^-126)
          atomicAdd(pair, make_float2(acc[mt][nb][2 * r], acc[mt][nb][2 * r + 1]));
        } else {
          const float2 old = *pair;
          *pair = make_float2(old.x + s * acc[mt][nb][2 * r], old.y + s * acc[mt][nb][2 * r + 1]);
        }
      }
    }
  }
}

template <class T, int D, int kWarps, int kBlockM, DqMode kDq>
__device__ inline void dk_dv_key_tile(const BackwardParams& p, int n_tile, int hk, int b, unsigned char* smem_bytes) {
  using Cfg = DkDvConfig<D, kWarps, kBlockM>;
  using KVTile = typename Cfg::KVTile;
  using QTile = typename Cfg::QTile;
  using DsTile = typename Cfg::DsTile;
  constexpr int kBlockN = Cfg::kBlockN;
  constexpr bool kDqHere = kDq != DqMode::separate_pass;
  T* sK = reinterpret_cast<T*>(smem_bytes);
  T* sV = sK + kBlockN * D;
  T* sStage0 = sV + kBlockN * D;  // stage x: Q at sStage0 + x kStageElements, dO kBlockM D after it
  // L log2 e (+inf past Nq and for rows with no visible key) and D of stage x at sStat0 + x 2 kBlockM
  float* sStat0 = reinterpret_cast<float*>(sStage0 + 2 * Cfg::kStageElements);
  T* sDs = reinterpret_cast<T*>(sStat0 + 4 * kBlockM);  // dS^T, rounded to T (kDqHere only)

  const AttentionShapeParams& s = p.shape;
  const int group = s.heads_q / s.heads_kv;
  const int key0 = n_tile * kBlockN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int offset = s.causal_offset();
  const bool causal = s.mask != CausalMask::none;
  const float scale2 = s.scale * kLog2e;

  load_kv_tiles<kBlockN, D, Cfg::kThreads>(p, hk, b, key0, sK, sV);
  float dk[Cfg::kDBlocks][4], dv[Cfg::kDBlocks][4];
  zero_fill(dk);
  zero_fill(dv);
  const int my_key[2] = {key0 + warp * 16 + g, key0 + warp * 16 + g + 8};

  // Query rows that see any key of the tile: from the first key's diagonal on.
  const int first_row = causal ? max(0, key0 - offset) : 0;
  const int m_begin = first_row / kBlockM, tiles_m = (s.seq_q + kBlockM - 1) / kBlockM;
  // The steps: every query tile from m_begin on of each query head of the group, in order. Step i + 1's
  // Q and dO load (cp.async) and its L and D (registers) while step i computes.
  const int per_head = tiles_m - m_begin, steps = group * per_head;
  // (loaders at the group's first query head; a step adds its head's offset)
  const TileLoader<kBlockM, D, Cfg::kThreads, T> q_loader(
      static_cast<const T*>(p.q.data) + b * p.q.batch + static_cast<std::int64_t>(hk) * group * p.q.head, p.q.row);
  const TileLoader<kBlockM, D, Cfg::kThreads, T> g_loader(
      static_cast<const T*>(p.dout.data) + b * p.dout.batch + static_cast<std::int64_t>(hk) * group * p.dout.head, p.dout.row);
  // (a step is named by its query head in the group and its query tile, advanced without a division)
  const auto issue_step = [&](int gh, int m_tile, int stage, float& l_next, float& d_next) {
    const int h = hk * group + gh, q0 = m_tile * kBlockM;
    T* sQn = sStage0 + stage * Cfg::kStageElements;
    q_loader.load(sQn, q0, s.seq_q, gh * p.q.head);
    g_loader.load(sQn + kBlockM * D, q0, s.seq_q, gh * p.dout.head);
    cp_async_commit();
    static_assert(kBlockM <= Cfg::kThreads, "one row's statistics per thread");
    const std::int64_t row = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q + q0 + threadIdx.x;
    const bool inside = threadIdx.x < kBlockM && q0 + static_cast<int>(threadIdx.x) < s.seq_q;
    l_next = inside ? p.lse[row] : INFINITY;
    d_next = inside ? p.delta[row] : 0.f;
  };
  const auto store_stats = [&](int stage, float l, float d) {
    if (threadIdx.x < kBlockM) {
      sStat0[stage * 2 * kBlockM + threadIdx.x] = lse_log2(l);
      sStat0[stage * 2 * kBlockM + kBlockM + threadIdx.x] = d;
    }
  };
  if (steps > 0) {
    float l0, d0;
    issue_step(0, m_begin, 0, l0, d0);
    store_stats(0, l0, d0);
  }
  int gh = 0, m_tile = m_begin;  // this step's
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    const int h = hk * group + gh, q0 = m_tile * kBlockM;
    const int next_gh = m_tile + 1 < tiles_m ? gh : gh + 1, next_m = m_tile + 1 < tiles_m ? m_tile + 1 : m_begin;
    const std::int64_t stat_row0 = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q;
    cp_async_wait<0>();
    __syncthreads();  // this step's tiles and statistics are in; every warp is done with the other stage
    float l_next = 0.f, d_next = 0.f;
    if (step + 1 < steps) issue_step(next_gh, next_m, stage ^ 1, l_next, d_next);
    const T* sQ = sStage0 + stage * Cfg::kStageElements;
    const T* sG = sQ + kBlockM * D;  // dO
    const float* sL = sStat0 + stage * 2 * kBlockM;
    const float* sD = sL + kBlockM;
    {
      // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys against the tile's kBlockM queries.
      float st[Cfg::kMBlocks][4], dpt[Cfg::kMBlocks][4];
#pragma unroll
      for (int nb = 0; nb < Cfg::kMBlocks; ++nb) {
#pragma unroll
        for (int c = 0; c < 4; ++c) st[nb][c] = dpt[nb][c] = 0.f;
      }
#pragma unroll
      for (int kk = 0; kk < Cfg::kDSteps; kk += 2) {
        uint32_t ka[4], ka2[4], va[4], va2[4];
        load_a<KVTile>(ka, sK, warp * 16, kk * 16);
        load_a<KVTile>(ka2, sK, warp * 16, kk * 16 + 16);
        load_a<KVTile>(va, sV, warp * 16, kk * 16);
        load_a<KVTile>(va2, sV, warp * 16, kk * 16 + 16);
#pragma unroll
        for (int nb = 0; nb < Cfg::kMBlocks; ++nb) {
          uint32_t qb[4], gb[4];
          load_b_nk<QTile>(qb, sQ, nb * 8, kk * 16);
          load_b_nk<QTile>(gb, sG, nb * 8, kk * 16);
          mma_16816<T>(st[nb], ka, qb[0], qb[1]);
          mma_16816<T>(st[nb], ka2, qb[2], qb[3]);
          mma_16816<T>(dpt[nb], va, gb[0], gb[1]);
          mma_16816<T>(dpt[nb], va2, gb[2], gb[3]);
        }
      }
      // P^T and dS^T (fp32). Rows past Nq (and rows with no visible key) have L = +inf, so P = 0; keys
      // past Nk and the causal diagonal are masked only in steps that cross them.
      const bool needs_mask = key0 + kBlockN > s.seq_k || (causal && key0 + kBlockN - 1 > q0 + offset);
#pragma unroll
      for (int nb = 0; nb < Cfg::kMBlocks; ++nb) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = my_key[c / 2], qi = nb * 8 + 2 * t + c % 2, row = q0 + qi;
          const bool visible = !needs_mask || (key < s.seq_k && (!causal || key <= row + offset));
          const float pt = visible ? fast_exp2(fmaf(st[nb][c], scale2, -sL[qi])) : 0.f;
          st[nb][c] = pt;
          dpt[nb][c] = pt * (dpt[nb][c] - sD[qi]);
        }
      }
      // dV += P^T dO, dK += dS^T Q: P^T and dS^T rounded to T from registers.
#pragma unroll
      for (int kk = 0; kk < Cfg::kMSteps; ++kk) {
        uint32_t pa[4], sa[4];
        a_from_c<T>(pa, st[2 * kk], st[2 * kk + 1]);
        a_from_c<T>(sa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
        for (int db = 0; db < Cfg::kDBlocks; db += 2) {
          uint32_t gb[4], qb[4];
          load_b_kn<QTile>(gb, sG, kk * 16, db * 8);
          load_b_kn<QTile>(qb, sQ, kk * 16, db * 8);
          mma_16816<T>(dv[db], pa, gb[0], gb[1]);
          mma_16816<T>(dv[db + 1], pa, gb[2], gb[3]);
          mma_16816<T>(dk[db], sa, qb[0], qb[1]);
          mma_16816<T>(dk[db + 1], sa, qb[2], qb[3]);
        }
        if constexpr (kDqHere) {
          // dS^T rows (keys) warp * 16 + g and + 8, query columns 16 kk + 2t.. and + 8: the A fragment's words
          const int key = warp * 16 + g, col = kk * 16 + 2 * t;
          *reinterpret_cast<uint32_t*>(sDs + DsTile::offset(key, col)) = sa[0];
          *reinterpret_cast<uint32_t*>(sDs + DsTile::offset(key + 8, col)) = sa[1];
          *reinterpret_cast<uint32_t*>(sDs + DsTile::offset(key, col + 8)) = sa[2];
          *reinterpret_cast<uint32_t*>(sDs + DsTile::offset(key + 8, col + 8)) = sa[3];
        }
      }
      if constexpr (kDqHere) {
        __syncthreads();  // all of dS^T staged
        add_dq_partial<T, D, kWarps, kBlockM, kDq>(p, sDs, sK, stat_row0, q0);
      }
    }
    if (step + 1 < steps) store_stats(stage ^ 1, l_next, d_next);  // (nobody reads that stage before the next barrier)
    gh = next_gh, m_tile = next_m;
  }
  cp_async_wait<0>();  // (no query tile: the K, V load is still in flight)

  T* dk_out = static_cast<T*>(p.dk.data) + b * p.dk.batch + hk * p.dk.head;
  T* dv_out = static_cast<T*>(p.dv.data) + b * p.dv.batch + hk * p.dv.head;
  const std::uint64_t row_base = (static_cast<std::uint64_t>(b) * s.heads_kv + hk) * s.seq_k;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = my_key[r];
    if (key >= s.seq_k) continue;
    const std::uint64_t index0 = (row_base + key) * D;
#pragma unroll
    for (int db = 0; db < Cfg::kDBlocks; ++db) {
      const int col = db * 8 + 2 * t;
      store_pair<T>(dk_out + key * p.dk.row + col, s.scale * dk[db][2 * r], s.scale * dk[db][2 * r + 1], p.rounding, p.grad_stream,
                    index0 + col);
      store_pair<T>(dv_out + key * p.dv.row + col, dv[db][2 * r], dv[db][2 * r + 1], p.rounding, p.grad_stream, index0 + col);
    }
  }
}

// grid (key tiles, kv heads, batch): one key tile per block; with DqMode::sequential (FA1) grid
// (1, kv heads, batch) and the block walks the key tiles in order.
template <class T, int D, int kWarps, int kBlockM, DqMode kDq>
__global__ void __launch_bounds__(32 * kWarps) dk_dv_kernel(const BackwardParams p) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  const int hk = blockIdx.y, b = blockIdx.z;
  if constexpr (kDq == DqMode::sequential) {
    constexpr int kBlockN = DkDvConfig<D, kWarps, kBlockM>::kBlockN;
    for (int n_tile = 0; n_tile * kBlockN < p.shape.seq_k; ++n_tile) {
      __syncthreads();  // every warp is done with the previous key tile's shared memory
      dk_dv_key_tile<T, D, kWarps, kBlockM, kDq>(p, n_tile, hk, b, smem_bytes);
    }
  } else {
    dk_dv_key_tile<T, D, kWarps, kBlockM, kDq>(p, blockIdx.x, hk, b, smem_bytes);
  }
}

// dQ = factor x the fp32 accumulator, rounded to T per the policy (factor s after the atomic mode,
// 1 after the sequential one, whose partials are already scaled): a row per d / 4 threads, each
// converting 4 values (one 16-byte load). kConvertThreads threads, rows_per_block(d / 4) rows a block.
// The row and the first of the 4 columns that this thread of block `block` converts:
struct DqConvertSlot {
  int row, col;
};
__device__ inline DqConvertSlot dq_convert_slot(const AttentionShapeParams& s, int block) {
  const int per_row = s.head_dim / 4;
  return {block * rows_per_block(per_row) + static_cast<int>(threadIdx.x) / per_row, static_cast<int>(threadIdx.x) % per_row * 4};
}
template <class T>
__device__ inline void convert_dq4(const BackwardParams& p, float factor, DqConvertSlot slot) {
  const AttentionShapeParams& s = p.shape;
  const int r = slot.row, col = slot.col;
  if (r >= s.batch * s.heads_q * s.seq_q) return;
  const int n = r % s.seq_q, h = r / s.seq_q % s.heads_q, b = r / s.seq_q / s.heads_q;
  const std::int64_t index = static_cast<std::int64_t>(r) * s.head_dim + col;  // logical [B, Hq, Nq, d] index
  // (__ldcg: an L2 read. The overlapped conversion reads the accumulator while the pass that writes it still runs, where a
  // read through the non-coherent path would be wrong; after its acquire, the plain path would do too)
  const float4 x = __ldcg(reinterpret_cast<const float4*>(p.dq_accum + index));
  T* dst = static_cast<T*>(p.dq.data) + b * p.dq.batch + h * p.dq.head + n * p.dq.row + col;
  store_pair<T>(dst, factor * x.x, factor * x.y, p.rounding, p.grad_stream, static_cast<std::uint64_t>(index));
  store_pair<T>(dst + 2, factor * x.z, factor * x.w, p.rounding, p.grad_stream, static_cast<std::uint64_t>(index + 2));
}
template <class T>
__global__ void __launch_bounds__(kConvertThreads) dq_convert_kernel(const BackwardParams p, float factor) {
  convert_dq4<T>(p, factor, dq_convert_slot(p.shape, blockIdx.x));
}

template <int D, int kWarps, int kBlockN>
using DqConfig = Fa2ForwardConfig<D, kWarps, kBlockN, 1>;

template <class T, int D, int kWarps, int kBlockN>
__global__ void __launch_bounds__(32 * kWarps) dq_kernel(const BackwardParams p) {
  using Cfg = DqConfig<D, kWarps, kBlockN>;
  using QTile = typename Cfg::QTile;
  using KVTile = typename Cfg::KVTile;
  constexpr int kBlockM = Cfg::kBlockM;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  T* sQ = reinterpret_cast<T*>(smem_bytes);
  T* sG = sQ + kBlockM * D;  // dO
  T* sK = sG + kBlockM * D;
  T* sV = sK + kBlockN * D;

  const AttentionShapeParams& s = p.shape;
  const int tiles_m = (s.seq_q + kBlockM - 1) / kBlockM;
  const int m_tile = query_tile_of_block(s, tiles_m);
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (s.heads_q / s.heads_kv);
  const int row0 = m_tile * kBlockM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int offset = s.causal_offset();
  const bool causal = s.mask != CausalMask::none;
  const float scale2 = s.scale * kLog2e;

  const T* q = static_cast<const T*>(p.q.data) + b * p.q.batch + h * p.q.head;
  const T* dout = static_cast<const T*>(p.dout.data) + b * p.dout.batch + h * p.dout.head;
  const T* k = static_cast<const T*>(p.k.data) + b * p.k.batch + hk * p.k.head;
  const T* v = static_cast<const T*>(p.v.data) + b * p.v.batch + hk * p.v.head;

  const int last_row = min(row0 + kBlockM, s.seq_q) - 1;
  const int key_end = causal ? max(0, min(s.seq_k, last_row + offset + 1)) : s.seq_k;
  const int n_tiles = (key_end + kBlockN - 1) / kBlockN;

  load_tile_async<kBlockM, D, Cfg::kThreads>(sQ, q, p.q.row, row0, s.seq_q);
  load_tile_async<kBlockM, D, Cfg::kThreads>(sG, dout, p.dout.row, row0, s.seq_q);
  if (n_tiles > 0) load_tile_async<kBlockN, D, Cfg::kThreads>(sK, k, p.k.row, 0, s.seq_k);
  cp_async_commit();

  const int my_row[2] = {row0 + warp * 16 + g, row0 + warp * 16 + g + 8};
  const std::int64_t stat_row0 = (static_cast<std::int64_t>(b) * s.heads_q + h) * s.seq_q;
  float l2[2], dd[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool inside = my_row[r] < s.seq_q;
    const float l = inside ? p.lse[stat_row0 + my_row[r]] : INFINITY;
    l2[r] = l == -INFINITY ? INFINITY : l * kLog2e;
    dd[r] = inside ? p.delta[stat_row0 + my_row[r]] : 0.f;
  }
  float acc[Cfg::kDBlocks][4];
#pragma unroll
  for (int i = 0; i < Cfg::kDBlocks; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  uint32_t qf[Cfg::kDSteps][4], gf[Cfg::kDSteps][4];
  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<0>();
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < Cfg::kDSteps; ++kk) {
        load_a<QTile>(qf[kk], sQ, warp * 16, kk * 16);
        load_a<QTile>(gf[kk], sG, warp * 16, kk * 16);
      }
    }
    load_tile_async<kBlockN, D, Cfg::kThreads>(sV, v, p.v.row, j * kBlockN, s.seq_k);
    cp_async_commit();

    float sc[Cfg::kNBlocks][4], dp[Cfg::kNBlocks][4];
#pragma unroll
    for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
#pragma unroll
      for (int c = 0; c < 4; ++c) sc[nb][c] = dp[nb][c] = 0.f;
    }
#pragma unroll
    for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
#pragma unroll
      for (int kk = 0; kk < Cfg::kDSteps; kk += 2) {
        uint32_t bf[4];
        load_b_nk<KVTile>(bf, sK, nb * 8, kk * 16);
        mma_16816<T>(sc[nb], qf[kk], bf[0], bf[1]);
        mma_16816<T>(sc[nb], qf[kk + 1], bf[2], bf[3]);
      }
    }
    cp_async_wait<0>();  // V_j
    __syncthreads();
#pragma unroll
    for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
#pragma unroll
      for (int kk = 0; kk < Cfg::kDSteps; kk += 2) {
        uint32_t bf[4];
        load_b_nk<KVTile>(bf, sV, nb * 8, kk * 16);
        mma_16816<T>(dp[nb], gf[kk], bf[0], bf[1]);
        mma_16816<T>(dp[nb], gf[kk + 1], bf[2], bf[3]);
      }
    }
    const int col0 = j * kBlockN;
    const bool needs_mask = col0 + kBlockN > s.seq_k || (causal && col0 + kBlockN - 1 > row0 + warp * 16 + offset);
#pragma unroll
    for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c / 2, col = col0 + nb * 8 + 2 * t + c % 2;
        const bool visible = !needs_mask || (col < s.seq_k && (!causal || col <= my_row[r] + offset));
        const float pv = visible ? fast_exp2(fmaf(sc[nb][c], scale2, -l2[r])) : 0.f;
        dp[nb][c] = pv * (dp[nb][c] - dd[r]);
      }
    }
    // dQ += dS K (K as [k = key][n = d])
#pragma unroll
    for (int kk = 0; kk < Cfg::kNSteps; ++kk) {
      uint32_t sa[4];
      a_from_c<T>(sa, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int db = 0; db < Cfg::kDBlocks; db += 2) {
        uint32_t bf[4];
        load_b_kn<KVTile>(bf, sK, kk * 16, db * 8);
        mma_16816<T>(acc[db], sa, bf[0], bf[1]);
        mma_16816<T>(acc[db + 1], sa, bf[2], bf[3]);
      }
    }
    __syncthreads();  // every warp is done with K_j and V_j
    if (j + 1 < n_tiles) {
      load_tile_async<kBlockN, D, Cfg::kThreads>(sK, k, p.k.row, (j + 1) * kBlockN, s.seq_k);
      cp_async_commit();
    }
  }
  cp_async_wait<0>();

  T* dq = static_cast<T*>(p.dq.data) + b * p.dq.batch + h * p.dq.head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = my_row[r];
    if (row >= s.seq_q) continue;
    const std::uint64_t index0 = static_cast<std::uint64_t>(stat_row0 + row) * D;
#pragma unroll
    for (int db = 0; db < Cfg::kDBlocks; ++db) {
      const int col = db * 8 + 2 * t;
      store_pair<T>(dq + row * p.dq.row + col, s.scale * acc[db][2 * r], s.scale * acc[db][2 * r + 1], p.rounding, p.grad_stream,
                    index0 + col);
    }
  }
}

}  // namespace fc::kernels::cuda
