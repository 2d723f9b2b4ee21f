// The Operands of fa3_forward_ws_kernel for cuda.fa3.fp8 (E4m3Ops; fa3_fp8_kernels.cu launches them, and
// kernels/cuda/tools/fa3_timeline.cu stamps them): e4m3 Q, K and V^T on QGMMA, P rounded to e4m3, O in bf16 or fp16,
// with V^T's key order (fp8_key_of_slot) that lets P's A fragments come straight from S's accumulator.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/fa3_forward.cuh"
#include "kernels/cuda/fa3_fp8_kernels.hpp"
#include "kernels/cuda/hopper/wgmma_e4m3.cuh"

namespace fc::kernels::cuda::fa3 {

// The key (0..31 within its 32) that P's A-fragment slot s holds: slot 4 t + i (i < 4) of the low half is
// S's column 8 (i / 2) + 2 t + i % 2 (n8 blocks 0 and 1), the high half the same 16 keys on.
__host__ __device__ constexpr int fp8_key_of_slot(int s) { return 16 * (s / 16) + 8 * ((s % 4) / 2) + 2 * ((s % 16) / 4) + (s % 2); }

// Four floats rounded to e4m3 (to nearest, saturating), packed low byte first.
__device__ inline std::uint32_t e4m3x4(float a, float b, float c, float d) {
  const std::uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const std::uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// The Operands of fa3_forward_ws_kernel for e4m3 Q, K and V^T; O stored as Out (bf16 or fp16). Key tiles of
// BlockN: 128, or at d = 128 FA3's FP8 tile, 224, or cuDNN's, 256 (block_k; a step's products are half of bf16's, so a
// longer tile spreads the step's fixed costs over more keys; 256 with P in registers runs the loop without overlap, with P in
// shared memory the overlapped loop). K and V carry one
// block exponent per key tile.
// PShared: P goes to a 64 x 128-byte tile of the group's in shared memory (two such boxes for 256 keys; the 128-byte
// swizzle, K-major, its bytes in the A fragments' order, so V^T's key order is unchanged) and P V reads it from there
// (QGMMA SS), FA3's
// Mma1_is_RS = false. P then holds no registers across the next S's product, which is what lets three consumer
// groups of 160 registers run at d = 128: O 64 + S 64 (with P's 16 in registers too ptxas serialised every wgmma, C7512;
// without them it spills 220 bytes: a few local loads and stores in the unmasked step, more in the masked one).
// VInKernel (tiles of 128 keys): V's tiles land as stored ([key][d], K's box and swizzle) and the producer warpgroup
// rewrites each into V^T's tile (transform_v), FA3's in-kernel transpose, so no transpose_v_e4m3 pass runs before.
template <class Out_, int D, int BlockN = fa3::kBlockN, bool PShared = false, bool VInKernel = false>
struct E4m3Ops {
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  static_assert(BlockN == 128 || ((BlockN == 224 || BlockN == 256) && D == 128), "fp8_key_tile_supported's tiles");
  static_assert(D != 256 || !VInKernel, "head dim 256: V^T from the pass (the producer's transpose takes rows of at most 128 bytes)");
  static_assert(!PShared || (BlockN == 128 && D >= 128) || (BlockN == 256 && D == 128),
                "P in shared memory: 128 keys at d = 128 or 256, 256 keys at d = 128 (boxes of 128 keys, one 128-byte swizzle span each)");
  static_assert(!VInKernel || BlockN == 128, "V rewritten in the kernel: tiles of 128 keys (one V^T box)");
  static constexpr int kBlockN = BlockN;  // keys per tile: one block exponent each
  // (the kernel indexes K's and V's exponents by its key tile, and Q's by a group's first row: a group's 64
  // rows lie in one block)
  static_assert(kFp8BlockRows % kGroupRows == 0, "a group's rows in one block");
  static constexpr int kQBlockRows = kFp8BlockRows;
  using Out = Out_;
  static constexpr int kD = D;
  static constexpr int kPaSteps = BlockN / 32;  // k32 steps over a tile's keys
  struct NoFragments {};
  using PFragments = std::conditional_t<PShared, NoFragments, std::uint32_t[kPaSteps][4]>;
  static constexpr unsigned kPBytes = PShared ? kGroupRows * BlockN : 0;  // (256 keys: two boxes of 128, store_p_tile's)
  // (256-key tiles: the two groups' turns at their exponentials, in either loop; NOTES "256-key tiles with P in shared
  // memory and overlap")
  static constexpr bool kTurnAtExps = BlockN == 256;
  // V^T's tile in boxes of 128 keys (128-byte rows, the 128-byte swizzle): one, or two for 224 and 256 keys (for 224 the
  // second box's last 32 keys go unread: a TMA box must not be wider than its swizzle, and 224 is no multiple of 64 or 128).
  static constexpr int kVtBoxes = (BlockN + 127) / 128;
  static constexpr unsigned kVtBoxBytes = D * 128;
  static constexpr unsigned kQBytes = kGroupRows * D, kKBytes = kBlockN * D, kVBytes = kVtBoxes * kVtBoxBytes;
  static constexpr bool kBlockScales = true;
  // (rescale by row half where P sits in shared memory: the three-group step without turns measured 0.5 % shorter;
  // the two-group ping-pong kernel with 224-key tiles 0.4 % slower, d = 64's level; d = 256's p_operand=shared not timed)
  static constexpr bool kRescaleByRowHalf = PShared;
  static constexpr unsigned kVRawBytes = VInKernel ? kKBytes : 0;  // (V's tile as stored: K's shape)
  static constexpr bool kCanHoldQ = false;  // (S reads Q from shared memory; the default kernel's three groups have no registers to spare)
  // Rows of Q and K in boxes of at most 128 bytes of d (a TMA box is no wider than its swizzle's span): one box at
  // d = 64 and 128, two at 256 (d's bytes 0-127 and 128-255), each a swizzled tile of its own.
  static constexpr int kDBoxes = (D + 127) / 128, kDBoxBytes = D / kDBoxes;
  static constexpr unsigned kQBoxBytes = kGroupRows * kDBoxBytes, kKBoxBytes = BlockN * kDBoxBytes;
  // Per d box: Q's 64 rows, K's BlockN keys; V^T's d rows x 128 keys per box (coordinates innermost first), or
  // (VInKernel) V's 128 keys x d, as K's.
  __device__ static void load_q(unsigned char* dst, const CUtensorMap* map, std::uint64_t* bar, int row0, int h, int b) {
    for (int box = 0; box < kDBoxes; ++box) tma_load_4d(dst + box * kQBoxBytes, map, bar, box * kDBoxBytes, row0, h, b);
  }
  __device__ static void prefetch_q(const CUtensorMap* map, int row0, int h, int b) {
    for (int box = 0; box < kDBoxes; ++box) tma_prefetch_l2_4d(map, box * kDBoxBytes, row0, h, b);
  }
  __device__ static void load_k(unsigned char* dst, const CUtensorMap* map, std::uint64_t* bar, int key0, int hk, int b) {
    for (int box = 0; box < kDBoxes; ++box) tma_load_4d(dst + box * kKBoxBytes, map, bar, box * kDBoxBytes, key0, hk, b);
  }
  __device__ static void load_v(unsigned char* dst, const CUtensorMap* map, std::uint64_t* bar, int key0, int hk, int b) {
    if constexpr (VInKernel) {
      tma_load_4d(dst, map, bar, 0, key0, hk, b);
    } else {
      for (int box = 0; box < kVtBoxes; ++box) tma_load_4d(dst + box * kVtBoxBytes, map, bar, key0 + 128 * box, 0, hk, b);
    }
  }

  // (VInKernel) V's tile as TMA landed it (128 keys x d bytes; rows of d bytes in the 128- or 64-byte swizzle, as K's)
  // into V^T's (d rows x 128 slots, the 128-byte swizzle, slot s of every 32 holding key fp8_key_of_slot(s)): the bytes
  // transpose_v_e4m3 writes, by the producer warpgroup's 128 threads (`thread`), FA3's way. Warp w takes keys
  // 32 w .. 32 w + 31 and, in step m, d's bytes 16 m .. 16 m + 15. Read as 16-bit elements, V's rows of 8 keys are 8 x 8
  // matrices; ldmatrix.trans gives lane l (c = l / 4, q = l % 4) of matrix i the bytes (key 2 q, d 2 c), (2 q, 2 c + 1),
  // (2 q + 1, 2 c), (2 q + 1, 2 c + 1) of keys 8 i .. 8 i + 7 (PTX ISA, ldmatrix's fragment layout). Slots 4 q .. 4 q + 3
  // of a 16 hold keys 2 q, 2 q + 1, 2 q + 8, 2 q + 9 (fp8_key_of_slot), so matrices i and i + 1 give V^T row 2 c's word
  // by PRMT 0x6420 and row 2 c + 1's by 0x7531, and stmatrix puts lane l's word of matrix j at row c, bytes 4 q of
  // j's 8 rows: rows 16 m + 2 r (+ 1), slots 32 w (+ 16). The loads are free of bank conflicts (8 keys' 16 bytes in 8
  // different 16-byte groups under either swizzle); the stores are 2-way (rows 2 r of a 128-byte swizzle fall in 4 groups).
  __device__ static void transform_v(const unsigned char* raw, unsigned char* vt, int thread) {
    static_assert(VInKernel && BlockN == 128);
    const int warp = thread / 32, lane = thread % 32, i = lane / 8, r = lane % 8;
    const std::uint32_t raw_base = smem_address(raw), vt_base = smem_address(vt);
    // byte offsets in the swizzled tiles: 16-byte chunk bits 4.. XORed with the 128-byte row bits 7.. (D / 16 chunks a row
    // of V's; V^T's rows are 128 slots)
    const auto raw_at = [](int key, int col) { const int a = key * D + col; return a ^ (((a >> 7) & (D / 16 - 1)) << 4); };
    const auto vt_at = [](int row, int slot) { const int a = row * 128 + slot; return a ^ (((a >> 7) & 7) << 4); };
    const int load_key = 32 * warp + 8 * i + r;                          // ldmatrix: lane 8 i + r gives matrix i's row r
    const int store_row = 2 * r + (i % 2), store_slot = 32 * warp + 16 * (i / 2);  // stmatrix: matrix j = i's row r
#pragma unroll 1
    for (int m = 0; m < D / 16; ++m) {
      std::uint32_t v[4];
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                   : "r"(raw_base + raw_at(load_key, 16 * m))
                   : "memory");
      const std::uint32_t even0 = __byte_perm(v[0], v[1], 0x6420), odd0 = __byte_perm(v[0], v[1], 0x7531);
      const std::uint32_t even1 = __byte_perm(v[2], v[3], 0x6420), odd1 = __byte_perm(v[2], v[3], 0x7531);
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(vt_base + vt_at(16 * m + store_row, store_slot)),
                   "r"(even0), "r"(odd0), "r"(even1), "r"(odd1)
                   : "memory");
    }
  }

  __device__ static std::uint64_t d_major(const void* p) { return D >= 128 ? wgmma_descriptor_sw128(p) : wgmma_descriptor_sw64(p); }

  __device__ static void qk(float (&sc)[BlockN / 8][4], const unsigned char* sQ, const unsigned char* sK) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < D / 32; ++k) {
      // (k32 step k: 32 bytes into a row of d box k / 4; at d <= 128 the one box)
      const std::uint64_t a = wgmma_descriptor_advance(d_major(sQ + (k / 4) * kQBoxBytes), k % 4);
      const std::uint64_t b = wgmma_descriptor_advance(d_major(sK + (k / 4) * kKBoxBytes), k % 4);
      if constexpr (BlockN == 256) {
        wgmma_m64n256k32_e4m3_ss(reinterpret_cast<float(&)[128]>(sc), a, b, k > 0);
      } else if constexpr (BlockN == 224) {
        wgmma_m64n224k32_e4m3_ss(reinterpret_cast<float(&)[112]>(sc), a, b, k > 0);
      } else {
        wgmma_m64n128k32_e4m3_ss(reinterpret_cast<float(&)[64]>(sc), a, b, k > 0);
      }
    }
    wgmma_commit();
  }
  // S of this warp's 16 rows (16 w .. 16 w + 15 of the group's 64) by the warp alone: mma.sync m16n8k32 from Q's and K's
  // tiles in shared memory (d = 128: rows of 128 bytes, the 128-byte swizzle, 16-byte chunk c of row r at c ^ (r % 8)), into
  // the accumulator layout qk gives. The selective rule's slow path (softmax_tile_stale_first) takes S again this way after
  // its exponentials have overwritten it: a wgmma issued under a condition makes ptxas serialise every wgmma (C7514), and
  // the warps of a group take the path independently. The products of e4m3 values are exact in fp32; the sums may round in
  // another order than QGMMA's, so these S are QGMMA's to fp32's rounding of the sums, not bit for bit.
  __device__ static void qk_warp(float (&sc)[BlockN / 8][4], const unsigned char* sQ, const unsigned char* sK) {
    static_assert(D == 128, "rows of 128 bytes, one d box");
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, q_row = 16 * static_cast<int>((threadIdx.x % 128) / 32) + g;
    const auto word = [](const unsigned char* tile, int row, int byte) {
      return *reinterpret_cast<const std::uint32_t*>(tile + row * 128 + ((((byte / 16) ^ (row % 8))) * 16) + byte % 16);
    };
#pragma unroll
    for (auto& x : sc) x[0] = x[1] = x[2] = x[3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 32; ++ks) {
      const int b = 32 * ks + 4 * t;
      const std::uint32_t a[4] = {word(sQ, q_row, b), word(sQ, q_row + 8, b), word(sQ, q_row, b + 16), word(sQ, q_row + 8, b + 16)};
#pragma unroll
      for (int nb = 0; nb < BlockN / 8; ++nb) mma_m16n8k32_e4m3(sc[nb], a, word(sK, 8 * nb + g, b), word(sK, 8 * nb + g, b + 16));
    }
  }
  // k32 step kk covers S's n8 blocks 4 kk .. 4 kk + 3: a[0] = row g's pairs of blocks 0 and 1, a[1] row g + 8's,
  // a[2] and a[3] the same of blocks 2 and 3 (hence V^T's key order, fp8_key_of_slot). PShared: the same four words go
  // to the group's tile (store_p_tile), whose bytes are then the fragments' slots, so its columns are V^T's.
  __device__ static void fragments(std::uint32_t (&a)[kPaSteps][4], const float (&sc)[BlockN / 8][4]) {
#pragma unroll
    for (int kk = 0; kk < kPaSteps; ++kk) {
      const float(&b0)[4] = sc[4 * kk];
      const float(&b1)[4] = sc[4 * kk + 1];
      const float(&b2)[4] = sc[4 * kk + 2];
      const float(&b3)[4] = sc[4 * kk + 3];
      a[kk][0] = e4m3x4(b0[0], b0[1], b1[0], b1[1]);
      a[kk][1] = e4m3x4(b0[2], b0[3], b1[2], b1[3]);
      a[kk][2] = e4m3x4(b2[0], b2[1], b3[0], b3[1]);
      a[kk][3] = e4m3x4(b2[2], b2[3], b3[2], b3[3]);
    }
  }
  __device__ static void pack(PFragments& pa, const float (&sc)[BlockN / 8][4], unsigned char* sP) {
    if constexpr (PShared) {
      std::uint32_t words[kPaSteps][4];
      fragments(words, sc);
      store_p_tile(sP, words);  // (fa3_forward.cuh: the fragments' words at their places in the group's tile, then the fence)
    } else {
      fragments(pa, sc);
    }
  }
  __device__ static void pv(float (&o)[D / 8][4], const PFragments& pa, const unsigned char* sP, const unsigned char* sVt) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPaSteps; ++kk) {
      // (d rows of 128 keys (128 bytes) per box of V^T, 64 rows of 128 keys per box of P; k32 step kk in box kk / 4 of each)
      const std::uint64_t b = wgmma_descriptor_advance(wgmma_descriptor_sw128(sVt + (kk / 4) * kVtBoxBytes), kk % 4);
      if constexpr (PShared && D == 256) {
        wgmma_m64n256k32_e4m3_ss(reinterpret_cast<float(&)[128]>(o), wgmma_descriptor_advance(wgmma_descriptor_sw128(sP + (kk / 4) * kQBox), kk % 4), b, 1);
      } else if constexpr (PShared) {
        wgmma_m64n128k32_e4m3_ss(reinterpret_cast<float(&)[64]>(o), wgmma_descriptor_advance(wgmma_descriptor_sw128(sP + (kk / 4) * kQBox), kk % 4), b, 1);
      } else if constexpr (D == 256) {
        wgmma_m64n256k32_e4m3_rs(reinterpret_cast<float(&)[128]>(o), pa[kk], b, 1);
      } else if constexpr (D == 128) {
        wgmma_m64n128k32_e4m3_rs(reinterpret_cast<float(&)[64]>(o), pa[kk], b, 1);
      } else {
        wgmma_m64n64k32_e4m3_rs(reinterpret_cast<float(&)[32]>(o), pa[kk], b, 1);
      }
    }
    wgmma_commit();
  }
};

}  // namespace fc::kernels::cuda::fa3
