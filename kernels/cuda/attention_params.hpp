// What a CUDA attention kernel receives: device pointers, strides and shapes, in plain types so the
// host code (g++) and the kernels (nvcc) share one definition. Tensors are [B, H, N, D] with a unit
// stride along D and any element strides along B, H and N (16-byte aligned rows: every stride and the
// base a multiple of 8 elements), so PyTorch's [B, N, H, D] memory is read in place.
#pragma once

#include <cstdint>

#include "precision/host_device.hpp"

namespace fc::kernels::cuda {

struct Strided {
  const void* data = nullptr;
  std::int64_t batch = 0, head = 0, row = 0;  // element strides
};
struct StridedOut {
  void* data = nullptr;
  std::int64_t batch = 0, head = 0, row = 0;
};

enum class StorageType : std::uint8_t { bf16, fp16 };
enum class CausalMask : std::uint8_t { none, top_left, bottom_right };

// How the outputs are rounded when stored: to nearest, or stochastically with the Philox words of
// precision/philox.hpp (seed, stream), keyed by each element's logical [B, H, N, D] index, the same
// words the CPU backends use.
struct OutputRounding {
  bool stochastic = false;
  std::uint64_t seed = 0;
};

struct AttentionShapeParams {
  int batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_k = 1, head_dim = 64;
  CausalMask mask = CausalMask::none;
  float scale = 1;  // the softmax scale s
  // The causal diagonal: (i, j) visible iff j <= i + causal_offset (Nk - Nq for bottom-right, 0 for
  // top-left).
  FC_HD int causal_offset() const { return mask == CausalMask::bottom_right ? seq_k - seq_q : 0; }
};

// The forward's tile shape (fa2_kernels.cu): query rows x keys per step, and warps per block.
enum class ForwardTile : std::uint8_t { m64n64w4, m128n64w4, m128n48w4, m128n32w4, m128n64w8 };

struct ForwardParams {
  AttentionShapeParams shape;
  ForwardTile tile = ForwardTile::m128n64w4;
  StorageType type = StorageType::bf16;
  Strided q, k, v;
  StridedOut o;
  float* lse = nullptr;  // [B, Hq, Nq] contiguous, fp32, natural log (-inf for a row with no visible key)
  OutputRounding rounding;
  std::uint32_t o_stream = 0;  // Philox stream of O (PrecisionPolicy::stream(Role::o))
  float* row_state = nullptr;  // workspace [2, B, Hq, Nq] fp32, cuda.fa1's running m and l (unused by fa2)
  // cuda.fa4's selective rescaling: tau in log2 units, and where the kernel adds its rescale count (per row and
  // key tile after the first; nullptr: not counted).
  float rescale_threshold = 0;
  unsigned long long* rescale_count = nullptr;
  // cuda.fa4's persistent scheduler: the count of work tiles claimed past the first wave (zero before the launch).
  int* work_counter = nullptr;
};

// The dK/dV pass's work split (fa2): each warp owns 16 keys across all of d (fa2_backward.cuh), or
// FA2's tiled blocks of 128 keys x 64 rows with P and dS staged in shared memory (fa2_backward_tiled.cuh);
// automatic: the faster measured at the head dim (kernels/cuda/NOTES.md: tiled at d = 128, warp_keys at 64).
enum class DkDvLayout : std::uint8_t { automatic, warp_keys, tiled };

struct BackwardParams {
  AttentionShapeParams shape;
  StorageType type = StorageType::bf16;
  Strided q, k, v, o, dout;
  const float* lse = nullptr;  // [B, Hq, Nq] contiguous fp32, as the forward wrote it
  StridedOut dq, dk, dv;
  float* delta = nullptr;      // workspace [B, Hq, Nq]: D = rowsum(dO o O)
  float* dq_accum = nullptr;   // workspace [B, Hq, Nq, d] fp32, 16-byte aligned: the dQ sum of fa2's fast mode, fa1 and fa3's fused backward
  // workspace [B, Hkv] (fa3's fused backward; optional): per kv head, how many of the key-tiled pass's consumer
  // warpgroups have finished adding their dQ partials. Given, dQ's conversion runs as a dependent launch that starts
  // once every CTA of the pass has (with a CTA per key tile: in its last wave) and converts each head once its count
  // is full; nullptr: converted after the pass.
  std::uint32_t* dq_ready = nullptr;
  // Tests only (fault injection): the fused pass's second consumer warpgroup sleeps this long before its last dQ
  // product of every key tile (its last reads of K, then its last dQ reduction), so that a conversion which did not
  // wait for every warpgroup's count would read an incomplete head, and a dK staged in K's buffer without waiting for
  // that last read (kv_read) would corrupt the product (fa3_backward_test.cpp). 0 in every real call.
  std::uint32_t dq_ready_test_delay_ns = 0;
  bool deterministic = true;   // fa2: dQ by its own query-tiled pass (no atomics) rather than atomics
  // fa3's key-tiled pass: 0, a CTA per key tile; -1, a CTA per SM walking the tiles (persistent); n > 0, n CTAs walking
  // them (at most one per tile; experiments and tests, which walk several tiles per CTA on small shapes this way)
  int key_pass_ctas = 0;
  // fa3's key-tiled pass, its launch order (key_tile_order.hpp): the last this many (batch, kv head) pairs launch their
  // key tiles key tile slowest (under a causal mask every one of those heads' long first key tiles before any short
  // last one), the pairs before them key tile fastest, head by head. 0: head by head throughout (measured no slower:
  // NOTES, "The causal backward's launch order"); more than the pairs: all of them. The same arithmetic per tile.
  int key_pass_tail_heads = 0;
  // fa3's key-tiled pass, how dK and dV leave: false, through shared memory (staged in the tile's K and V buffers) and
  // TMA stores, where their layouts allow it (16-byte aligned, strides multiples of 8 elements); true, by 4-byte global
  // stores from registers. The same bits either way (option bwd_epilogue; kernels/cuda/NOTES.md, version 14).
  bool dk_dv_by_stores = false;
  DkDvLayout dk_dv_layout = DkDvLayout::automatic;
  int dk_dv_keys = 64;         // fa2, warp_keys layout: keys per block, 64 (4 warps) or 128 (8 warps)
  OutputRounding rounding;
  std::uint32_t grad_stream = 0;  // Philox stream of the gradients (PrecisionPolicy::stream(Role::grad))
};

// The double backward (cuda.hog, EQUATIONS.md section 3): the first backward's inputs and the
// cotangents ddQ, ddK, ddV in; dQ', dK', dV', ddO out. The row statistics D, dd and b (fp32
// [B, Hq, Nq]) are the only state between its passes.
struct HogParams {
  AttentionShapeParams shape;
  StorageType type = StorageType::bf16;
  Strided q, k, v, o, dout, ddq, ddk, ddv;
  const float* lse = nullptr;  // [B, Hq, Nq] contiguous fp32, natural log
  StridedOut dq2, dk2, dv2, ddo;
  float* delta = nullptr;  // workspaces [B, Hq, Nq]: D = rowsum(dO o O), dd, b
  float* dd = nullptr;
  float* b = nullptr;
  bool two_pass = false;  // b accumulated with dd as r1 + r3 - 2 D dd (cuda.hog.2pass)
  // The mma.sync passes (hog_kernels.cuh) for every shape, also where the wgmma ones apply (hog_wgmma.hpp):
  // the baseline of same-run comparisons, and the tests of both forms.
  bool mma_sync_only = false;
  OutputRounding rounding;
  std::uint32_t grad_stream = 0;
};

}  // namespace fc::kernels::cuda
