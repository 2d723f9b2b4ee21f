// cuda.fa3, step 1 of kernels/cuda/NOTES.md's plan: FlashAttention-3's forward with one warpgroup per 64
// query rows. Q by TMA once; K and V tiles of 128 keys through a 2-stage TMA ring (one mbarrier per
// stage, refilled by thread 0 once the warpgroup's products on it are complete); S = Q K^T by wgmma
// m64n128k16 from shared memory (both K-major); the online softmax in registers, FA2's arithmetic
// (fa2_forward.cuh: exp2 in log2 units, the row max by quads, masks only on tiles that cross Nk or the
// diagonal); P rounded to bf16 in registers and O += P V by wgmma with A from registers and V's tile as
// an MN-major B (imm-trans-b; the descriptor checked by HopperPrimitives.IdentityTimesVFromAnMnMajorTileIsExact).
// No producer warp, no ping-pong, no overlap of softmax and products yet (steps 2 and 3).
//
// Shared memory (dynamic, 1024-byte aligned: the 128-byte swizzle's atom): Q as 2 boxes of 64 rows x 64
// d (8 KiB each), then per stage K as 2 boxes of 128 keys x 64 d (16 KiB each), then per stage V the same.
#include "kernels/cuda/fa3_kernels.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda/hopper/tensor_map.hpp"
#include "kernels/cuda/hopper/wgmma_tma.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/output_store.cuh"
#include "kernels/cuda/tile_primitives.cuh"

namespace fc::kernels::cuda {
namespace {

using namespace hopper;

constexpr int kHeadDim = 128;
constexpr int kBlockM = 64, kBlockN = 128;
constexpr unsigned kQBox = kBlockM * 128, kKVBox = kBlockN * 128;  // bytes: rows x 64 bf16
constexpr unsigned kStageBytes = 2 * kKVBox;                         // one of K or V: two d halves
constexpr std::size_t kSmemBytes = 2 * kQBox + 2 * 2 * kStageBytes + 1024;
constexpr float kLog2e = 1.4426950408889634f;

__global__ void __launch_bounds__(128, 1) fa3_forward_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                                                             const __grid_constant__ CUtensorMap v_map, const ForwardParams p) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sQ = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t{1023});
  unsigned char* sK = sQ + 2 * kQBox;      // stage s at + s kStageBytes
  unsigned char* sV = sK + 2 * kStageBytes;
  __shared__ alignas(8) std::uint64_t q_full, kv_full[2];

  const AttentionShapeParams& s = p.shape;
  const int m0 = blockIdx.x * kBlockM, h = blockIdx.y, b = blockIdx.z, hk = h / (s.heads_q / s.heads_kv);
  const bool causal = s.mask != CausalMask::none;
  const int offset = s.causal_offset();
  const int last_row = min(m0 + kBlockM, s.seq_q) - 1;
  const int key_end = causal ? max(0, min(s.seq_k, last_row + offset + 1)) : s.seq_k;
  const int n_tiles = (key_end + kBlockN - 1) / kBlockN;

  const auto issue_kv = [&](int j) {  // thread 0: tile j's K and V into stage j % 2
    const int stage = j & 1;
    mbarrier_arrive_expect_tx(&kv_full[stage], 2 * kStageBytes);
    for (int half = 0; half < 2; ++half) {
      tma_load_4d(sK + stage * kStageBytes + half * kKVBox, &k_map, &kv_full[stage], 64 * half, j * kBlockN, hk, b);
      tma_load_4d(sV + stage * kStageBytes + half * kKVBox, &v_map, &kv_full[stage], 64 * half, j * kBlockN, hk, b);
    }
  };
  if (threadIdx.x == 0) {
    mbarrier_init(&q_full, 1), mbarrier_init(&kv_full[0], 1), mbarrier_init(&kv_full[1], 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&q_full, 2 * kQBox);
    tma_load_4d(sQ, &q_map, &q_full, 0, m0, h, b);
    tma_load_4d(sQ + kQBox, &q_map, &q_full, 64, m0, h, b);
    for (int j = 0; j < 2 && j < n_tiles; ++j) issue_kv(j);
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int row0 = m0 + 16 * warp + g;  // this thread's rows: row0 and row0 + 8
  const float scale2 = s.scale * kLog2e;
  float o[16][4];  // O's accumulator: o[j][0..1] row0, cols 8 j + 2 t + {0, 1}; o[j][2..3] row0 + 8
#pragma unroll
  for (auto& x : o) x[0] = x[1] = x[2] = x[3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  mbarrier_wait(&q_full, 0);

  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j & 1;
    mbarrier_wait(&kv_full[stage], (j >> 1) & 1);
    // S = Q K_j^T: 8 k16 steps, steps 0-3 in the first d half's boxes, 4-7 in the second
    float sc[16][4];
#pragma unroll
    for (auto& x : sc) x[0] = x[1] = x[2] = x[3] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kHeadDim / 16; ++k) {
      const std::uint64_t a = wgmma_descriptor_advance(wgmma_descriptor_sw128(sQ + (k / 4) * kQBox), k % 4);
      const std::uint64_t bk = wgmma_descriptor_advance(wgmma_descriptor_sw128(sK + stage * kStageBytes + (k / 4) * kKVBox), k % 4);
      wgmma_m64n128k16_bf16_ss(reinterpret_cast<float(&)[64]>(sc), a, bk, k > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();

    // The online softmax (fa2_forward.cuh's arithmetic): masks only where the tile crosses Nk or the
    // diagonal for some row of this warp.
    const int col0 = j * kBlockN;
    const bool masked = !(scale2 > 0.f) || col0 + kBlockN > s.seq_k || (causal && col0 + kBlockN - 1 > m0 + 16 * warp + offset);
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < 16; ++nb) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = sc[nb][2 * r + c];
          if (masked) {
            const int col = col0 + nb * 8 + 2 * t + c;
            if (col >= s.seq_k || (causal && col > row0 + 8 * r + offset)) x = -INFINITY;
            tile_max = fmaxf(tile_max, x == -INFINITY ? -INFINITY : x * scale2);
          } else {
            tile_max = fmaxf(tile_max, x * scale2);
          }
        }
      }
      tile_max = quad_max(tile_max);
      const float m_new = fmaxf(m_run[r], tile_max);
      alpha[r] = m_new == m_run[r] ? 1.f : fast_exp2(m_run[r] - m_new);
      m_run[r] = m_new;
      l_run[r] *= alpha[r];
    }
#pragma unroll
    for (auto& x : o) x[0] *= alpha[0], x[1] *= alpha[0], x[2] *= alpha[1], x[3] *= alpha[1];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float row_sum = 0.f;
      const float m = m_run[r];
#pragma unroll
      for (int nb = 0; nb < 16; ++nb) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = sc[nb][2 * r + c];
          x = x == -INFINITY ? 0.f : fast_exp2(fmaf(x, scale2, -m));
          row_sum += x;
        }
      }
      l_run[r] += row_sum;  // this thread's share; the quad's are summed at the end
    }

    // O += P V_j: P to bf16 A fragments (two adjacent n8 blocks of S per k16 step), V's tile MN-major
    std::uint32_t pa[8][4];
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) a_from_c<__nv_bfloat16>(pa[kk], sc[2 * kk], sc[2 * kk + 1]);
    const std::uint64_t dv = wgmma_descriptor_sw128_mn(sV + stage * kStageBytes, kKVBox);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) wgmma_m64n128k16_bf16_rs_tn(reinterpret_cast<float(&)[64]>(o), pa[kk], wgmma_descriptor_advance_mn(dv, kk), 1);
    wgmma_commit();
    wgmma_wait<0>();
    __syncthreads();  // every product on this stage is complete: thread 0 may refill it
    if (threadIdx.x == 0 && j + 2 < n_tiles) issue_kv(j + 2);
  }

  // O = acc / l, L = (m + log2 l) ln 2; a row with no visible key: O = 0, L = -inf. fa2_forward's epilogue.
  auto* out = static_cast<__nv_bfloat16*>(p.o.data) + b * p.o.batch + h * p.o.head;
  const std::uint64_t o_row_base = (static_cast<std::uint64_t>(b) * s.heads_q + h) * s.seq_q;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] = quad_sum(l_run[r]);
    const int row = row0 + 8 * r;
    if (row >= s.seq_q) continue;
    const bool empty = l_run[r] == 0.f;
    const float inv = empty ? 0.f : 1.f / l_run[r];
    const std::uint64_t index0 = (o_row_base + row) * kHeadDim;
#pragma unroll
    for (int nb = 0; nb < 16; ++nb) {
      const int col = nb * 8 + 2 * t;
      store_pair<__nv_bfloat16>(out + row * p.o.row + col, o[nb][2 * r] * inv, o[nb][2 * r + 1] * inv, p.rounding, p.o_stream, index0 + col);
    }
    if (t == 0) p.lse[o_row_base + row] = empty ? -INFINITY : static_cast<float>(static_cast<double>(m_run[r] + log2f(l_run[r])) * 0.6931471805599453);
  }
}

// A stride TMA accepts for a dimension of `count` entries: its own where it is used, or any valid one
// (the span of the dimension inside) where the dimension has one entry and the tensor's stride may be
// anything (PyTorch gives size-1 dimensions arbitrary strides).
std::int64_t usable_stride(std::int64_t stride, int count, std::int64_t inner_span) { return count == 1 ? inner_span : stride; }

struct MapStrides {
  std::int64_t batch, head, row;
  bool valid() const { return batch > 0 && head > 0 && row > 0 && batch % 8 == 0 && head % 8 == 0 && row % 8 == 0; }
};
MapStrides strides_of(const Strided& x, int batch, int heads, int rows) {
  MapStrides m;
  m.row = usable_stride(x.row, rows, kHeadDim);
  m.head = usable_stride(x.head, heads, m.row * rows);
  m.batch = usable_stride(x.batch, batch, m.head * heads);
  return m;
}
CUtensorMap map_of(const Strided& x, const AttentionShapeParams& s, int heads, int rows, std::uint32_t box_rows) {
  const MapStrides m = strides_of(x, s.batch, heads, rows);
  return make_tensor_map_bf16_sw128_bhnd(x.data, s.batch, heads, rows, kHeadDim, m.batch, m.head, m.row, box_rows);
}

}  // namespace

bool fa3_supports(const ForwardParams& p) {
  const AttentionShapeParams& s = p.shape;
  if (p.type != StorageType::bf16 || s.head_dim != kHeadDim || s.heads_kv < 1 || s.heads_q % s.heads_kv != 0) return false;
  const std::pair<const Strided*, int> tensors[] = {{&p.q, s.heads_q}, {&p.k, s.heads_kv}, {&p.v, s.heads_kv}};
  for (const auto& [x, heads] : tensors) {
    const int rows = x == &p.q ? s.seq_q : s.seq_k;
    if (!strides_of(*x, s.batch, heads, rows).valid() || reinterpret_cast<std::uintptr_t>(x->data) % 16 != 0) return false;
  }
  return true;
}

void fa3_forward(const ForwardParams& p, cudaStream_t stream) {
  if (!fa3_supports(p)) {
    throw std::runtime_error("cuda.fa3: bf16 with head dim 128, heads_q a multiple of heads_kv, a 16-byte aligned base and strides that are "
                             "multiples of 8 elements only (step 1)");
  }
  const AttentionShapeParams& s = p.shape;
  const CUtensorMap q_map = map_of(p.q, s, s.heads_q, s.seq_q, kBlockM);
  const CUtensorMap k_map = map_of(p.k, s, s.heads_kv, s.seq_k, kBlockN);
  const CUtensorMap v_map = map_of(p.v, s, s.heads_kv, s.seq_k, kBlockN);
  static const bool attribute_set = [] {
    return cudaFuncSetAttribute(fa3_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes)) == cudaSuccess;
  }();
  if (!attribute_set) throw std::runtime_error("cuda.fa3 forward: the device refuses " + std::to_string(kSmemBytes) + " bytes of shared memory");
  const dim3 grid((s.seq_q + kBlockM - 1) / kBlockM, s.heads_q, s.batch);
  fa3_forward_kernel<<<grid, 128, kSmemBytes, stream>>>(q_map, k_map, v_map, p);
  check_launch("cuda.fa3 forward (wgmma + TMA, one warpgroup)");
}

}  // namespace fc::kernels::cuda
