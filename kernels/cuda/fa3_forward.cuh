// The parts of FlashAttention-3's forward on Hopper that every operand format shares (kernels/cuda/NOTES.md,
// "cuda.fa3, cuda.fa4"): the online softmax (SoftmaxRule: FA3's and FA4's), the epilogue, the work-tile
// order, and the warp-specialised kernel fa3_forward_ws_kernel (a producer warpgroup issuing TMA copies into a
// K/V ring, two or three consumer warpgroups issuing wgmma in turn). What differs between 16-bit and FP8 operands is an
// Operands class, which the kernel calls for every format-specific step:
//   - Wide16Ops<T, D> (here): bf16 or fp16 Q, K, V; S by m64n128k16 with Q from shared memory (or, where the kernel
//     holds them, Q's fragments from registers), P rounded to T in registers, V's tile MN-major (cuda.fa3, cuda.fa4;
//     fa3_kernels.cu);
//   - E4m3Ops<Out, D> (fa3_fp8_ops.cuh): e4m3 Q, K and V^T with a power-of-two scale per block of 128
//     rows; S by m64n128k32 (QGMMA), P rounded to e4m3, V^T K-major (cuda.fa3.fp8).
// An Operands class provides: Out (O's storage type), kQBytes / kKBytes / kVBytes (one warpgroup's Q, one K
// and one V tile in shared memory), PFragments (what holds a group's P between pack and pv: A fragments in
// registers, k steps over a tile's keys) and kPBytes (a group's P tile in shared memory instead, when P V reads its A
// operand from there; 0 otherwise), kBlockScales (per-block exponents apply; then kQBlockRows, Q's rows per
// exponent, a multiple of a group's 64), kCanHoldQ (qk_held, S with Q's fragments from registers, exists; the kernel
// decides where they fit), kTurnAtExps (with turns, the overlapped loop's turns fall at the exponentials rather than at the
// issue), and the device functions load_q / load_k / load_v (TMA), qk (S = Q K^T),
// pack (P into its fragments, or into the group's tile sP) and pv (O += P V). kVRawBytes > 0: V's tiles land as stored
// (load_v into a ring of staging tiles of kVRawBytes) and the producer warpgroup's 128 threads rewrite each into the
// layout pv reads (transform_v), FA3's in-kernel transpose of FP8's V; 0: load_v lands them as pv reads them.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/hopper/tensor_map.hpp"
#include "kernels/cuda/hopper/wgmma_tma.cuh"
#include "kernels/cuda/output_store.cuh"
#include "kernels/cuda/tile_primitives.cuh"
#include "precision/exp2_emulated.hpp"

namespace fc::kernels::cuda::fa3 {

using namespace hopper;

constexpr int kGroupRows = 64, kBlockN = 128;  // query rows per warpgroup, keys per tile
// Bytes of a box of rows x 64 16-bit entries. The 16-bit forward's key tiles may be wider than kBlockN (Wide16Ops'
// BlockN: 176, FA3's for d = 128 without a mask).
template <int Rows>
constexpr unsigned kv_box_bytes = Rows * 128;
constexpr unsigned kQBox = kv_box_bytes<kGroupRows>, kKVBox = kv_box_bytes<kBlockN>;

// The element type T (__nv_bfloat16 or __half) and head dim D (64, 128, or 256 in cuda.fa4's forward) of a kernel: D / 64
// boxes along d.
template <class T, int D>
struct Tiles {
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  static constexpr bool kFp16 = std::is_same_v<T, __half>;
  static constexpr int kHalves = D / 64;
  static constexpr unsigned kQBytes = kHalves * kQBox;      // one warpgroup's Q
  static constexpr unsigned kTileBytes = kHalves * kKVBox;  // one K or V tile
};

constexpr float kLog2e = 1.4426950408889634f;

// Where one warpgroup's thread sits: its 64 rows from m0, its warp's 16 from warp_row0, its own two rows
// row0 and row0 + 8 (the accumulator layout in hopper/wgmma_tma.cuh), its column pair 2 t.
struct GroupThread {
  int m0, warp_row0, row0, t;
  __device__ GroupThread(int group_m0, int thread_in_group)
      : m0(group_m0), warp_row0(group_m0 + 16 * (thread_in_group / 32)), row0(warp_row0 + (thread_in_group % 32) / 4), t(thread_in_group % 4) {}
};

// The keys this CTA's rows m0 .. last_row can see: tiles of BlockN keys 0 .. n_tiles - 1.
template <int BlockN = kBlockN>
__device__ inline int key_tiles(const AttentionShapeParams& s, int m0, int rows) {
  const int last_row = min(m0 + rows, s.seq_q) - 1;
  const int key_end = s.mask != CausalMask::none ? max(0, min(s.seq_k, last_row + s.causal_offset() + 1)) : s.seq_k;
  return (key_end + BlockN - 1) / BlockN;
}

// The query tiles of `rows` a key-tiled backward CTA owning the keys from k0 walks: those that can see one of its
// keys (rows from k0 - offset on under a causal mask, all otherwise), per_head of them for each query head of its GQA
// group in turn, steps in all (cuda.fa3's dK/dV pass, Flash Hog's key pass).
struct RowTileWalk {
  int first_tile, per_head, steps;
};
__device__ inline RowTileWalk row_tiles_seeing(const AttentionShapeParams& s, int k0, int rows) {
  const int q_tiles = (s.seq_q + rows - 1) / rows;
  const int first_tile = s.mask != CausalMask::none ? min(q_tiles, max(0, k0 - s.causal_offset()) / rows) : 0;
  const int per_head = q_tiles - first_tile;
  return {first_tile, per_head, per_head * (s.heads_q / s.heads_kv)};
}

// S = Q K^T for the warpgroup's 64 rows and a tile of BlockN keys (128, 176, or 64 at d = 256): D / 16 k16 steps, 4
// per 64-wide box of d. Issued and committed as one group; the caller waits for it.
template <class T, int D, int BlockN = kBlockN>
__device__ inline void issue_qk(float (&sc)[BlockN / 8][4], const unsigned char* sQ, const unsigned char* sK) {
  static_assert(BlockN == 128 || BlockN == 176 || BlockN == 64, "key tiles of 128, 176 or 64");
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    const std::uint64_t a = wgmma_descriptor_advance(wgmma_descriptor_sw128(sQ + (k / 4) * kQBox), k % 4);
    const std::uint64_t b = wgmma_descriptor_advance(wgmma_descriptor_sw128(sK + (k / 4) * kv_box_bytes<BlockN>), k % 4);
    if constexpr (BlockN == 128) {
      wgmma_m64n128k16_ss<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[64]>(sc), a, b, k > 0);
    } else if constexpr (BlockN == 64) {
      wgmma_m64n64k16_ss<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[32]>(sc), a, b, k > 0);
    } else {
      wgmma_m64n176k16_ss<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[88]>(sc), a, b, k > 0);
    }
  }
  wgmma_commit();
}

// S = Q K^T as issue_qk, with the A fragments of Q's first Held k16 steps held in registers (load_fragments, once a
// work tile) instead of read from shared memory by every S: wgmma's A from registers for those, from sQ by descriptor
// for the rest (Held = D / 16: all of them, sQ unused); K's tile K-major by descriptor. Within one S the steps
// accumulate in the same order either way, so the split does not change a bit.
template <class T, int D, int Held>
__device__ inline void issue_qk_held(float (&sc)[kBlockN / 8][4], const std::uint32_t (&qf)[Held][4], const unsigned char* sQ, const unsigned char* sK) {
  static_assert(Held >= 1 && Held <= D / 16, "k16 steps of Q");
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    const std::uint64_t b = wgmma_descriptor_advance(wgmma_descriptor_sw128(sK + (k / 4) * kKVBox), k % 4);
    if (k < Held) {
      // (k < Held ? k : 0: the index stays inside qf in the unrolled copies where this branch is dead)
      wgmma_m64n128k16_rs_nt<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[64]>(sc), qf[k < Held ? k : 0], b, k > 0);
    } else {
      const std::uint64_t a = wgmma_descriptor_advance(wgmma_descriptor_sw128(sQ + (k / 4) * kQBox), k % 4);
      wgmma_m64n128k16_ss<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[64]>(sc), a, b, k > 0);
    }
  }
  wgmma_commit();
}

// An accumulator of 2 Steps n8 blocks (P, dS, ...) rounded to T as A fragments over its columns: k16 step kk from
// the two adjacent n8 blocks 2 kk and 2 kk + 1 (8 steps for the forward's 128 keys, 4 for a 64-wide tile).
template <class T, int Steps>
__device__ inline void a_fragments(std::uint32_t (&a)[Steps][4], const float (&c)[2 * Steps][4]) {
#pragma unroll
  for (int kk = 0; kk < Steps; ++kk) a_from_c<T>(a[kk], c[2 * kk], c[2 * kk + 1]);
}

// The 64-row tile at (row0, h, b) of a [B, H, N, D] 16-bit tensor map into dst, completing on bar: D / 64 boxes of
// kQBox (a warpgroup's Q here; any 64-row tile in Flash Hog's passes, hog_wgmma.cuh).
template <class T, int D>
__device__ inline void load_rows64(unsigned char* dst, const CUtensorMap* map, std::uint64_t* bar, int row0, int h, int b) {
  for (int half = 0; half < Tiles<T, D>::kHalves; ++half) tma_load_4d(dst + half * kQBox, map, bar, 64 * half, row0, h, b);
}

// acc += A B over Steps k16 steps, n = D: A as Steps fragments from registers, B an MN-major tile by its
// descriptor b (advanced one k16 block a step). The caller fences and commits. (P V here; the backward's dV and dK.)
template <class T, int D, int Steps>
__device__ inline void mma_rs_mn_b(float (&acc)[D / 8][4], const std::uint32_t (&a)[Steps][4], std::uint64_t b) {
#pragma unroll
  for (int kk = 0; kk < Steps; ++kk) {
    if constexpr (D == 256) {
      wgmma_m64n256k16_rs_tn<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[128]>(acc), a[kk], wgmma_descriptor_advance_mn(b, kk), 1);
    } else if constexpr (D == 128) {
      wgmma_m64n128k16_rs_tn<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[64]>(acc), a[kk], wgmma_descriptor_advance_mn(b, kk), 1);
    } else {
      wgmma_m64n64k16_rs_tn<Tiles<T, D>::kFp16>(reinterpret_cast<float(&)[32]>(acc), a[kk], wgmma_descriptor_advance_mn(b, kk), 1);
    }
  }
}

// O += P V with P's A fragments from registers (BlockN / 16 k16 steps) and V's tile MN-major. Issued and committed
// as one group; the caller waits for it, and neither o nor pa may be touched before (ptxas keeps them live until
// the wait).
template <class T, int D, int BlockN = kBlockN>
__device__ inline void issue_pv(float (&o)[D / 8][4], const std::uint32_t (&pa)[BlockN / 16][4], const unsigned char* sV) {
  const std::uint64_t dv = wgmma_descriptor_sw128_mn(sV, kv_box_bytes<BlockN>);  // (D = 64: one n block, the offset unused)
  wgmma_fence();
  mma_rs_mn_b<T, D, BlockN / 16>(o, pa, dv);
  wgmma_commit();
}

// P in shared memory (an Operands class's kPBytes > 0): a warpgroup's 64 rows of P as the K-major A operand of P V,
// boxes of 64 rows x 128 bytes with the 128-byte swizzle (Q's layout at d = 128: 16-byte chunk c of row r at c ^ (r % 8),
// the tile 1024-byte aligned), a k step 32 bytes of a row (k16 of 16-bit P, k32 of e4m3), four steps a box. The shared
// address of word i of this thread's A fragment for k step kk: the fragment's rows g and g + 8 (i odd) of its warp's 16,
// bytes 4 t .. 4 t + 3 of the step's first or (i >= 2) second 16 (hopper/wgmma_tma.cuh's and wgmma_e4m3.cuh's layouts),
// so the tile holds exactly what the register fragments would, and V's key order is unchanged. Written by stmatrix
// (m8n8.x4, b16): matrix i holds word i of every lane's fragment (row lane / 4 of its 8, bytes 4 (lane % 4) ..), so lane L
// gives the address of row L % 8 of matrix L / 8; one instruction stores a k step's four words where four st.shared
// did (NOTES "P's tile by stmatrix"), and each matrix's 8 rows fall in 8 different 16-byte bank groups.
// (box: the tile's box of k steps kk - kk % 4 .. + 3)
__device__ inline std::uint32_t p_box_row_address(const unsigned char* box, int kk) {
  const int lane = threadIdx.x % 32, i = lane / 8, row = 16 * ((threadIdx.x % 128) / 32) + lane % 8 + 8 * (i % 2), chunk = 2 * (kk % 4) + i / 2;
  return smem_address(box + row * 128 + ((chunk ^ (row % 8)) * 16));
}
// Steps k steps of A fragments (words[kk][i]) into the tile's Steps / 4 boxes, boxes[kk / 4] holding steps 4 (kk / 4) ..
// (each box 1024-byte aligned; they need not be adjacent), then the fence that orders them before the async proxy's
// reads (the P V wgmma, or a TMA store).
template <int Steps>
__device__ inline void store_p_boxes(unsigned char* const (&boxes)[(Steps + 3) / 4], const std::uint32_t (&words)[Steps][4]) {
#pragma unroll
  for (int kk = 0; kk < Steps; ++kk) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(p_box_row_address(boxes[kk / 4], kk)), "r"(words[kk][0]), "r"(words[kk][1]),
                 "r"(words[kk][2]), "r"(words[kk][3])
                 : "memory");
  }
  fence_proxy_async_shared();
}
// The same into one tile of adjacent boxes (kQBox apart). The caller's group barrier (the kernel's turn) must come
// between this and the P V.
template <int Steps>
__device__ inline void store_p_tile(unsigned char* tile, const std::uint32_t (&words)[Steps][4]) {
  unsigned char* boxes[(Steps + 3) / 4];
#pragma unroll
  for (int box = 0; box < (Steps + 3) / 4; ++box) boxes[box] = tile + box * kQBox;
  store_p_boxes<Steps>(boxes, words);
}

// O += P V with P's tile in shared memory (store_p_tile's layout, 128 keys: two boxes) and V's tile MN-major: 8 k16
// steps, both operands by descriptor. Issued and committed as one group.
template <class T, int D>
__device__ inline void issue_pv_shared(float (&o)[D / 8][4], const unsigned char* sP, const unsigned char* sV) {
  static_assert(D == 128, "m64n128k16 with A from shared memory");
  const std::uint64_t dv = wgmma_descriptor_sw128_mn(sV, kKVBox);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    const std::uint64_t a = wgmma_descriptor_advance(wgmma_descriptor_sw128(sP + (kk / 4) * kQBox), kk % 4);
    wgmma_m64n128k16_ss<Tiles<T, D>::kFp16, true>(reinterpret_cast<float(&)[64]>(o), a, wgmma_descriptor_advance_mn(dv, kk), 1);
  }
  wgmma_commit();
}

// The online softmax on key tile j (fa2_forward.cuh's arithmetic): the running max and sum of this
// thread's two rows, alpha = exp2(m_old - m_new) for rescaling O, and sc overwritten with P. Masked: the tile
// crosses Nk or the diagonal for some row of this warp, or the scale is not positive; then every product is
// tested. Unmasked, every product is finite and the scale positive, so the row max is taken over the raw
// products and scaled once (x -> x scale2 is monotonic: the same bits as the max of the scaled products),
// and no -inf test is needed. The two are separate instantiations so that neither carries the other's
// branches (one function with `if (masked)` inside the element loop compiled to a branch per element).
//
// FA4's two changes (cuda.fa4; the CPU twins cpu.fa4 and cpu.fa4.emulated follow the same rules, kernels/cpu/
// flash_attention.hpp): Selective raises a row's running max only when the tile's max exceeds it by at least
// tau (log2 units), so most tiles skip alpha's exponential and O's rescale and the exponentials run up to 2^tau
// against the stale max (counted in rescales, per row and tile after the first); EmulatedEighths computes the
// exponentials of n8 blocks nb with nb % 8 < EmulatedEighths (that share of them, the same columns as the CPU
// twin's) by exp2_emulated (precision/exp2_emulated.hpp, the CPU twin's source) on the FMA pipes and the ALU
// instead of the special-function unit.
template <bool Selective, int EmulatedEighths>
struct SoftmaxRule {
  static_assert(EmulatedEighths >= 0 && EmulatedEighths <= 8, "eighths of the exponentials");
  static constexpr bool kSelective = Selective;
  static constexpr int kEmulatedEighths = EmulatedEighths;
};
using Fa3Rule = SoftmaxRule<false, 0>;

struct RowStats {
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float tau = 0.f;         // (Selective)
  float fast_bound = 0.f;  // (Selective: 2^(tau - 1), stale_max_holds' bound on a thread's share of a row's sum)
  int rescales = 0;        // (Selective: counted by the quad's first thread, t == 0)
};

// The exponential the rule takes in n8 block nb: EmulatedEighths' share by exp2_emulated, the rest by ex2.approx. One
// definition, because stale_max_holds' exponentials must be the rule path's bit for bit.
template <class Rule>
__device__ inline float rule_exp2(float arg, int nb) {
  return nb % 8 < Rule::kEmulatedEighths ? fc::exp2_emulated(arg) : fast_exp2(arg);
}

// The row max runs in kMaxChains interleaved chains of fmaxf, combined at the end, where one running max is a chain of
// 2 NB dependent FMNMX: in the FP8 forward that chain held 10.6 % of the warps' stall samples (NOTES: "The row max in
// four chains"). (A full tree of depth log2(2 NB) kept every value live at once and spilled in the three-group kernels.)
// The max of finite values and -inf does not depend on the order (a zero's sign aside, which no use of the max can
// see: exp2 of +-0 is 1, and m + log2 l, m - m' are the same for either zero), so the bits are one chain's.
constexpr int kMaxChains = 4;

// The selective rule's common case without the row max (unmasked tiles): the exponentials are taken with the running
// max m first, into registers of their own (S is kept), and summed. A thread's share of a row sums below 2^(tau - 1)
// only if each of its exponentials is below 2^(tau - 1), so each argument x s - m is below tau (ex2.approx errs by far
// less than a factor of 2, and for |m| < 2^20 the max's own rounding by far less than 1). When that holds for every
// thread of the warp (one vote), no row's max can exceed m by tau: the rule keeps the stale max, alpha = 1, and these
// are the exponentials and the sum, in the order, that the rule's path computes: the same bits. Otherwise that path
// runs from S, as before: 3-4 % faster (NOTES: "cuda.fa4: the row max off the step").
template <class Rule, int NB>
__device__ inline bool stale_max_holds(float (&sc)[NB][4], RowStats& st, int r, float scale2) {
  const float m = st.m[r];  // (-inf before the first tile: every exponential is +inf, and the vote fails)
  float e[NB][2];
  float row_sum = 0.f;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float arg = fmaf(sc[nb][2 * r + c], scale2, -m);
      e[nb][c] = rule_exp2<Rule>(arg, nb);
      row_sum += e[nb][c];
    }
  }
  // (|m| < 2^20: the rule's own max, max(x) s - m rounded twice, then errs by far less than the margin of 1)
  if (!__all_sync(0xffffffffu, row_sum < st.fast_bound && fabsf(m) < 0x1p20f)) return false;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) sc[nb][2 * r] = e[nb][0], sc[nb][2 * r + 1] = e[nb][1];
  st.l[r] += row_sum;
  return true;
}

// The pieces of a row's softmax (softmax_tile_as runs them): the tile's max of row r (x scale2; masked: the masked
// values set to -inf first), the running max and alpha it gives, and the exponentials against that max with their sum.
// (causal, offset: the mask's, read once a tile by the caller)
template <bool Masked, int NB>
__device__ inline float tile_row_max(float (&sc)[NB][4], int r, int col0, const GroupThread& th, const AttentionShapeParams& s, bool causal, int offset,
                                     float scale2) {
  static_assert(kMaxChains == 4 && 2 * NB % kMaxChains == 0, "a row's values fill the four chains evenly");
  float chain_max[kMaxChains];
#pragma unroll
  for (float& m : chain_max) m = -INFINITY;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float& x = sc[nb][2 * r + c];
      float& m = chain_max[(2 * nb + c) % kMaxChains];
      if constexpr (Masked) {
        const int col = col0 + nb * 8 + 2 * th.t + c;
        if (col >= s.seq_k || (causal && col > th.row0 + 8 * r + offset)) x = -INFINITY;
        m = fmaxf(m, x == -INFINITY ? -INFINITY : x * scale2);
      } else {
        m = fmaxf(m, x);
      }
    }
  }
  float tile_max = fmaxf(fmaxf(chain_max[0], chain_max[1]), fmaxf(chain_max[2], chain_max[3]));
  if constexpr (!Masked) tile_max *= scale2;
  return quad_max(tile_max);
}
template <class Rule>
__device__ inline float new_row_max(RowStats& st, float (&alpha)[2], int r, float tile_max, const GroupThread& th) {
  float m_new;
  if constexpr (Rule::kSelective) {
    if (st.m[r] == -INFINITY) {
      m_new = tile_max, alpha[r] = 1.f;  // the first visible tile sets the reference max (O and l are 0)
    } else if (tile_max > st.m[r] && tile_max - st.m[r] >= st.tau) {
      m_new = tile_max, alpha[r] = fast_exp2(st.m[r] - m_new);
      if (th.t == 0) ++st.rescales;
    } else {
      m_new = st.m[r], alpha[r] = 1.f;  // the stale max: this tile's exponentials stay below 2^tau
    }
  } else {
    m_new = fmaxf(st.m[r], tile_max);
    alpha[r] = m_new == st.m[r] ? 1.f : fast_exp2(st.m[r] - m_new);
  }
  st.m[r] = m_new;
  st.l[r] *= alpha[r];
  return m_new;
}
template <bool Masked, class Rule, int NB>
__device__ inline void row_exps(float (&sc)[NB][4], RowStats& st, int r, float m_new, float scale2) {
  float row_sum = 0.f;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float& x = sc[nb][2 * r + c];
      // (unmasked, every x and so m_new is finite: no -inf test)
      const float arg = fmaf(x, scale2, -m_new);
      const float e = rule_exp2<Rule>(arg, nb);
      x = Masked && x == -INFINITY ? 0.f : e;
      row_sum += x;
    }
  }
  st.l[r] += row_sum;  // this thread's share; the quad's are summed in the epilogue
}

// (before_exps: NoHook, softmax_tile_as' per-row order; or a callable that softmax_tile_split runs once both rows'
// maxima are known and before any exponential)
struct NoHook {
  __device__ float operator()() const { return 0.f; }
};
template <bool Masked, class Rule, int NB>
__device__ inline void softmax_tile_as(float (&sc)[NB][4], RowStats& st, float (&alpha)[2], int col0, const GroupThread& th,
                                       const AttentionShapeParams& s, float scale2) {
  const bool causal = s.mask != CausalMask::none;
  const int offset = s.causal_offset();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if constexpr (Rule::kSelective && !Masked) {
      if (stale_max_holds<Rule>(sc, st, r, scale2)) {
        alpha[r] = 1.f;
        continue;
      }
    }
    static_assert(kMaxChains == 4 && 2 * NB % kMaxChains == 0, "a row's values fill the four chains evenly");
    float chain_max[kMaxChains];
#pragma unroll
    for (float& m : chain_max) m = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float& x = sc[nb][2 * r + c];
        float& m = chain_max[(2 * nb + c) % kMaxChains];
        if constexpr (Masked) {
          const int col = col0 + nb * 8 + 2 * th.t + c;
          if (col >= s.seq_k || (causal && col > th.row0 + 8 * r + offset)) x = -INFINITY;
          m = fmaxf(m, x == -INFINITY ? -INFINITY : x * scale2);
        } else {
          m = fmaxf(m, x);
        }
      }
    }
    float tile_max = fmaxf(fmaxf(chain_max[0], chain_max[1]), fmaxf(chain_max[2], chain_max[3]));
    if constexpr (!Masked) tile_max *= scale2;
    tile_max = quad_max(tile_max);
    float m_new;
    if constexpr (Rule::kSelective) {
      if (st.m[r] == -INFINITY) {
        m_new = tile_max, alpha[r] = 1.f;  // the first visible tile sets the reference max (O and l are 0)
      } else if (tile_max > st.m[r] && tile_max - st.m[r] >= st.tau) {
        m_new = tile_max, alpha[r] = fast_exp2(st.m[r] - m_new);
        if (th.t == 0) ++st.rescales;
      } else {
        m_new = st.m[r], alpha[r] = 1.f;  // the stale max: this tile's exponentials stay below 2^tau
      }
    } else {
      m_new = fmaxf(st.m[r], tile_max);
      alpha[r] = m_new == st.m[r] ? 1.f : fast_exp2(st.m[r] - m_new);
    }
    st.m[r] = m_new;
    st.l[r] *= alpha[r];
    float row_sum = 0.f;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float& x = sc[nb][2 * r + c];
        // (unmasked, every x and so m_new is finite: no -inf test)
        const float arg = fmaf(x, scale2, -m_new);
        const float e = rule_exp2<Rule>(arg, nb);
        x = Masked && x == -INFINITY ? 0.f : e;
        row_sum += x;
      }
    }
    st.l[r] += row_sum;  // this thread's share; the quad's are summed in the epilogue
  }
}
// softmax_tile_as with both rows' maxima first, then before_exps(), then both rows' exponentials: the same bits (each
// row's values, max and sum are its own). The 256-key loop without overlap takes the groups' turn inside it, so the
// turn covers the exponentials only. (A copy of the per-row order by these pieces rather than softmax_tile_as through
// them: built that way, ptxas laid out the other kernels' softmax differently, a smaller stack frame and moved branches,
// where this keeps their SASS as it was.)
template <bool Masked, class Rule, int NB, class BeforeExps>
__device__ inline void softmax_tile_split(float (&sc)[NB][4], RowStats& st, float (&alpha)[2], int col0, const GroupThread& th,
                                          const AttentionShapeParams& s, float scale2, const BeforeExps& before_exps) {
  const bool causal = s.mask != CausalMask::none;
  const int offset = s.causal_offset();
  float m_new[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) m_new[r] = new_row_max<Rule>(st, alpha, r, tile_row_max<Masked>(sc, r, col0, th, s, causal, offset, scale2), th);
  // (before_exps returns 0.f read from shared memory after its barrier, and the exponentials take the maxima plus it
  // (m + 0 = m; -inf + 0 = -inf; -0 becomes +0, which no use of the max sees): a load is not moved above a barrier,
  // where ptxas scheduled every exponential above the hook's barrier when nothing held them there, SASS)
  const float zero = before_exps();
#pragma unroll
  for (int r = 0; r < 2; ++r) row_exps<Masked, Rule>(sc, st, r, m_new[r] + zero, scale2);
}
// Whether key tile j of Keys keys needs the mask for this warp's rows (some key past the end, or past the causal diagonal of
// its first row), or the scale is not positive (the unmasked paths' max assumes S * scale2 ordered as S).
template <int Keys>
__device__ inline bool key_tile_masked(int j, const GroupThread& th, const AttentionShapeParams& s, float scale2) {
  const int col0 = j * Keys;
  return !(scale2 > 0.f) || col0 + Keys > s.seq_k || (s.mask != CausalMask::none && col0 + Keys - 1 > th.warp_row0 + s.causal_offset());
}
// Sets this thread's products of key tile col0 past each of its rows' visible keys to -inf (the keys from min(Nk, row +
// offset + 1) under a causal mask, from Nk otherwise): tile_row_max<true>'s test, with the bound formed once a row, so
// that each product takes one compare against a constant and one select (the masked max forms and tests each product's
// column twice).
template <int NB>
__device__ inline void mask_past_visible(float (&sc)[NB][4], int col0, const GroupThread& th, const AttentionShapeParams& s) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = th.row0 + 8 * r;
    const int end = s.mask != CausalMask::none ? min(s.seq_k, row + s.causal_offset() + 1) : s.seq_k;
    const int visible = end - col0 - 2 * th.t;  // (the thread's products nb 8 + c below it are visible)
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        if (nb * 8 + c >= visible) sc[nb][2 * r + c] = -INFINITY;
      }
    }
  }
}
// (key tile j of NB n8 blocks: 8 NB keys)
template <class Rule, int NB, class BeforeExps = NoHook>
__device__ inline void softmax_tile(float (&sc)[NB][4], RowStats& st, float (&alpha)[2], int j, const GroupThread& th,
                                    const AttentionShapeParams& s, float scale2, const BeforeExps& before_exps = {}) {
  constexpr int kKeys = 8 * NB;
  const int col0 = j * kKeys;
  const bool masked = key_tile_masked<kKeys>(j, th, s, scale2);
  if constexpr (std::is_same_v<BeforeExps, NoHook>) {
    if (masked) {
      softmax_tile_as<true, Rule>(sc, st, alpha, col0, th, s, scale2);
    } else {
      softmax_tile_as<false, Rule>(sc, st, alpha, col0, th, s, scale2);
    }
  } else if (masked) {
    softmax_tile_split<true, Rule>(sc, st, alpha, col0, th, s, scale2, before_exps);
  } else {
    softmax_tile_split<false, Rule>(sc, st, alpha, col0, th, s, scale2, before_exps);
  }
}

// The selective rule on an unmasked key tile after the first, with the exponentials in turn (the 256-key FP8 kernel with
// tau > 0; NOTES "The selective rule without the row max in the 256-key FP8 kernel"). stale_max_holds' argument without
// its second copy of S, for which a group holding S of 256 keys (128 registers) beside O has no room: right after its turn
// (before_exps) the warp takes both rows' exponentials against the running maxima in place, over S, and sums them in the
// rule path's order. If every thread's share of each row sums below 2^(tau - 1) (and |m| < 2^20), one vote, no row's max
// exceeds its running max by tau: the rule keeps the stale maxima, alpha is 1, and these are the rule path's exponentials
// and sums on this S, bit for bit. So the tile max, its two shuffles and the wait for them leave the step. Otherwise S is
// gone: recompute_s(sc) takes it again for the warp's rows (E4m3Ops::qk_warp, from the K tile the caller has not yet
// released) and the rule's path runs from it. That S may differ from QGMMA's in the sums' last bits, so a tile that takes
// the slow path is the rule on an S of its own rounding (the CPU twin's tolerance, not its bits).
// The turn (with turns) ends early: end_turn(flag) arrives on the next group's turn barrier once the first
// kStaleFirstTurnEighths eighths of the n8 blocks have their exponentials and sums, so the next group's exponentials start
// while this group takes its last eighth, its vote and any slow path (outside the turn, which orders only time). Measured
// kernel alone at the power cap against the arrival after the vote, alternated, the same bits (NOTES "The turn's end
// before the last eighth"; medians of three rounds at 4k / 16k): + 1.2 / + 2.2 % at 7/8, + 1.0 / + 1.9 % at 15/16,
// + 1.1 / + 0.7 % at 16/16 (the arrival before the vote); 6/8 and 4/8 less or slower.
// The arrival has to depend on those exponentials, or ptxas places it where it likes (at the turn's start, or after
// every exponential): end_turn's flag is a compare of their running sums, never true, against zero - 1, and the
// exponentials after it take 0.f read from shared memory after the arrival (end_turn's value).
// Masked: a tile crossing Nk or the diagonal (scale2 > 0), whose products past each row's visible keys the caller has set
// to -inf (mask_past_visible), and recompute_s sets again: their exponentials are +0, the masked path's 0, and they add
// nothing to the sums or the max, so the vote's argument holds. The tile's row max and the masked max's column tests leave
// it: measured kernel alone at the power cap, + 9.9 % causal at 4k, + 3.5 % at 8k, level without a mask (NOTES "Masked
// tiles under the stale maxima").
constexpr int kStaleFirstTurnEighths = 7;
template <class Rule, bool Masked, int NB, class BeforeExps, class RecomputeS, class EndTurn>
__device__ inline void softmax_tile_stale_first(float (&sc)[NB][4], RowStats& st, float (&alpha)[2], int col0, const GroupThread& th, const AttentionShapeParams& s,
                                                float scale2, const BeforeExps& before_exps, const RecomputeS& recompute_s, const EndTurn& end_turn) {
  static_assert(Rule::kSelective, "the stale maxima first: the selective rule");
  static_assert(NB % 8 == 0, "the turn ends after whole eighths of the n8 blocks");
  constexpr int kTurnBlocks = NB / 8 * kStaleFirstTurnEighths;
  const float zero = before_exps();  // (softmax_tile_split's hook: 0.f read after the turn's barrier, which holds the exponentials below it)
  float m0 = st.m[0] + zero, m1 = st.m[1] + zero;
  float row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      sc[nb][c] = rule_exp2<Rule>(fmaf(sc[nb][c], scale2, -m0), nb);
      row_sum[0] += sc[nb][c];
      sc[nb][2 + c] = rule_exp2<Rule>(fmaf(sc[nb][2 + c], scale2, -m1), nb);
      row_sum[1] += sc[nb][2 + c];
    }
    // (sums of exponentials are never below -1, so the flag is false. The compilers know such sums are not negative and
    // fold a compare with a constant; zero, read after the turn's barrier, they do not know)
    if (nb + 1 == kTurnBlocks) {
      const float zero_after = end_turn(fminf(row_sum[0], row_sum[1]) < zero - 1.f);
      m0 = st.m[0] + zero_after, m1 = st.m[1] + zero_after;
    }
  }
  // (m = -inf, which no tile after the first meets unless its row sees no key before it, gives +inf exponentials, or
  // NaN for a masked product, and fails the vote)
  if (__all_sync(0xffffffffu, row_sum[0] < st.fast_bound && row_sum[1] < st.fast_bound && fabsf(st.m[0]) < 0x1p20f && fabsf(st.m[1]) < 0x1p20f)) {
    alpha[0] = alpha[1] = 1.f;
    st.l[0] += row_sum[0], st.l[1] += row_sum[1];
    return;
  }
  recompute_s(sc);
  float m_new[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) m_new[r] = new_row_max<Rule>(st, alpha, r, tile_row_max<false>(sc, r, col0, th, s, false, 0, scale2), th);
  // (a masked tile's S is -inf past the visible keys (recompute_s masks it), and scale2 > 0: the max of the raw values
  // times scale2 is the masked max's, and ex2(-inf - m) = +0 is the masked path's 0. A row with no visible key so far
  // keeps m = -inf, where -inf - m would be NaN: its exponentials take m = 0 instead, all -inf, so 0 (not met by the
  // 256-key kernel, where a work tile with two key tiles has every row seeing key 0). Unmasked, m is finite)
#pragma unroll
  for (int r = 0; r < 2; ++r) row_exps<false, Rule>(sc, st, r, Masked && m_new[r] == -INFINITY ? 0.f : m_new[r], scale2);
}

// O *= alpha per row, skipped where the row max did not grow (alpha 1: after the first tiles, nearly always without
// a mask), which changes no bit: x * 1 = x. The skip is a warp vote (__all_sync), so the branch is uniform and ptxas
// needs no BSSY / BSYNC reconvergence around it; where any lane of the warp needs the products, every lane multiplies,
// and its own alpha of 1 leaves its O as it was. The vote measured the step 0.6-0.9 % shorter than the per-lane branch
// (NOTES "The rescale's skip by a warp vote"); every caller runs it with the warp's 32 lanes converged (they issue
// wgmma next). ByRowHalf = false: one vote over both of the thread's rows (a warp's 16 rows); true: one vote and half
// the products for each row (rows r and r + 8: a warp's rows 0-7, then 8-15), which skips more blocks for 3 more
// instructions. Measured (NOTES "O's rescale by row half"): the FP8 three-group step with P in shared memory 0.5 %
// shorter, + 1.3 % at 4k; the bf16 two-group step 1 % longer. Ops::kRescaleByRowHalf picks.
template <bool ByRowHalf = false, int NB>
__device__ inline void rescale(float (&o)[NB][4], const float (&alpha)[2]) {
  if constexpr (ByRowHalf) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (__all_sync(0xffffffffu, alpha[half] == 1.f)) continue;
#pragma unroll
      for (auto& x : o) x[2 * half] *= alpha[half], x[2 * half + 1] *= alpha[half];
    }
  } else {
    if (__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) return;
#pragma unroll
    for (auto& x : o) x[0] *= alpha[0], x[1] *= alpha[0], x[2] *= alpha[1], x[3] *= alpha[1];
  }
}

// The epilogue's row totals: l of this thread's two rows summed over the quad, and 1 / l (0 for a row with no
// visible key, whose O is then 0).
struct RowTotals {
  float l[2], inv[2];
};
__device__ inline RowTotals row_totals(const RowStats& st) {
  RowTotals r;
#pragma unroll
  for (int i = 0; i < 2; ++i) r.l[i] = quad_sum(st.l[i]), r.inv[i] = r.l[i] == 0.f ? 0.f : 1.f / r.l[i];
  return r;
}
// L = (m + log2 l) ln 2 of this thread's rows that lie before Nq (stored by the quad's first thread); -inf for a row
// with no visible key.
__device__ inline void store_lse(const RowStats& st, const RowTotals& r, const GroupThread& th, const ForwardParams& p, int h, int b) {
  const std::uint64_t o_row_base = (static_cast<std::uint64_t>(b) * p.shape.heads_q + h) * p.shape.seq_q;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = th.row0 + 8 * i;
    if (th.t == 0 && row < p.shape.seq_q) {
      p.lse[o_row_base + row] = r.l[i] == 0.f ? -INFINITY : static_cast<float>(static_cast<double>(st.m[i] + log2f(r.l[i])) * 0.6931471805599453);
    }
  }
}

// O = acc / l, L = (m + log2 l) ln 2; a row with no visible key: O = 0, L = -inf. fa2_forward's epilogue.
// Scaled (FP8 block exponents): acc holds O in units of 2^o_exp, so O = (acc / l) 2^o_exp: the one rounding of
// acc (1 / l), then two exact powers of two (2^o_exp split in halves, each inside fp32's normal range, where
// 2^o_exp alone, or folded into 1 / l, could leave it).
template <class T, int D, bool Scaled = false>
__device__ inline void store_rows(const float (&o)[D / 8][4], RowStats& st, const GroupThread& th, const ForwardParams& p, int h, int b, int o_exp = 0) {
  const AttentionShapeParams& s = p.shape;
  auto* out = static_cast<T*>(p.o.data) + b * p.o.batch + h * p.o.head;
  const std::uint64_t o_row_base = (static_cast<std::uint64_t>(b) * s.heads_q + h) * s.seq_q;
  const RowTotals totals = row_totals(st);
  const float f1 = Scaled ? ldexpf(1.f, o_exp / 2) : 1.f, f2 = Scaled ? ldexpf(1.f, o_exp - o_exp / 2) : 1.f;  // (2^o_exp's two halves)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = th.row0 + 8 * r;
    if (row >= s.seq_q) continue;
    const float inv = totals.inv[r];
    const std::uint64_t index0 = (o_row_base + row) * D;
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
      const int col = nb * 8 + 2 * th.t;
      float x0 = o[nb][2 * r] * inv, x1 = o[nb][2 * r + 1] * inv;
      if constexpr (Scaled) x0 = x0 * f1 * f2, x1 = x1 * f1 * f2;
      store_pair<T>(out + row * p.o.row + col, x0, x1, p.rounding, p.o_stream, index0 + col);
    }
  }
  store_lse(st, totals, th, p, h, b);
}

// O of a warpgroup's 64 rows through shared memory and TMA (FA3's epilogue), for outputs rounded to nearest: O / l
// (Scaled: times 2^o_exp, as store_rows) rounded into the D / 64 staging boxes (64 rows x 64 columns each, store_p_tile's
// layout, which is the O map's 128-byte swizzle), then one bulk store per box by the group's first thread (`issuer`),
// rows past Nq clipped by the map; L as store_rows stores it. The same bits as store_rows (the same products and the
// same cvt.rn); a CTA's epilogue shortens from about 6300 to 3500 SM clocks (NOTES: "O by TMA"). The boxes must be
// free (the caller syncs the group after the last reads of them), and `group_barrier` (a named barrier of the group's
// 128 threads) orders each thread's writes before the issuer's store. The issuer must wait for the store's reads
// (bulk_wait_read) before the CTA exits.
template <class T, int D, bool Scaled = false>
__device__ inline void store_rows_by_tma(unsigned char* const (&boxes)[D / 64], const float (&o)[D / 8][4], RowStats& st, const GroupThread& th, const ForwardParams& p,
                                         const CUtensorMap* o_map, int h, int b, int group_barrier, bool issuer, int o_exp = 0) {
  const RowTotals totals = row_totals(st);
  const float f1 = Scaled ? ldexpf(1.f, o_exp / 2) : 1.f, f2 = Scaled ? ldexpf(1.f, o_exp - o_exp / 2) : 1.f;  // (store_rows' two halves)
  float scaled[D / 8][4];
#pragma unroll
  for (int nb = 0; nb < D / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      scaled[nb][e] = o[nb][e] * totals.inv[e / 2];
      if constexpr (Scaled) scaled[nb][e] = scaled[nb][e] * f1 * f2;  // (store_rows' order)
    }
  }
  std::uint32_t words[D / 16][4];
  a_fragments<T>(words, scaled);
  store_p_boxes<D / 16>(boxes, words);  // (and the async-proxy fence)
  named_barrier_sync(group_barrier, 128);
  if (issuer) {
#pragma unroll
    for (int box = 0; box < D / 64; ++box) tma_store_4d(o_map, boxes[box], 64 * box, th.m0, h, b);
    bulk_commit();
  }
  store_lse(st, totals, th, p, h, b);
}

__device__ inline unsigned char* aligned_smem(unsigned char* raw) {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t{1023});
}

// The CTA's query tile, head and batch: query tiles in x, last tile first, heads in y, batches in z. Under a
// causal mask the last query tiles see the most keys, so within each (batch, head) the longest CTAs start
// first and the short ones fill in behind them. (Putting the query tiles outermost would order the whole
// grid longest first, but then the CTAs in flight belong to every head at once and their K and V no longer
// fit in L2: measured 9 % slower at N = 16k non-causal, 7ac23db. Consecutive CTAs of one head share K/V in L2.)
struct CtaTile {
  int m_tile, h, b;
};
__device__ inline CtaTile cta_tile() {
  return {static_cast<int>(gridDim.x - 1 - blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
}


// --- 16-bit operands ---------------------------------------------------------------------------------------
// Key tiles of BlockN: 128, or 176 (cuda.fa3's key_tile=176; K and V maps with boxes of 176 rows), or 64 at d = 256
// (cuda.fa4's tile there: O takes 128 of a consumer's 240 registers, S and P of 64 keys 48 more; 128 keys would not fit,
// nor would their K and V tiles fit two stages of shared memory beside Q). PShared (d = 128,
// 128 keys): P goes to a tile of the group's in shared memory (store_p_tile) and P V reads it from there, so P holds no
// registers while the next S is computed: what lets three consumer groups of 160 registers hold O and S at d = 128
// (schedule ws_overlap_pingpong_3groups_p_shared).
template <class T, int D, int BlockN = kBlockN, bool PShared = false>
struct Wide16Ops {
  static_assert(!PShared || (D == 128 && BlockN == fa3::kBlockN), "P in shared memory: d = 128, tiles of 128 keys (two boxes of 64)");
  static_assert(D < 256 || BlockN == 64, "d = 256: key tiles of 64");
  using Out = T;
  static constexpr int kD = D;
  static constexpr int kBlockN = BlockN;
  static constexpr int kPaSteps = BlockN / 16;  // k16 steps over a tile's keys
  struct NoFragments {};
  using PFragments = std::conditional_t<PShared, NoFragments, std::uint32_t[kPaSteps][4]>;
  static constexpr unsigned kPBytes = PShared ? 2 * kQBox : 0;  // (64 rows x 128 keys of T)
  static constexpr bool kTurnAtExps = false;  // (with turns: FA3's ping-pong at the issue)
  static constexpr unsigned kQBytes = Tiles<T, D>::kQBytes, kKBytes = Tiles<T, D>::kHalves * kv_box_bytes<BlockN>, kVBytes = kKBytes;
  static constexpr bool kBlockScales = false;
  static constexpr bool kRescaleByRowHalf = false;  // (rescale: by row half the bf16 step measured 1 % longer, and level with the vote alone)
  static constexpr unsigned kVRawBytes = 0;
  // S's A operand may be Q's fragments held in registers (qk_held; the kernel's kQHeldSteps decides how many): 32
  // registers a thread at d = 128 for all eight k16 steps, which two groups with P in registers have (the persistent
  // kernel holds four, 16 registers)
  static constexpr bool kCanHoldQ = !PShared && BlockN == fa3::kBlockN && D == 128;
  // Q's rows row0 .. row0 + 63 of head h; K's and V's keys key0 .. key0 + BlockN - 1 of kv head hk: D / 64 boxes each.
  __device__ static void load_q(unsigned char* dst, const CUtensorMap* map, std::uint64_t* bar, int row0, int h, int b) {
    load_rows64<T, D>(dst, map, bar, row0, h, b);
  }
  __device__ static void prefetch_q(const CUtensorMap* map, int row0, int h, int b) {
    for (int half = 0; half < Tiles<T, D>::kHalves; ++half) tma_prefetch_l2_4d(map, 64 * half, row0, h, b);
  }
  __device__ static void load_k(unsigned char* dst, const CUtensorMap* map, std::uint64_t* bar, int key0, int hk, int b) {
    for (int half = 0; half < Tiles<T, D>::kHalves; ++half) tma_load_4d(dst + half * kv_box_bytes<BlockN>, map, bar, 64 * half, key0, hk, b);
  }
  __device__ static void load_v(unsigned char* dst, const CUtensorMap* map, std::uint64_t* bar, int key0, int hk, int b) { load_k(dst, map, bar, key0, hk, b); }
  __device__ static void qk(float (&sc)[BlockN / 8][4], const unsigned char* sQ, const unsigned char* sK) { issue_qk<T, D, BlockN>(sc, sQ, sK); }
  template <int Held>
  __device__ static void qk_held(float (&sc)[BlockN / 8][4], const std::uint32_t (&qf)[Held][4], const unsigned char* sQ, const unsigned char* sK) {
    static_assert(kCanHoldQ, "Q's fragments serve 128-key tiles at d = 128 with P in registers");
    issue_qk_held<T, D, Held>(sc, qf, sQ, sK);
  }
  __device__ static void pack(PFragments& pa, const float (&sc)[BlockN / 8][4], unsigned char* sP) {
    if constexpr (PShared) {
      std::uint32_t words[kPaSteps][4];
      a_fragments<T>(words, sc);
      store_p_tile(sP, words);
    } else {
      a_fragments<T>(pa, sc);
    }
  }
  __device__ static void pv(float (&o)[D / 8][4], const PFragments& pa, const unsigned char* sP, const unsigned char* sV) {
    if constexpr (PShared) {
      issue_pv_shared<T, D>(o, sP, sV);
    } else {
      issue_pv<T, D, BlockN>(o, pa, sV);
    }
  }
};

// Per-block power-of-two exponents of FP8 operands (E4m3Ops): Q's of each block of 128 rows ([B, Hq, q_blocks]),
// K's and V's of each key tile (Ops::kBlockN keys; [B, Hkv, k_blocks]); the true values are e4m3 x 2^e.
struct BlockExponents {
  const int* q = nullptr;
  const int* k = nullptr;
  const int* v = nullptr;
  int q_blocks = 0, k_blocks = 0;

  // The exponent of Q's rows from m0 of work tile (h, b) (a group's 64 rows lie in one block; a group wholly past
  // Nq, whose rows are never stored, takes the last block's rather than reading past the head's), and the first of
  // K's and V's exponents of its kv head.
  template <int BlockRows>
  __device__ int q_exponent(const AttentionShapeParams& s, int h, int b, int m0) const {
    return q[(b * s.heads_q + h) * q_blocks + min(m0 / BlockRows, q_blocks - 1)];
  }
  __device__ const int* k_of(const AttentionShapeParams& s, int h, int b) const { return k + (b * s.heads_kv + h / (s.heads_q / s.heads_kv)) * k_blocks; }
  __device__ const int* v_of(const AttentionShapeParams& s, int h, int b) const { return v + (b * s.heads_kv + h / (s.heads_q / s.heads_kv)) * k_blocks; }
};

// --- steps 2 and 3: a producer warp and two (or three) consumer warpgroups ------------------------------------
// The two-group layout (also the backward's and Flash Hog's): threads 0-255, consumer warpgroups 0 and 1 (rows m0
// and m0 + 64); threads 256-383, the producer warpgroup (one lane issues every copy). 384 threads would get 168
// registers each; the producer gives most of its own back (setmaxnreg: 24) and the consumers take them (240: O, S
// of two tiles and P live at once). K and V have their own full and empty barriers per stage, so a K buffer is
// refilled as soon as every group's S = Q K^T on it is complete, not when the tile's P V is. (WsLayout below: the
// forward's layouts with two or three groups.)
constexpr int kConsumers = 2, kConsumerThreads = 128 * kConsumers, kWsThreads = kConsumerThreads + 128;
constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;  // 128 x 24 + 256 x 240 = 64512 = 384 x 168 (below)
// The registers a CTA starts with, one CTA an SM: 65536 / threads a thread, down to ptxas's unit of 8 (168 at 384
// threads, 128 at 512: what ptxas -v reports for the two- and three-group forward kernels). setmaxnreg.inc takes its
// registers from the CTA's own pool, which holds only these and what setmaxnreg.dec gave back, and blocks until they
// are there: a split above this pool never starts its consumers. (So FA3's own splits: 24 / 240 with two groups, 32 /
// 160 with three. 32 / 240 would need 65536 with two groups; NOTES "The producer at 32 registers, and two work tiles
// a CTA".)
constexpr int launch_registers(int threads) { return 65536 / threads / 8 * 8; }
static_assert(128 * kProducerRegisters + kConsumerThreads * kConsumerRegisters <= kWsThreads * launch_registers(kWsThreads),
              "the two-group split (the backward's and Flash Hog's too): at most the launch's pool");
constexpr int kTurnBarrier = 1;  // named barriers 1 .. Groups: consumer group g waits on kTurnBarrier + g (then the groups' own, then the first S's)
constexpr int kTurnThreads = 2 * 128;  // a turn barrier joins two consumer groups (the one waiting, the one before it)
constexpr int kCtaRows = kConsumers * kGroupRows;

// The forward's CTA with Groups consumer warpgroups of 64 rows (2: the layout above; 3: FA3's for d = 64, more
// softmax in flight where the products are short). The registers are split so that 128 x 24 + 128 Groups x
// kConsumerRegisters fits the launch's pool (launch_registers): 240 with two groups, 160 with three (setmaxnreg takes
// multiples of 8).
template <int Groups>
struct WsLayout {
  static_assert(Groups == 2 || Groups == 3, "two or three consumer warpgroups");
  static constexpr int kGroups = Groups, kConsumerThreads = 128 * Groups, kThreads = kConsumerThreads + 128, kCtaRows = Groups * kGroupRows;
  static constexpr int kConsumerRegisters = Groups == 2 ? 240 : 160;
  static_assert(128 * kProducerRegisters + kConsumerThreads * kConsumerRegisters <= kThreads * launch_registers(kThreads),
                "the registers setmaxnreg hands out: at most the pool the launch gives the CTA");
};
// The forward's consumer groups by head dim, for every launcher that picks them (cuda.fa3's auto, cuda.fa4's grid
// scheduler, cuda.fa3.fp8): three at d = 64, where a step's products are short (NOTES: +15-22 % at N >= 8k), two
// at d = 128, where O, S and P of a group do not fit three groups' 160 registers.
template <int D>
constexpr int kForwardGroups = D == 64 ? 3 : 2;

// The work tiles a CTA walks. One CTA per tile (the grid of cta_tile()), or a persistent grid of one CTA per SM
// taking tiles in longest-processing-time-first order (the persistent scheduler of cuda.fa4 and cuda.fa3): CTA c
// starts with tile c, and each next tile is the next unclaimed one (gridDim.x + an atomic counter), so a CTA that drew
// long tiles takes fewer. The order: the (batch, head) pairs cut into sections of `section` (persistent_work_tiles:
// under a causal mask as many as have K and V in L2 together, else one), and within a section the query tiles last
// first (under a causal mask, the longest), the section's heads innermost, so the CTAs in flight share a few heads'
// K and V and the grid ends on the shortest tiles. (A static stride,
// c, c + gridDim.x, ..., measured 17-20 % slower than the grid at d = 128 causal: 3e801e6.)
struct WorkTiles {
  int m_tiles = 0, heads = 0, pairs = 0, section = 1;
  bool o_by_tma = false;  // (the grid: !persistent) O leaves through shared memory and the O map (store_rows_by_tma)
  int ctas_in_flight = 0;  // (the grid) the SM count, one CTA an SM: prefetch_next_wave_q's stride (0: no prefetch)

  __device__ int count(bool persistent) const { return persistent ? m_tiles * pairs : 1; }
  __device__ CtaTile at(int i, bool persistent) const {
    if (!persistent) return cta_tile();
    const int full = pairs / section, in_full = full * section * m_tiles;
    const int sec = i < in_full ? i / (section * m_tiles) : full;
    const int r = i < in_full ? i % (section * m_tiles) : i - in_full;
    const int width = i < in_full ? section : pairs - full * section;
    const int pair = sec * section + r % width;
    return {m_tiles - 1 - r / width, pair % heads, pair / heads};
  }
};

// Timeline stamps of the overlapped loop, for kernels/cuda/tools/fa3_timeline.cu (NOTES: "Where a step's time goes").
// NoTimeline, every launcher's, compiles to nothing. ClockTimeline: thread 0 of each consumer group writes clock64()
// at each point of each step of the CTAs (x < kCtas, head, batch 0) into stamps[kCtas][kMaxGroups][kSteps][kPoints];
// and, where `tiles` is set, at the points of every work tile (item: the CTA's linear index in the grid, the tile's
// index under the persistent scheduler) into tiles[items][kTileRecord]: per group its kTilePoints, then the SM.
// Within one SM clock64() is one counter, so the tiles of an SM can be laid end to end.
enum TimelinePoint : int { kTurnWait, kIssue, kIssued, kSReady, kSoftmaxDone, kPvDone, kPacked, kTimelinePoints };
enum TilePoint : int {
  kTileOpen,      // the group's Q is in shared memory
  kTileLoop,      // the first P is packed: the tile's turns start
  kTileLastTurn,  // the turn of the tile's last P V begins
  kTileStored,    // O and L are stored
  kTilePoints
};
struct NoTimeline {
  __device__ void mark(int /*group*/, int /*step*/, TimelinePoint /*point*/) const {}
  __device__ void mark_tile(int /*group*/, int /*item*/, TilePoint /*point*/) const {}
};
struct ClockTimeline {
  static constexpr int kCtas = 8, kMaxGroups = 3, kSteps = 256, kTileRecord = kMaxGroups * kTilePoints + 1;
  long long* stamps = nullptr;
  long long* tiles = nullptr;
  int head = 0, items = 0;
  __device__ void mark(int group, int step, TimelinePoint point) const {
    if (threadIdx.x % 128 != 0 || blockIdx.y != static_cast<unsigned>(head) || blockIdx.z != 0 || blockIdx.x >= kCtas || step >= kSteps) return;
    stamps[((blockIdx.x * kMaxGroups + group) * kSteps + step) * kTimelinePoints + point] = clock64();
  }
  __device__ void mark_tile(int group, int item, TilePoint point) const {
    if (threadIdx.x % 128 != 0 || tiles == nullptr || item < 0 || item >= items) return;
    long long* record = tiles + static_cast<long long>(item) * kTileRecord;
    record[group * kTilePoints + point] = clock64();
    unsigned sm = 0;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    record[kTileRecord - 1] = sm;
  }
};


// O's staging boxes of a group for store_rows_by_tma (64 rows x 64 columns of the output type each, D / 64 of them):
// the kernel (grid or persistent) stages them in the group's Q tile, then, where that holds fewer (e4m3's Q is half of
// a 16-bit O), in its P tile (Ops::kPBytes). The boxes each tile holds whole:
template <class Ops>
constexpr int kOBoxesInQ = static_cast<int>(Ops::kQBytes / kQBox);
template <class Ops>
constexpr int kOBoxesInP = static_cast<int>(Ops::kPBytes / kQBox);
template <class Ops>
constexpr bool kOStagingFits = kOBoxesInQ<Ops> + kOBoxesInP<Ops> >= Ops::kD / 64;
template <class Ops, int Stages, bool Persistent, int Groups = 2>
constexpr std::size_t ws_smem_bytes() {
  return (Persistent ? 2 : 1) * Groups * Ops::kQBytes + Stages * (Ops::kKBytes + Ops::kVBytes) + Groups * Ops::kPBytes + Stages * Ops::kVRawBytes + 1024;
}

template <class Ops, int Stages, bool Overlap, bool PingPong, class Rule = Fa3Rule, bool Persistent = false, int Groups = 2, class Timeline = NoTimeline>
__global__ void __launch_bounds__(WsLayout<Groups>::kThreads, 1) fa3_forward_ws_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                                                                                      const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap o_map,
                                                                                      const ForwardParams p,
                                                                                      const WorkTiles work, const BlockExponents ex, const Timeline timeline) {
  // (turns: at the issue of a step's pair of products with overlap, at the exponentials without)
  // (P in shared memory: a barrier that all the group's threads sync on after pack orders their P stores before the
  // P V that reads them: the turn barrier with turns, the group's own barrier without (the overlapped loop's
  // group_barrier); the tile is rewritten only after that P V is complete)
  static_assert(Ops::kPBytes == 0 || Overlap, "P in shared memory is handed to P V by the overlapped loop's barriers");
  // (V rewritten in the kernel: the producer's threads walk the one work tile of a grid CTA; the persistent scheduler's
  // tile index reaches only its issuing thread)
  constexpr bool kVRaw = Ops::kVRawBytes > 0;
  static_assert(!kVRaw || !Persistent, "V rewritten by the producer warpgroup: the grid scheduler only");
  static_assert(Ops::kVRawBytes % 1024 == 0, "each staging tile starts on a 1024-byte swizzle atom");
  static_assert(Ops::kPBytes % 1024 == 0 && ((Persistent ? 2 : 1) * WsLayout<Groups>::kGroups * Ops::kQBytes + Stages * (Ops::kKBytes + Ops::kVBytes)) % 1024 == 0,
                "each group's P tile starts on a 1024-byte swizzle atom (its descriptor has no base offset)");
  constexpr int D = Ops::kD, BlockN = Ops::kBlockN;
  using L = WsLayout<Groups>;
  constexpr int kGroups = L::kGroups, kGroupThreads = L::kConsumerThreads, kRows = L::kCtaRows;
  constexpr int kQBuffers = Persistent ? 2 : 1;  // (persistent: the next tile's Q loads while this one runs)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sQ = aligned_smem(smem_raw);  // buffer q, group g's boxes at + (q kGroups + g) kQBytes
  unsigned char* sK = sQ + kQBuffers * kGroups * Ops::kQBytes;
  unsigned char* sV = sK + Stages * Ops::kKBytes;
  unsigned char* sP = sV + Stages * Ops::kVBytes;  // group g's P tile at + g kPBytes (Ops::kPBytes > 0)
  unsigned char* sVraw = sP + kGroups * Ops::kPBytes;  // (kVRaw) V's tiles as TMA lands them, stage e at + e kVRawBytes
  __shared__ alignas(8) std::uint64_t q_full[kQBuffers], q_empty[kQBuffers], k_full[Stages], v_full[Stages], k_empty[Stages], v_empty[Stages];
  // (kVRaw) vraw_full: a staging tile landed (TMA's bytes); vraw_empty: the producer's 128 threads have read it
  __shared__ alignas(8) std::uint64_t vraw_full[kVRaw ? Stages : 1], vraw_empty[kVRaw ? Stages : 1];
  __shared__ int tile_of_buffer[kQBuffers];  // (persistent: the tile whose Q the buffer holds; >= tiles: no more)
  __shared__ float zero_word;  // (0.f: what the split softmax's exponentials read after their turn's barrier)  // (persistent: the tile whose Q the buffer holds; >= tiles: no more)
  // Block exponents (Ops::kBlockScales): for ring entry e, slot e % kScaleSlots holds key tile j's softmax scale for each
  // group, scale2 2^(q_exp + k_exps[j]), and O's factor 2^(v_exps[j - 1] - v_exps[j]) (1 for j = 0), formed by the
  // producer, so the consumers' step reads two floats where it had loaded the exponents and run ldexpf's dependent
  // instructions on its chain (NOTES: "The block exponents off the step's chain"). The producer writes it before
  // k_full's arrival for entry e, and only after the release of entry e - Stages, when every consumer has read the
  // slots of entries up to e - Stages, so a ring of 2 Stages slots is never rewritten under a read.
  constexpr int kScaleSlots = 2 * Stages;
  __shared__ float block_scales[Ops::kBlockScales ? kScaleSlots : 1][kGroups + 1];

  const AttentionShapeParams& s = p.shape;
  const int tiles = work.count(Persistent);
  const auto key_tiles_of = [&](const CtaTile& c) {
    // (every group walks all of them: the lower groups' extra causal tiles are fully masked for them)
    return key_tiles<BlockN>(s, c.m_tile * kRows, kRows);
  };
  // A grid CTA's fixed cost (NOTES: "A CTA's loads at its start, and the next CTA's Q in L2"; the two together: a work
  // tile's span 1.4 % shorter at N = 4k, 0.55 % at 16k, bf16, d = 128, H200):
  // - kEarlyLoads: thread 0 issues the copies of Q and of key tile 0's K and V right after initialising the barriers,
  //   before __syncthreads, where the producer would issue them only once every warp of the CTA runs. Only with turns:
  //   in FP8's three groups without turns it slowed the steady step by 2 % (a reading: fed at once, the groups start
  //   in step). The persistent kernel and V rewritten in the kernel keep the producer's order.
  // - prefetch_next_wave_q: CTAs are dispatched in the order of their linear index as SMs free up, one CTA an SM, so
  //   the CTA that follows this one is about its index + the SM count (work.ctas_in_flight). Halfway through its key
  //   tiles the producer prefetches that CTA's Q into L2, from where it lands 950 clocks sooner than from HBM.
  // The same bits: only when and from where bytes are loaded changes.
  constexpr bool kEarlyLoads = !Persistent && PingPong && !kVRaw;
  const auto prefetch_next_wave_q = [&] {
    const unsigned grid = gridDim.x * gridDim.y * gridDim.z;
    const unsigned next = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z) + static_cast<unsigned>(work.ctas_in_flight);
    if (next >= grid) return;
    const unsigned x = next % gridDim.x, y = next / gridDim.x % gridDim.y, z = next / (gridDim.x * gridDim.y);
    const CtaTile c{static_cast<int>(gridDim.x - 1 - x), static_cast<int>(y), static_cast<int>(z)};  // (cta_tile()'s order)
    for (int g = 0; g < kGroups; ++g) Ops::prefetch_q(&q_map, c.m_tile * kRows + g * kGroupRows, c.h, c.b);
  };
  constexpr unsigned kReleasers = 4 * kGroups;  // one arrival per consumer warp
  constexpr unsigned kProducerThreads = 128;
  if (threadIdx.x == 0) {
    zero_word = 0.f;
    for (int i = 0; i < kQBuffers; ++i) mbarrier_init(&q_full[i], 1), mbarrier_init(&q_empty[i], kReleasers);
    for (int i = 0; i < Stages; ++i) {
      // (kVRaw: a V tile is complete when every producer thread has written its part and fenced it)
      mbarrier_init(&k_full[i], 1), mbarrier_init(&v_full[i], kVRaw ? kProducerThreads : 1);
      mbarrier_init(&k_empty[i], kReleasers), mbarrier_init(&v_empty[i], kReleasers);
      if constexpr (kVRaw) mbarrier_init(&vraw_full[i], 1), mbarrier_init(&vraw_empty[i], kProducerThreads);
    }
    mbarrier_init_fence();
    // (kEarlyLoads: Q and the first K and V tiles from the first warp, before the CTA's other warps are running)
    if constexpr (kEarlyLoads) {
      const CtaTile c = cta_tile();
      mbarrier_arrive_expect_tx(&q_full[0], kGroups * Ops::kQBytes);
      for (int g = 0; g < kGroups; ++g) Ops::load_q(sQ + g * Ops::kQBytes, &q_map, &q_full[0], c.m_tile * kRows + g * kGroupRows, c.h, c.b);
      if (key_tiles_of(c) > 0) {
        const int hk = c.h / (s.heads_q / s.heads_kv);
        mbarrier_arrive_expect_tx(&k_full[0], Ops::kKBytes);
        Ops::load_k(sK, &k_map, &k_full[0], 0, hk, c.b);
        mbarrier_arrive_expect_tx(&v_full[0], Ops::kVBytes);
        Ops::load_v(sV, &v_map, &v_full[0], 0, hk, c.b);
      }
    }
  }
  __syncthreads();
  // The K/V ring's position runs on across work tiles: tile j of a work tile is ring entry kv + j.
  const auto parity = [](int g) { return static_cast<unsigned>((g / Stages) & 1); };

  if (threadIdx.x >= kGroupThreads) {  // the producer warpgroup
    setmaxnreg_dec<kProducerRegisters>();
    // One thread issues the copies. With kVRaw all 128 walk the tiles and rewrite V's tile of ring entry e (landed in
    // staging tile e % Stages) into the ring's V tile once the consumers have released that tile's previous entry. Entry
    // e is rewritten after entry e + 1's copies are issued, so its bytes have had a copy's time to land; the consumers
    // read it at step e, and release K's entry e + 1 (which the issuer waits for two entries on) only after.
    const bool issuer = !kVRaw || threadIdx.x == kGroupThreads;
    const auto rewrite_v = [&](int e) {
      if constexpr (kVRaw) {
        const int stage = e % Stages;
        mbarrier_wait(&vraw_full[stage], parity(e));
        if (e >= Stages) mbarrier_wait(&v_empty[stage], ((e / Stages) - 1) & 1);
        Ops::transform_v(sVraw + stage * Ops::kVRawBytes, sV + stage * Ops::kVBytes, static_cast<int>(threadIdx.x) - kGroupThreads);
        fence_proxy_async_shared();  // (this thread's stores, before the P V products read them)
        mbarrier_arrive(&v_full[stage]);
        mbarrier_arrive(&vraw_empty[stage]);
      }
    };
    if (kVRaw || threadIdx.x == kGroupThreads) {
      int kv = 0;
      for (int local = 0; local < (Persistent ? tiles : 1); ++local) {
        const int qb = local % kQBuffers;
        if (local >= kQBuffers) mbarrier_wait(&q_empty[qb], ((local / kQBuffers) - 1) & 1);
        const int i = !Persistent ? 0 : local == 0 ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x) + atomicAdd(p.work_counter, 1);
        if constexpr (Persistent) {
          tile_of_buffer[qb] = i;  // (published by q_full's completion: the arrival releases, the wait acquires)
          if (i >= tiles) {
            mbarrier_arrive(&q_full[qb]);
            break;
          }
        }
        const CtaTile c = work.at(i, Persistent);
        const int hk = c.h / (s.heads_q / s.heads_kv), n_tiles = key_tiles_of(c);
        if (issuer && !kEarlyLoads) {
          mbarrier_arrive_expect_tx(&q_full[qb], kGroups * Ops::kQBytes);
          for (int g = 0; g < kGroups; ++g) Ops::load_q(sQ + (qb * kGroups + g) * Ops::kQBytes, &q_map, &q_full[qb], c.m_tile * kRows + g * kGroupRows, c.h, c.b);
        }
        for (int j = 0; j < n_tiles; ++j) {
          if (!Persistent && issuer && work.ctas_in_flight > 0 && j == n_tiles / 2) prefetch_next_wave_q();
          const int e = kv + j, stage = e % Stages;
          const unsigned reuse_parity = ((e / Stages) - 1) & 1;  // the release of ring entry e - Stages
          if (issuer) {
            if (e >= Stages) mbarrier_wait(&k_empty[stage], reuse_parity);
            if constexpr (Ops::kBlockScales) {
              const int* k_exps = ex.k_of(s, c.h, c.b);
              const int* v_exps = ex.v_of(s, c.h, c.b);
              float* slot = block_scales[e % kScaleSlots];
              for (int g = 0; g < kGroups; ++g) {
                slot[g] = ldexpf(s.scale * kLog2e, ex.q_exponent<Ops::kQBlockRows>(s, c.h, c.b, c.m_tile * kRows + g * kGroupRows) + k_exps[j]);
              }
              slot[kGroups] = j == 0 ? 1.f : ldexpf(1.f, v_exps[j - 1] - v_exps[j]);
            }
            if (!kEarlyLoads || e > 0) {
              mbarrier_arrive_expect_tx(&k_full[stage], Ops::kKBytes);
              Ops::load_k(sK + stage * Ops::kKBytes, &k_map, &k_full[stage], j * BlockN, hk, c.b);
            }
            if constexpr (kVRaw) {
              if (e >= Stages) mbarrier_wait(&vraw_empty[stage], reuse_parity);
              mbarrier_arrive_expect_tx(&vraw_full[stage], Ops::kVRawBytes);
              Ops::load_v(sVraw + stage * Ops::kVRawBytes, &v_map, &vraw_full[stage], j * BlockN, hk, c.b);
            } else {
              if (e >= Stages) mbarrier_wait(&v_empty[stage], reuse_parity);
              if (!kEarlyLoads || e > 0) {
                mbarrier_arrive_expect_tx(&v_full[stage], Ops::kVBytes);
                Ops::load_v(sV + stage * Ops::kVBytes, &v_map, &v_full[stage], j * BlockN, hk, c.b);
              }
            }
          }
          if constexpr (kVRaw) {
            if (j > 0) rewrite_v(e - 1);
          }
        }
        if constexpr (kVRaw) {
          if (n_tiles > 0) rewrite_v(kv + n_tiles - 1);
        }
        kv += n_tiles;
      }
    }
    return;
  }

  setmaxnreg_inc<L::kConsumerRegisters>();
  // (warp_uniform: without it, a step's issue sequence was 140 instructions against 109, SASS; NOTES "The warp-group index")
  const int group = warp_uniform(static_cast<int>(threadIdx.x / 128));
  const bool releaser = threadIdx.x % 32 == 0;
  const float scale2 = s.scale * kLog2e;
  const auto k_tile = [&](int e) { return sK + (e % Stages) * Ops::kKBytes; };
  const auto v_tile = [&](int e) { return sV + (e % Stages) * Ops::kVBytes; };
  unsigned char* const sPg = sP + group * Ops::kPBytes;
  // Turns (PingPong), in a ring: group g issues its products (without overlap: takes its exponentials) after a sync on
  // its own barrier and arrives on the next group's after. The last group arrives once first (group 0 goes first) and after every turn;
  // group 0 syncs once more at the end, so every arrival is matched whatever the number of turns.
  const int my_turn = kTurnBarrier + group, other_turn = kTurnBarrier + (group + 1) % kGroups;
  if (PingPong && group == kGroups - 1) named_barrier_arrive(other_turn, kTurnThreads);
  // O by TMA (work.o_by_tma): staged in the group's Q tile of the work tile's buffer, free once its last S is
  // complete, and (an e4m3 Q holds one box of a 16-bit O at d = 128) its P tile, free once its last P V is complete
  // (the group's barrier before store_rows_by_tma orders every warp's waits for both before any thread's writes).
  // (FP8 at d = 64, or with P in registers: the group's tiles hold no whole 16-bit box, or too few: store_rows.)
  // The persistent kernel stages in its Q tile, and since the producer reloads that buffer with the Q of the work
  // tile after next, the group releases the buffer (q_empty) only once the store has read it: the releasers of its
  // other warps arrive after the staging, and its first thread, for its own warp, after waiting for the store's reads
  // once it has issued the next work tile's first S (release_staged_q); the phase cannot complete without that arrival. Without the staging each warp releases the buffer
  // as its last product completes. Where the Q tile holds
  // fewer boxes than O (e4m3's Q, one of two), the rest is staged in the group's P tile, which the next work tile's first
  // pack rewrites: the group meets at its barrier before that pack (kStagedInP), so the issuer's wait comes first. The
  // epilogue's own barrier orders it before a store's writes where a work tile has no key tiles.
  constexpr bool kCanStageO = kOStagingFits<Ops>;
  constexpr bool kStagedInP = Persistent && kOBoxesInQ<Ops> < D / 64;
  const bool o_by_tma = kCanStageO && work.o_by_tma;
  static_assert(!Persistent || Overlap, "the persistent kernel runs the overlapped loop (release_staged_q's place)");
  const bool issuer = threadIdx.x % 128 == 0;
  int staged_q = -1;  // (persistent, O by TMA) the Q buffer whose staged O the issuer's last store may still read
  bool p_tile_read = false;  // (kStagedInP) the issuer has waited for the store's reads of the P tile; the group has not met since
  const auto release_staged_q = [&] {
    if (Persistent && staged_q >= 0) {
      if (issuer) {
        bulk_wait_read<0>();
        mbarrier_arrive(&q_empty[staged_q]);  // (its warp's arrival; the group's other three arrive at the store, and the phase waits for this one)
      }
      staged_q = -1;
      p_tile_read = kStagedInP;
    }
  };
  // The group's own barrier (128 threads; numbered after the turns'): the epilogue's, and without turns the one that
  // hands P in shared memory to P V. Without turns (!PingPong) each group issues its products as soon as its own
  // P is packed: the tensor pipe takes the groups' products in the order they come (NOTES: "Three groups without turns").
  const int group_barrier = kTurnBarrier + kGroups + group;
  constexpr bool kSyncOwnP = !PingPong && Ops::kPBytes > 0;
  // S's A operand from registers: Q's fragments, loaded once a work tile (load_fragments), where the Operands class
  // allows it and two groups have the registers. 1 % faster than S reading Q from shared memory in every step, the same
  // bits (NOTES: "Q's fragments held in registers"). Not under FA4's rule, whose steps then spilled (measured 2-4 %
  // slower), nor in the loop without overlap, where ptxas (nvcc 13.0) gave P's fragments Q's registers and every S
  // after the first read P (Fa3Schedules' bit-for-bit test caught it). The persistent kernel holds the first half of
  // Q's k16 steps: with all eight its consumers spilled (ptxas, stack frame / spill stores / spill loads: 104 / 180 /
  // 308 bytes, the producer's 40 / 64 / 76 included), with six 64 / 128 / 224, with four the producer's alone; with
  // four its step is 0.8-0.9 % shorter (NOTES "The producer at 32 registers, and two work tiles a CTA", item 3c). Six,
  // with registers freed for them elsewhere in the consumer, made the step 4-5 % longer (NOTES "The half of Q on main",
  // item 6).
  constexpr int kQHeldSteps = !(Ops::kCanHoldQ && Overlap && Groups == 2 && !Rule::kSelective) ? 0 : Persistent ? D / 32 : D / 16;
  // The grid's first S in turn (two groups with turns): group 1 issues its first S only after group 0 has issued its
  // own, on a barrier of their own (numbered after the groups' barriers). Issued together, the two S products complete
  // together and both softmaxes then run side by side, each slowed by the other; in turn, group 0's S completes first
  // and its softmax runs under group 1's S, so group 0's first turn comes sooner. The same bits (only the order of
  // issue changes). Kernel alone on an H200: a CTA's cost beyond its steps fell from 1.72 to 1.61 steps, + 0.5-1.9 % at
  // N = 4k, level at 16k (NOTES: "The first S in turn"). Not in the persistent kernel, where the groups reach a work
  // tile's first S after their last turns on the previous one, already apart (a reading; not measured there).
  constexpr bool kStaggeredFirstS = PingPong && !Persistent && kGroups == 2;
  constexpr int kFirstSBarrier = kTurnBarrier + 2 * kGroups;
  // Where the overlapped loop's turns fall (Ops::kTurnAtExps, with turns): at the issue of a step's pair of products (FA3's
  // ping-pong), or at the exponentials (the 256-key FP8 kernel: each group issues its products as soon as its P is in
  // its tile, and the groups take turns at their exponentials only, as the loop without overlap does; measured + 1.3-4.9 %
  // over the loop without overlap, + 2.4-7.3 % on the persistent scheduler, where turns at the issue or none lost up to
  // 5 %: NOTES "256-key tiles with P in shared memory and overlap"). With the turn at the
  // exponentials, the group's own barrier hands P in shared memory to P V, as without turns.
  constexpr bool kTurnAtExps = Ops::kTurnAtExps && PingPong;
  static_assert(Overlap || !PingPong || kTurnAtExps, "without overlap, turns fall at the exponentials (Ops::kTurnAtExps)");
  const auto before_issue = [&] {
    if constexpr (PingPong && !kTurnAtExps) {
      named_barrier_sync(my_turn, kTurnThreads);
    } else if constexpr (kSyncOwnP || (kTurnAtExps && Ops::kPBytes > 0)) {
      named_barrier_sync(group_barrier, 128);
    }
  };
  // The selective rule in the kernels whose turns fall at the exponentials (Ops::kTurnAtExps: the 256-key FP8 kernel with
  // tau > 0, with turns or without): unmasked tiles after the first take their exponentials against the running maxima
  // before any row max (softmax_tile_stale_first), whose slow path takes S again from the K tile; so each warp releases
  // that tile only after its softmax.
  constexpr bool kStaleFirst = Rule::kSelective && Ops::kTurnAtExps;
  static_assert(!kStaleFirst || Overlap, "the stale maxima first: the overlapped loop (its K release after the softmax)");
  // A step's softmax on key tile j (S from the group's Q tile sQs and the K tile sKj), its exponentials in turn where
  // kTurnAtExps (the split softmax's hook: the group syncs on its turn after its row maxima, or with kStaleFirst at once,
  // and arrives on the next group's after its exponentials, or with kStaleFirst after seven eighths of them), in either
  // loop. (kStaleFirst without turns: the split softmax's order with a hook that waits for nothing, where
  // softmax_tile_as' stale_max_holds would hold a second S.)
  const auto softmax_in_turn = [&](float (&sc)[BlockN / 8][4], RowStats& st, float (&alpha)[2], int j, const GroupThread& th, float scale2_j,
                                   const unsigned char* sQs, const unsigned char* sKj) {
    if constexpr (kTurnAtExps || kStaleFirst) {
      const auto turn = [&] {
        if constexpr (kTurnAtExps) {
          named_barrier_sync(my_turn, kTurnThreads);
          return ld_volatile_shared(&zero_word);
        } else {
          return 0.f;
        }
      };
      if constexpr (kStaleFirst) {
        // (the turn ends inside: the arrival, then 0.f read after it; without turns, nothing to end)
        const auto end_turn = [&](bool never) {
          if constexpr (kTurnAtExps) {
            named_barrier_arrive(other_turn + static_cast<int>(never), kTurnThreads);
            return ld_volatile_shared(&zero_word);
          } else {
            return 0.f;
          }
        };
        // (two instantiations, unmasked and masked: one for both, the mask under `if (masked)`, kept the mask ahead of the
        // turn's barrier, where ptxas moves it after the barrier here, but cost the unmasked step 0.4-1.2 %; NOTES)
        const bool masked = key_tile_masked<BlockN>(j, th, s, scale2_j);
        if (j > 0 && !masked) {
          softmax_tile_stale_first<Rule, false>(sc, st, alpha, j * BlockN, th, s, scale2_j, turn,
                                                [&](float (&s_again)[BlockN / 8][4]) { Ops::qk_warp(s_again, sQs, sKj); }, end_turn);
          return;
        }
        if (j > 0 && scale2_j > 0.f) {
          mask_past_visible(sc, j * BlockN, th, s);
          softmax_tile_stale_first<Rule, true>(sc, st, alpha, j * BlockN, th, s, scale2_j, turn,
                                               [&](float (&s_again)[BlockN / 8][4]) {
                                                 Ops::qk_warp(s_again, sQs, sKj);
                                                 mask_past_visible(s_again, j * BlockN, th, s);
                                               },
                                               end_turn);
          return;
        }
      }
      softmax_tile<Rule>(sc, st, alpha, j, th, s, scale2_j, turn);
      if constexpr (kTurnAtExps) named_barrier_arrive(other_turn, kTurnThreads);
    } else {
      softmax_tile<Rule>(sc, st, alpha, j, th, s, scale2_j);
    }
  };
  int rescales = 0, kv = 0;
  for (int local = 0; local < (Persistent ? tiles : 1); ++local) {
    const int qb = local % kQBuffers;
    mbarrier_wait(&q_full[qb], (local / kQBuffers) & 1);
    // (read by each warp's releaser and passed to its lanes, so that every read of the buffer's word is ordered before
    // the rewrite by the reader's own q_empty arrival: racecheck does not carry a warp's or a named barrier's order
    // into an mbarrier arrival by another thread, and flagged the read by every lane when CTAs walk several tiles)
    const int i = Persistent ? __shfl_sync(0xffffffffu, releaser ? tile_of_buffer[qb] : 0, 0) : 0;
    if (Persistent && i >= tiles) break;
    const CtaTile c = work.at(i, Persistent);
    const int n_tiles = key_tiles_of(c);
    // (the timeline's work tile: the tile's index under the persistent scheduler, the CTA's in the grid)
    const int item = Persistent ? i : static_cast<int>((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x);
    timeline.mark_tile(group, item, kTileOpen);
    const GroupThread th(c.m_tile * kRows + group * kGroupRows, threadIdx.x % 128);
    const unsigned char* sQg = sQ + (qb * kGroups + group) * Ops::kQBytes;
    unsigned char* o_boxes[D / 64];
#pragma unroll
    for (int box = 0; box < D / 64; ++box) {
      o_boxes[box] = box < kOBoxesInQ<Ops> ? sQ + (qb * kGroups + group) * Ops::kQBytes + box * kQBox : sPg + (box - kOBoxesInQ<Ops>) * kQBox;
    }
    std::uint32_t qf[kQHeldSteps > 0 ? kQHeldSteps : 1][4];  // (kQHeldSteps) Q's A fragments, read once a work tile
    if constexpr (kQHeldSteps > 0) load_fragments<D, kQHeldSteps>(qf, sQg, static_cast<int>((threadIdx.x % 128) / 32), static_cast<int>(threadIdx.x % 32));
    const auto issue_s = [&](float (&sc)[BlockN / 8][4], const unsigned char* sQs, const unsigned char* sK) {
      if constexpr (kQHeldSteps > 0) {
        Ops::template qk_held<kQHeldSteps>(sc, qf, sQs, sK);
      } else {
        Ops::qk(sc, sQs, sK);
      }
    };
    float o[D / 8][4];
#pragma unroll
    for (auto& x : o) x[0] = x[1] = x[2] = x[3] = 0.f;
    RowStats st;
    st.tau = p.rescale_threshold;
    if constexpr (Rule::kSelective) st.fast_bound = exp2f(st.tau - 1.f);
    // Block exponents (Ops::kBlockScales): S of key tile j is Q K^T of the e4m3 values times 2^(q_exp + k_exps[j]),
    // folded into the softmax scale (exact for a power of two); O is kept in units of 2^o_exp, the exponent of
    // the last V block added: before P_{j+1} V_{j+1} it is multiplied by 2^(o_exp - v_exps[j+1]) (exact, folded
    // into alpha; the host bounds a head's V exponents' spread so this neither overflows nor underflows), and the
    // epilogue multiplies by 2^o_exp.
    // The first tile's scale is formed here, the others' read from block_scales (the producer's, the same ldexpf).
    int o_exp = 0;
    float scale2_first = scale2;
    if constexpr (Ops::kBlockScales) scale2_first = ldexpf(scale2, ex.q_exponent<Ops::kQBlockRows>(s, c.h, c.b, th.m0) + ex.k_of(s, c.h, c.b)[0]);

    if constexpr (!Overlap) {
      // Each step waits for its S, then for its O += P V: nothing of a group overlaps inside it. With turns (PingPong)
      // the groups take turns at the exponentials, not at the issue: group g computes its row maxima, syncs on its own
      // turn barrier, takes its exponentials and arrives on the next group's, so one group's exponentials run while the
      // other's products and maxima do (cuDNN's FP8 forward's order; NOTES "256-key tiles without overlap"). Across
      // steps only O lives, so S of 256 keys (128 registers) fits beside it.
      for (int j = 0; j < n_tiles; ++j) {
        const int e = kv + j;
        mbarrier_wait(&k_full[e % Stages], parity(e));
        float sc[BlockN / 8][4];
        issue_s(sc, sQg, k_tile(e));
        // (block exponents: tile j's scale and O's factor as the producer formed them, read before K's release as in
        // the overlapped loop; for tile 0 the factor is 1)
        float scale2_j = scale2, to_j = 1.f;
        if constexpr (Ops::kBlockScales) {
          // (tile 0's from the thread's own exponents: its k_full may be the early loads', armed before the producer
          // wrote the slot)
          scale2_j = scale2_first;
          if (j > 0) {
            const float* slot = block_scales[e % kScaleSlots];
            scale2_j = __shfl_sync(0xffffffffu, releaser ? slot[group] : 0.f, 0);
            to_j = __shfl_sync(0xffffffffu, releaser ? slot[kGroups] : 0.f, 0);
          }
        }
        wgmma_wait<0>();
        if (releaser) mbarrier_arrive(&k_empty[e % Stages]);
        float alpha[2];
        // (with turns, the turn covers the exponentials only: each group's row maxima run outside it. Measured against
        // the turn around the whole softmax, 4-8 % faster; NOTES)
        softmax_in_turn(sc, st, alpha, j, th, scale2_j, sQg, k_tile(e));
        if constexpr (Ops::kBlockScales) alpha[0] *= to_j, alpha[1] *= to_j;
        rescale<Ops::kRescaleByRowHalf>(o, alpha);
        typename Ops::PFragments pa;
        Ops::pack(pa, sc, sPg);
        mbarrier_wait(&v_full[e % Stages], parity(e));
        Ops::pv(o, pa, sPg, v_tile(e));
        wgmma_wait<0>();
        if (releaser) mbarrier_arrive(&v_empty[e % Stages]);
      }
    } else {
      // Step j issues S_{j+1} = Q K_{j+1}^T and O += P_j V_j together, then computes P_{j+1} while O's product
      // runs; once that is complete, O is rescaled by alpha_{j+1} and P_{j+1} packed into pa. Across steps only O
      // and pa live (as in FA3); S lives within a step. The last tile is a step of its own, with no next product
      // (a product issued under a condition makes ptxas serialise every wgmma: C7514).
      typename Ops::PFragments pa;
      if (n_tiles > 0) {
        float sc[BlockN / 8][4];
        if (kStaggeredFirstS && group == 1) named_barrier_sync(kFirstSBarrier, kTurnThreads);
        mbarrier_wait(&k_full[kv % Stages], parity(kv));
        issue_s(sc, sQg, k_tile(kv));
        if (kStaggeredFirstS && group == 0) named_barrier_arrive(kFirstSBarrier, kTurnThreads);
        release_staged_q();  // (the previous work tile's O, while this S runs)
        wgmma_wait<0>();
        if (releaser) mbarrier_arrive(&k_empty[kv % Stages]);
        float alpha[2];
        softmax_in_turn(sc, st, alpha, 0, th, scale2_first, sQg, k_tile(kv));  // (O is still 0: alpha is not needed)
        if (kStagedInP && p_tile_read) {
          named_barrier_sync(group_barrier, 128);  // (the previous work tile's O read from the P tile: kStagedInP)
          p_tile_read = false;
        }
        Ops::pack(pa, sc, sPg);
      }
      timeline.mark_tile(group, item, kTileLoop);
      for (int j = 0; j + 1 < n_tiles; ++j) {
        // (persistent: the ring position and Q's buffer through warp_uniform inside the step; without it ptxas hoisted
        // the tile's descriptors out of the step into vector registers: 172 instructions from the turn barrier to the
        // turn arrival, against 118 now and the grid kernel's 124; NOTES "The persistent forward's step")
        const int e = Persistent ? warp_uniform(kv + j) : kv + j;
        const unsigned char* sQs = Persistent ? sQ + warp_uniform(static_cast<int>((qb * kGroups + group) * Ops::kQBytes)) : sQg;
        timeline.mark(group, j, kTurnWait);
        before_issue();
        timeline.mark(group, j, kIssue);
        float sc[BlockN / 8][4];
        mbarrier_wait(&k_full[(e + 1) % Stages], parity(e + 1));
        issue_s(sc, sQs, k_tile(e + 1));
        mbarrier_wait(&v_full[e % Stages], parity(e));
        Ops::pv(o, pa, sPg, v_tile(e));
        if (PingPong && !kTurnAtExps) named_barrier_arrive(other_turn, kTurnThreads);
        timeline.mark(group, j, kIssued);
        wgmma_wait<1>();  // S_{j+1} (committed first) is complete; O's product may still run
        timeline.mark(group, j, kSReady);
        // (block exponents: tile j + 1's scale and O's factor as the producer formed them)
        float scale2_next = scale2, to_next = 1.f;
        if constexpr (Ops::kBlockScales) {
          // (read by each warp's releaser, which releases K's entry e + 1 next, and passed to its lanes: a read by every
          // lane would be ordered before the producer's rewrite only through the warp's convergence, which racecheck does
          // not take as an order; flagged where the slots are reused)
          const float* slot = block_scales[(e + 1) % kScaleSlots];
          scale2_next = __shfl_sync(0xffffffffu, releaser ? slot[group] : 0.f, 0);
          to_next = __shfl_sync(0xffffffffu, releaser ? slot[kGroups] : 0.f, 0);
        }
        if (releaser && !kStaleFirst) mbarrier_arrive(&k_empty[(e + 1) % Stages]);
        float alpha[2];
        softmax_in_turn(sc, st, alpha, j + 1, th, scale2_next, sQs, k_tile(e + 1));
        if (releaser && kStaleFirst) mbarrier_arrive(&k_empty[(e + 1) % Stages]);  // (S may have been taken again from it)
        if constexpr (Ops::kBlockScales) alpha[0] *= to_next, alpha[1] *= to_next;
        timeline.mark(group, j, kSoftmaxDone);
        wgmma_wait<0>();
        timeline.mark(group, j, kPvDone);
        if (releaser) mbarrier_arrive(&v_empty[e % Stages]);
        rescale<Ops::kRescaleByRowHalf>(o, alpha);
        Ops::pack(pa, sc, sPg);
        timeline.mark(group, j, kPacked);
      }
      if (n_tiles > 0) {
        const int e = kv + n_tiles - 1;
        before_issue();
        timeline.mark_tile(group, item, kTileLastTurn);
        mbarrier_wait(&v_full[e % Stages], parity(e));
        Ops::pv(o, pa, sPg, v_tile(e));
        if (PingPong && !kTurnAtExps) named_barrier_arrive(other_turn, kTurnThreads);
        wgmma_wait<0>();
        if (releaser) mbarrier_arrive(&v_empty[e % Stages]);
      }
    }
    // (every product on this Q is complete; Persistent: each warp's releaser read tile_of_buffer[qb], which the
    // producer rewrites after this release, so its own arrival orders that read; with O staged in the buffer the
    // other releasers arrive after the store's staging and the issuer once the store has read it)
    release_staged_q();  // (a work tile without key tiles issued no S to release it under)
    if (!(Persistent && o_by_tma)) {
      if (releaser) mbarrier_arrive(&q_empty[qb]);
    }
    if constexpr (Ops::kBlockScales) {
      if (n_tiles > 0) o_exp = ex.v_of(s, c.h, c.b)[n_tiles - 1];  // (O is in units of the last V block's scale)
    }
    if (o_by_tma) {
      named_barrier_sync(group_barrier, 128);
      store_rows_by_tma<typename Ops::Out, D, Ops::kBlockScales>(o_boxes, o, st, th, p, &o_map, c.h, c.b, group_barrier, issuer, o_exp);
      if constexpr (Persistent) {
        if (releaser && !issuer) mbarrier_arrive(&q_empty[qb]);  // (the phase completes only with the issuer's, after the store's reads)
        staged_q = qb;
      }
    } else {
      store_rows<typename Ops::Out, D, Ops::kBlockScales>(o, st, th, p, c.h, c.b, o_exp);
    }
    timeline.mark_tile(group, item, kTileStored);
    rescales += st.rescales;
    kv += n_tiles;
  }
  if (PingPong && group == 0) named_barrier_sync(my_turn, kTurnThreads);  // (the last group's last arrival)
  if (issuer && o_by_tma) bulk_wait_read<0>();  // (the staging tile is read before the CTA's shared memory goes)
  if constexpr (Rule::kSelective) {
    // (an integer sum: the same total in any order)
#pragma unroll
    for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) rescales += __shfl_xor_sync(0xffffffffu, rescales, lane_mask);
    if (p.rescale_count != nullptr && threadIdx.x % 32 == 0 && rescales > 0) atomicAdd(p.rescale_count, static_cast<unsigned long long>(rescales));
  }
}

// --- host side: the tensor-map strides and the grid both launchers use ----------------------------------------
// A stride TMA accepts for a dimension of `count` entries: its own where it is used, or any valid one
// (the span of the dimension inside) where the dimension has one entry and the tensor's stride may be
// anything (PyTorch gives size-1 dimensions arbitrary strides).
inline std::int64_t usable_stride(std::int64_t stride, int count, std::int64_t inner_span) { return count == 1 ? inner_span : stride; }

struct MapStrides {
  std::int64_t batch, head, row;
  bool valid(int align) const { return batch > 0 && head > 0 && row > 0 && batch % align == 0 && head % align == 0 && row % align == 0; }  // (align: elements per 16 bytes)
};
inline MapStrides strides_of(const Strided& x, int batch, int heads, int rows, int dim) {
  MapStrides m;
  m.row = usable_stride(x.row, rows, dim);
  m.head = usable_stride(x.head, heads, m.row * rows);
  m.batch = usable_stride(x.batch, batch, m.head * heads);
  return m;
}
// Whether TMA can read x as a [B, heads, rows, dim] 16-bit tensor: a 16-byte aligned base, strides that are
// multiples of 8 elements (every launcher of 16-bit tiles: cuda.fa3's forward and backward, Flash Hog's wgmma passes).
inline bool tma_readable16(const Strided& x, int batch, int heads, int rows, int dim) {
  return strides_of(x, batch, heads, rows, dim).valid(8) && reinterpret_cast<std::uintptr_t>(x.data) % 16 == 0;
}
// An output's layout as the Strided that strides_of, tma_readable16 and map_sw128 take (a tensor map describes a
// layout, for loads and stores alike).
inline Strided layout_of(const StridedOut& x) { return {x.data, x.batch, x.head, x.row}; }
// Whether a grid forward can store p's O by TMA (store_rows_by_tma) where its epilogue is asked to and its tiles hold
// the staging boxes: O rounded to nearest (stochastic rounding draws each element's word by its index, which
// store_rows does element by element) and a layout TMA can write. cuda.fa3's and cuda.fa4's launchers and
// fa3_fp8_o_by_tma take this one rule.
inline bool o_storable_by_tma(const ForwardParams& p) {
  const AttentionShapeParams& s = p.shape;
  return !p.rounding.stochastic && tma_readable16(layout_of(p.o), s.batch, s.heads_q, s.seq_q, s.head_dim);
}
// x's map with the 128-byte swizzle (make_tensor_map_sw128_bhnd): boxes of 64 along d x box_rows rows. x must be
// tma_readable16.
inline CUtensorMap map_sw128(const Strided& x, StorageType type, const AttentionShapeParams& s, int heads, int rows, std::uint32_t box_rows) {
  const MapStrides m = strides_of(x, s.batch, heads, rows, s.head_dim);
  const Element16 element = type == StorageType::fp16 ? Element16::fp16 : Element16::bf16;
  return make_tensor_map_sw128_bhnd(element, x.data, s.batch, heads, rows, s.head_dim, m.batch, m.head, m.row, box_rows);
}
// The persistent scheduler's work tiles (WorkTiles) for m_tiles query tiles per (batch, head). Under a causal mask a
// section is as many (batch, head) pairs as have K and V in half the L2 (a query head's share of its kv head's K and
// V), a power of two, so that longest first spans several heads. Without a mask every tile walks the same keys and
// the order cannot shorten the tail, so a section is one pair: the CTAs in flight then walk the fewest heads, in step,
// and L2 serves about half the bytes (ncu, H200, d = 128, N = 4k: 2.27 against 4.31 GB; the clock, set by power,
// 1.73 against 1.69 GHz; + 3.5 % in time; NOTES "The persistent scheduler's sections").
inline WorkTiles persistent_work_tiles(const AttentionShapeParams& s, int m_tiles, std::size_t element_bytes, int l2_bytes) {
  WorkTiles work;
  work.m_tiles = m_tiles, work.heads = s.heads_q, work.pairs = s.heads_q * s.batch;
  if (s.mask == CausalMask::none) return work;
  const double pair_bytes = 2.0 * s.seq_k * s.head_dim * static_cast<double>(element_bytes) / (s.heads_q / s.heads_kv);
  while (work.section * 2 <= work.pairs && 2 * work.section * pair_bytes <= l2_bytes / 2.0) work.section *= 2;
  return work;
}
// The grid of cta_tile(): query tiles of `rows` in x, heads in y, batches in z.
inline dim3 grid_of(const AttentionShapeParams& s, int rows, const char* family) {
  if (s.heads_q > 65535 || s.batch > 65535) {
    throw std::runtime_error(std::string(family) + ": " + std::to_string(s.heads_q) + " heads and batch " + std::to_string(s.batch) + ": at most 65535 of each (the grid's y and z)");
  }
  return dim3((s.seq_q + rows - 1) / rows, s.heads_q, s.batch);
}

}  // namespace fc::kernels::cuda::fa3
