// FlashAttention-2's forward on mma.sync tensor cores: one thread block owns kBlockM query rows of one
// (batch, head) and walks the key tiles it can see with the online softmax (EQUATIONS.md section 1),
// keeping the unnormalised accumulator in registers; O = A / l and L = m + log l once at the end.
//
// Rounding points, the same as cpu.fa2's (kernels/cpu/flash_attention.cpp):
//   S = Q K^T   exact 16-bit products, fp32 accumulation (tensor-core order: a tree per k16 step)
//   m, l        fp32, logits in log2 units: p = exp2(fma(S, s log2 e, -m)), rescale by exp2(m - m')
//   l           sums the fp32 p (before rounding): each thread its columns, the quad's four at the end
//   P           rounded to the storage format (RN) as the A operand of P V
//   O           acc * (1 / l), rounded to the storage format per the policy (RN or SR), L in fp32
// exp2 is ex2.approx (2 ulp of fp32) where the CPU uses libm: an fp32-ulp difference, far below a
// 16-bit rounding.
//
// Work split: kWarps warps, warp w owns kMTiles x 16 consecutive rows of the block's query tile (each
// K and V fragment it loads feeds all of its m-tiles); with one m-tile Q's A fragments stay in
// registers for the whole key loop. K and V tiles (kBlockN keys) go through shared memory with
// cp.async in two stages: tile j + 1 loads while tile j is computed.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/output_store.cuh"
#include "kernels/cuda/tile_primitives.cuh"

namespace fc::kernels::cuda {

template <int D, int kWarps, int kBlockN, int kMTiles = 1>
struct Fa2ForwardConfig {
  static constexpr int kRowsPerWarp = 16 * kMTiles;  // kMTiles m16 tiles per warp share each K, V fragment
  static constexpr int kBlockM = kRowsPerWarp * kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kNBlocks = kBlockN / 8;  // n8 blocks of S
  static constexpr int kDBlocks = D / 8;        // n8 blocks of O
  static constexpr int kDSteps = D / 16;        // k16 steps of Q K^T
  static constexpr int kNSteps = kBlockN / 16;  // k16 steps of P V
  // One m-tile per warp keeps Q's fragments in registers for the whole key loop; two re-read them from
  // shared memory at every k-step (the registers go to the second tile's accumulators).
  static constexpr bool kQInRegisters = kMTiles == 1;
  using QTile = SwizzledTile<kBlockM, D>;
  using KVTile = SwizzledTile<kBlockN, D>;
  static constexpr int kStages = 2;  // K and V tiles in flight: j + 1 loads while j computes
  static constexpr int kSmemElements = kBlockM * D + kStages * 2 * kBlockN * D;  // Q, K[2], V[2]
  static constexpr int kSmemBytes = kSmemElements * 2;
};

constexpr float kLog2e = 1.4426950408889634f;

// The query tile a block owns: causal problems hand out the longest tiles first.
__device__ inline int query_tile_of_block(const AttentionShapeParams& s, int tiles) {
  return s.mask == CausalMask::none ? static_cast<int>(blockIdx.x) : tiles - 1 - static_cast<int>(blockIdx.x);
}

template <class T, int D, int kWarps, int kBlockN, int kMTiles>
__global__ void __launch_bounds__(32 * kWarps) fa2_forward_kernel(const ForwardParams p) {
  using Cfg = Fa2ForwardConfig<D, kWarps, kBlockN, kMTiles>;
  using QTile = typename Cfg::QTile;
  using KVTile = typename Cfg::KVTile;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  T* sQ = reinterpret_cast<T*>(smem_bytes);
  T* sK = sQ + Cfg::kBlockM * D;

  const AttentionShapeParams& s = p.shape;
  const int tiles_m = (s.seq_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  const int m_tile = query_tile_of_block(s, tiles_m);
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (s.heads_q / s.heads_kv);
  const int row0 = m_tile * Cfg::kBlockM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * Cfg::kRowsPerWarp;  // the warp's first row within the tile
  const int offset = s.causal_offset();
  const bool causal = s.mask != CausalMask::none;

  const T* q = static_cast<const T*>(p.q.data) + b * p.q.batch + h * p.q.head;
  const T* k = static_cast<const T*>(p.k.data) + b * p.k.batch + hk * p.k.head;
  const T* v = static_cast<const T*>(p.v.data) + b * p.v.batch + hk * p.v.head;

  // Keys this tile can see: up to its last row's diagonal.
  const int last_row = min(row0 + Cfg::kBlockM, s.seq_q) - 1;
  const int key_end = causal ? max(0, min(s.seq_k, last_row + offset + 1)) : s.seq_k;
  const int n_tiles = (key_end + kBlockN - 1) / kBlockN;

  T* const sK0 = sK;  // stage s of K at sK0 + s * kBlockN * D, of V at sV0 + s * kBlockN * D
  T* const sV0 = sK0 + Cfg::kStages * kBlockN * D;
  load_tile_async<Cfg::kBlockM, D, Cfg::kThreads>(sQ, q, p.q.row, row0, s.seq_q);
  const TileLoader<kBlockN, D, Cfg::kThreads, T> k_loader(k, p.k.row), v_loader(v, p.v.row);
  if (n_tiles > 0) {
    k_loader.load(sK0, 0, s.seq_k);
    v_loader.load(sV0, 0, s.seq_k);
  }
  cp_async_commit();

  float acc[kMTiles][Cfg::kDBlocks][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < Cfg::kDBlocks; ++i) acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.f;
  }
  // rows g and g + 8 of each of the warp's m-tiles
  float m_run[kMTiles][2], l_run[kMTiles][2];
  // (rows are recomputed where needed rather than held: registers are the limit at d = 128)
  const auto my_row = [&](int mt, int r) { return row0 + warp_row0 + mt * 16 + g + 8 * r; };
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) m_run[mt][r] = -INFINITY, l_run[mt][r] = 0.f;
  }
  const float scale2 = s.scale * kLog2e;
  const bool positive_scale = scale2 > 0.f;  // (the unmasked tile code needs it; see below)

  uint32_t qf[Cfg::kQInRegisters ? Cfg::kDSteps : 1][4];
  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<0>();  // K_j and V_j (and Q, the first time) have landed
    __syncthreads();     // ... for every thread; and every warp is done with tile j - 1's stage
    const T* sKj = sK0 + (j % Cfg::kStages) * kBlockN * D;
    const T* sVj = sV0 + (j % Cfg::kStages) * kBlockN * D;
    if (j + 1 < n_tiles) {
      T* sKn = sK0 + ((j + 1) % Cfg::kStages) * kBlockN * D;
      T* sVn = sV0 + ((j + 1) % Cfg::kStages) * kBlockN * D;
      k_loader.load(sKn, (j + 1) * kBlockN, s.seq_k);
      v_loader.load(sVn, (j + 1) * kBlockN, s.seq_k);
      cp_async_commit();
    }
    if constexpr (Cfg::kQInRegisters) {
      if (j == 0) {
#pragma unroll
        for (int kk = 0; kk < Cfg::kDSteps; ++kk) load_a<QTile>(qf[kk], sQ, warp_row0, kk * 16);
      }
    }

    // One key tile: S = Q K_j^T, the online softmax, O += P V_j. Written once per mask case so that
    // each is one branch-free block (ptxas interleaves one m-tile's softmax with the other's products
    // only within a basic block); only tiles that cross Nk or the causal diagonal pay for the mask.
    const int col0 = j * kBlockN;
    const auto tile = [&](auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
      // S = Q K_j^T (unscaled)
      float sc[kMTiles][Cfg::kNBlocks][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int nb = 0; nb < Cfg::kNBlocks; ++nb) sc[mt][nb][0] = sc[mt][nb][1] = sc[mt][nb][2] = sc[mt][nb][3] = 0.f;
      }
#pragma unroll
      for (int kk = 0; kk < Cfg::kDSteps; kk += 2) {
        uint32_t qa[kMTiles][2][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            if constexpr (Cfg::kQInRegisters) {
#pragma unroll
              for (int e = 0; e < 4; ++e) qa[mt][x][e] = qf[kk + x][e];
            } else {
              load_a<QTile>(qa[mt][x], sQ, warp_row0 + mt * 16, (kk + x) * 16);
            }
          }
        }
#pragma unroll
        for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
          uint32_t bf[4];
          load_b_nk<KVTile>(bf, sKj, nb * 8, kk * 16);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(sc[mt][nb], qa[mt][0], bf[0], bf[1]);
            mma_16816<T>(sc[mt][nb], qa[mt][1], bf[2], bf[3]);
          }
        }
      }

      // The online softmax, per row, in two sweeps. First the tile's row maxima, the new running max m'
      // and alpha = 2^(m - m') (selects, no branch; alpha = 1 while the max stands, and while no key has
      // been visible: m = m' = -inf). Only tiles that cross Nk or the causal diagonal pay for the mask:
      // there a hidden entry becomes -inf (excluded from the max, P = 0) whatever the sign of the scale.
      // The unmasked case takes max_j (S_ij scale2) = scale2 max_j S_ij (scale2 > 0, rounding is
      // monotone: one multiply per row); a negative scale goes through the masked code.
      float alpha[kMTiles][2];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float tile_max = -INFINITY;
#pragma unroll
          for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float& x = sc[mt][nb][2 * r + c];
              if constexpr (kMasked) {
                const int col = col0 + nb * 8 + 2 * t + c;
                if (col >= s.seq_k || (causal && col > my_row(mt, r) + offset)) x = -INFINITY;
                tile_max = fmaxf(tile_max, x == -INFINITY ? -INFINITY : x * scale2);
              } else {
                tile_max = fmaxf(tile_max, x);
              }
            }
          }
          if constexpr (!kMasked) tile_max *= scale2;
          tile_max = quad_max(tile_max);
          const float m_new = fmaxf(m_run[mt][r], tile_max);
          alpha[mt][r] = m_new == m_run[mt][r] ? 1.f : fast_exp2(m_run[mt][r] - m_new);
          m_run[mt][r] = m_new;
          l_run[mt][r] *= alpha[mt][r];
        }
      }
      // The accumulators are rescaled only when some row of the warp has a new max (one vote; late
      // tiles rarely raise it; alpha = 1 would multiply exactly anyway).
      bool rescale = false;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) rescale |= alpha[mt][0] != 1.f || alpha[mt][1] != 1.f;
      if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int i = 0; i < Cfg::kDBlocks; ++i) {
            acc[mt][i][0] *= alpha[mt][0], acc[mt][i][1] *= alpha[mt][0];
            acc[mt][i][2] *= alpha[mt][1], acc[mt][i][3] *= alpha[mt][1];
          }
        }
      }
      // Then P = 2^(S scale2 - m') and l += rowsum(P) from the fp32 P.
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float row_sum = 0.f;
          const float m = m_run[mt][r];
#pragma unroll
          for (int nb = 0; nb < Cfg::kNBlocks; ++nb) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float& x = sc[mt][nb][2 * r + c];
              if constexpr (kMasked) {
                x = x == -INFINITY ? 0.f : fast_exp2(fmaf(x, scale2, -m));
              } else {  // every entry visible, so m is finite
                x = fast_exp2(fmaf(x, scale2, -m));
              }
              row_sum += x;
            }
          }
          l_run[mt][r] += row_sum;  // this thread's share; the quad's shares are summed once at the end
        }
      }

      // O += P V_j, P rounded to T from the S registers
#pragma unroll
      for (int kk = 0; kk < Cfg::kNSteps; ++kk) {
        uint32_t pa[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) a_from_c<T>(pa[mt], sc[mt][2 * kk], sc[mt][2 * kk + 1]);
#pragma unroll
        for (int db = 0; db < Cfg::kDBlocks; db += 2) {
          uint32_t bf[4];
          load_b_kn<KVTile>(bf, sVj, kk * 16, db * 8);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_16816<T>(acc[mt][db], pa[mt], bf[0], bf[1]);
            mma_16816<T>(acc[mt][db + 1], pa[mt], bf[2], bf[3]);
          }
        }
      }
    };
    const bool needs_mask =
        !positive_scale || col0 + kBlockN > s.seq_k || (causal && col0 + kBlockN - 1 > row0 + warp_row0 + offset);
    if (needs_mask) {
      tile(std::true_type{});
    } else {
      tile(std::false_type{});
    }
  }
  // (With n_tiles == 0 the Q load is still in flight: wait before the block exits.)
  cp_async_wait<0>();

  // O = acc / l, L = (m + log2 l) ln 2; a row with no visible key: O = 0, L = -inf.
  T* o = static_cast<T*>(p.o.data) + b * p.o.batch + h * p.o.head;
  const std::uint64_t o_row_base = (static_cast<std::uint64_t>(b) * s.heads_q + h) * s.seq_q;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l_run[mt][r] = quad_sum(l_run[mt][r]);  // (every lane: the shuffles need the whole warp)
      const int row = my_row(mt, r);
      if (row >= s.seq_q) continue;
      const bool empty = l_run[mt][r] == 0.f;
      const float inv = empty ? 0.f : 1.f / l_run[mt][r];
      const std::uint64_t index0 = (o_row_base + row) * D;  // the logical index of (b, h, row, 0)
#pragma unroll
      for (int db = 0; db < Cfg::kDBlocks; ++db) {
        const int col = db * 8 + 2 * t;
        store_pair<T>(o + row * p.o.row + col, acc[mt][db][2 * r] * inv, acc[mt][db][2 * r + 1] * inv, p.rounding, p.o_stream,
                      index0 + col);
      }
      if (t == 0) {
        p.lse[o_row_base + row] =
            empty ? -INFINITY : static_cast<float>(static_cast<double>(m_run[mt][r] + log2f(l_run[mt][r])) * 0.6931471805599453);
      }
    }
  }
}

}  // namespace fc::kernels::cuda
