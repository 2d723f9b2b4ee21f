// cuda.fa3.fp8's forward (kernels/cuda/NOTES.md, "cuda.fa3.fp8"): cuda.fa3's warp-specialised pipeline
// (fa3_forward.cuh: producer warpgroup, K/V ring, consumer warpgroups (two, three at d = 64, taking turns; three at d = 128
// with P in shared memory, by default without turns: Fp8Turns), the next S issued with this tile's P V) with e4m3
// operands on the FP8 tensor cores (QGMMA, hopper/wgmma_e4m3.cuh):
//   - S = Q K^T by m64nBk32 from shared memory (B keys a tile: 128, or block_k's 224 or 256 at d = 128),
//     both K-major (Q and K as stored: d innermost);
//   - P rounded to e4m3 (RN, saturating; P <= 1) straight from S's accumulator registers into A fragments;
//   - O += P V by m64nDk32 with B = V^T's tile, K-major (keys innermost), which transpose_v_e4m3 writes
//     before the forward: 8-bit wgmma has no transpose flag, so V's [key][d] tile cannot be read as it is
//     (v_transpose=kernel: the producer warpgroup transposes each tile in shared memory instead, E4m3Ops::transform_v).
// P's A fragment wants, per lane, 4 consecutive keys (4 t .. 4 t + 3 and 16 + 4 t ..) where S's accumulator
// holds pairs (2 t, 2 t + 1 of every 8). Instead of moving bytes between lanes, each 32 keys of V^T are stored
// in the order the fragments hold them (fp8_key_of_slot): slot s of the fragment is key fp8_key_of_slot(s),
// and P V sums over the same keys in another order. (The Operands class, E4m3Ops, is in fa3_fp8_ops.cuh.)
// Block exponents: each 128 rows of Q and each key tile of K and V carry a power of two (values = e4m3 x 2^e), folded into the
// softmax scale per (query block, key tile) and into O's rescale per V tile (fa3_forward.cuh: the producer forms both
// per key tile into shared memory), so the block
// scaling is exact, as in cpu.fa3.fp8.
//
// Shared memory per CTA: Q (groups x 64) x d bytes; per stage a K tile (B keys x d) and a V^T tile (d x 128 keys per box).
// Rows of 128 bytes use the 128-byte swizzle, rows of 64 bytes (d = 64's Q and K) the 64-byte swizzle; at d = 256 Q and K
// land as two boxes of 128-byte rows (E4m3Ops::kDBoxes).
#include "kernels/cuda/fa3_fp8_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "kernels/cuda/fa3_forward.cuh"
#include "kernels/cuda/fa3_fp8_ops.cuh"
#include "kernels/cuda/hopper/tensor_map.hpp"
#include "kernels/cuda/hopper/wgmma_e4m3.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "precision/fp8.hpp"

namespace fc::kernels::cuda {
namespace {

using namespace fa3;

// --- preparation ---------------------------------------------------------------------------------------------
template <class In>
__device__ inline float wide_value(const In* p) {
  if constexpr (std::is_same_v<In, float>) {
    return *p;
  } else if constexpr (std::is_same_v<In, __nv_bfloat16>) {
    return __bfloat162float(*p);
  } else {
    return __half2float(*p);
  }
}

constexpr int kPrepThreads = 256;

// One CTA per block of block_rows rows of one head: the block's largest magnitude, its exponent, the e4m3 values.
template <class In>
__global__ void __launch_bounds__(kPrepThreads) quantize_e4m3_blocks_kernel(const Strided x, int heads, int rows, int dim, int block_rows, std::uint8_t* out,
                                                                           int* exponents, unsigned* first_inexact) {
  const int block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int r0 = block * block_rows, count = min(block_rows, rows - r0) * dim;
  const In* src = static_cast<const In*>(x.data) + b * x.batch + h * x.head;
  const auto at = [&](int i) { return src + (r0 + i / dim) * x.row + i % dim; };
  float amax = 0.f;
  for (int i = threadIdx.x; i < count; i += kPrepThreads) amax = fmaxf(amax, fabsf(wide_value(at(i))));
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, lane_mask));
  __shared__ float warp_max[kPrepThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  for (int w = 0; w < kPrepThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  const int e = e4m3_block_exponent_of_float(amax);
  std::uint8_t* dst = out + ((static_cast<std::int64_t>(b) * heads + h) * rows + r0) * dim;
  bool exact = true;
  for (int i = threadIdx.x; i < count; i += kPrepThreads) {
    const float v = wide_value(at(i));
    const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(ldexpf(v, -e), __NV_SATFINITE, __NV_E4M3);
    exact = exact && ldexpf(__half2float(__half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3))), e) == v;
    dst[i] = q;
  }
  const int index = (b * heads + h) * static_cast<int>(gridDim.x) + block;
  if (!__syncthreads_and(exact) && threadIdx.x == 0) atomicMin(first_inexact, static_cast<unsigned>(index));
  if (threadIdx.x == 0) exponents[index] = e;
}

// One CTA per 128 keys of one head: V's 128 x d bytes in 16-byte vectors into shared memory, then V^T's d rows
// of 128 slots out in 16-byte vectors, each gathered from the column in slot order (fp8_key_of_slot per 32).
// A vector's 16 slots slot0 + s (slot0 a multiple of 16) hold keys slot0 + fp8_key_of_slot(s), the order permuting
// keys within each 16: so its 16 bytes are one runtime address plus 16 constant row offsets (written with slot / 32
// and slot % 32, the compiler computed every byte's address: about 400 instructions a vector against 58, and the
// pass moved 1.3 TB/s on the H100). A warp's
// gather reads one slot of 8 vectors (rows 16 apart) in 4 columns; row r's 16-byte chunk q is staged at chunk
// (q + r / 16) % 8 of a 128-byte row, so those 8 rows fall in 8 banks and the 4 columns in one word of each.
constexpr bool fp8_order_keeps_each_16() {
  for (int s = 0; s < 16; ++s) {
    if (fp8_key_of_slot(s) >= 16 || fp8_key_of_slot(16 + s) != 16 + fp8_key_of_slot(s)) return false;
  }
  return true;
}
static_assert(fp8_order_keeps_each_16(), "the V^T gather's constant row offsets");

__device__ inline int vt_stage_offset(int r, int c) { return r * 128 + (((c >> 4) + (r >> 4)) & 7) * 16 + (c & 15); }

// The columns span0 .. span0 + span - 1 (span <= 128, a multiple of 16) of one tile, staged in t (128 keys x 128 bytes).
__device__ inline void transpose_v_span(const std::uint8_t* src, std::int64_t row_stride, int tile, int keys, int span0, int span, int vt_keys, std::uint8_t* t,
                                        std::uint8_t* dst_head) {
  const int vectors = span / 16;
  for (int i = threadIdx.x; i < kBlockN * vectors; i += kPrepThreads) {
    const int r = i / vectors, c = 16 * (i % vectors), key = tile * kBlockN + r;
    *reinterpret_cast<uint4*>(&t[vt_stage_offset(r, c)]) =
        key < keys ? *reinterpret_cast<const uint4*>(src + static_cast<std::int64_t>(key) * row_stride + span0 + c) : make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
  std::uint8_t* dst = dst_head + static_cast<std::int64_t>(span0) * vt_keys + tile * kBlockN;
  for (int i = threadIdx.x; i < span * (kBlockN / 16); i += kPrepThreads) {
    const int c = i / (kBlockN / 16), slot0 = 16 * (i % (kBlockN / 16));
    const std::uint8_t* column = t + vt_stage_offset(slot0, c);  // (rows slot0 .. slot0 + 15 share the chunk rotation)
    std::uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      w[q] = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) w[q] |= static_cast<std::uint32_t>(column[128 * fp8_key_of_slot(4 * q + k)]) << (8 * k);
    }
    *reinterpret_cast<uint4*>(dst + static_cast<std::int64_t>(c) * vt_keys + slot0) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// (d > 128: the CTA transposes d's bytes in spans of 128, the staging tile's width, one after the other)
__global__ void __launch_bounds__(kPrepThreads) transpose_v_e4m3_kernel(const Strided v, int heads, int keys, int dim, int vt_keys, std::uint8_t* vt) {
  const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  __shared__ alignas(16) std::uint8_t t[kBlockN * 128];
  const auto* src = static_cast<const std::uint8_t*>(v.data) + b * v.batch + h * v.head;
  std::uint8_t* dst_head = vt + (static_cast<std::int64_t>(b) * heads + h) * dim * vt_keys;
  for (int span0 = 0; span0 < dim; span0 += 128) {
    if (span0 > 0) __syncthreads();  // (every gather of the previous span has read the staging tile)
    transpose_v_span(src, v.row, tile, keys, span0, min(128, dim - span0), vt_keys, t, dst_head);
  }
}

void require_grid(int heads, int batch, const char* what) {
  if (heads > 65535 || batch > 65535) {
    throw std::runtime_error(std::string(what) + ": " + std::to_string(heads) + " heads and batch " + std::to_string(batch) + ": at most 65535 of each");
  }
}

// --- the forward ---------------------------------------------------------------------------------------------
// (A 3-stage ring measured 1-3 % slower than 2 stages at d = 128, N = 4k and 16k, H200, 163e754: the FP8 tiles
// arrive in time with two.)
// Groups consumer warpgroups: kForwardGroups<D> (three at d = 64) with P in registers, or three at d = 128 (two at 256)
// with P in shared memory (PShared). The layout changes when rows are computed, not how: the same bits.
// o_map: O's map where work.o_by_tma (the kernel stages O only where its Q and P tiles hold it: PShared at d = 128).
// Turns: the consumer groups take turns to issue (fa3_fp8_takes_turns); with 256-key tiles, at their exponentials.
// VInKernel: V's tiles as stored, transposed by the producer warpgroup (fa3_fp8_transposes_v_in_kernel).
// Persistent: one CTA per SM walking the work tiles longest first (fa3_fp8_persistent), the kernels with P in shared
// memory and V^T from the pass: 128-key tiles without turns, 256-key tiles (in turns).
// Selective: FA4's rule (tau = p.rescale_threshold > 0) with the stale maxima first (softmax_tile_stale_first): the 256-key
// kernel with P in shared memory only (fa3_fp8_selective_supported), + 4.4-6.1 % over FA3's rule there (H200, NOTES "The
// selective rule without the row max in the 256-key FP8 kernel").
template <class Out, int D, int BlockN = kBlockN, bool PShared = false, int Groups = kForwardGroups<D>, bool Turns = true, bool VInKernel = false,
          bool Persistent = false, bool Selective = false>
void launch_fp8(const Fp8TensorMaps& m, const WorkTiles& work, const ForwardParams& p, const BlockExponents& ex, cudaStream_t stream) {
  using Ops = E4m3Ops<Out, D, BlockN, PShared, VInKernel>;
  constexpr int kStages = 2, kGroups = Groups;
  using Layout = WsLayout<kGroups>;
  constexpr std::size_t bytes = ws_smem_bytes<Ops, kStages, Persistent, kGroups>();
  static_assert(bytes <= kSm90SharedBytesPerBlock, "cuda.fa3.fp8: shared memory beyond sm_90's 227 KiB per block");
  static_assert(!PShared || D == 256 || kOStagingFits<Ops>, "P's tile and Q's hold O's staging boxes (fa3_fp8_o_by_tma's rule; not at d = 256)");
  static_assert(Turns || PShared, "without turns: P in shared memory only (fa3_fp8_takes_turns' rule)");
  static_assert(!Persistent || (PShared && (!Turns || BlockN == 256) && !VInKernel), "persistent: fa3_fp8_persistent_supported's kernels");
  // (256-key tiles, turns at the exponentials (E4m3Ops::kTurnAtExps): with P in registers the loop without overlap, cuDNN's
  // FP8 order (NOTES "256-key tiles without overlap"), since with overlap a group would hold S of the next tile (128
  // registers), P (32) and O (64) at once, beyond its 240; with P in shared memory the overlapped loop (NOTES "256-key
  // tiles with P in shared memory and overlap"))
  constexpr bool kOverlap = BlockN != 256 || PShared;
  static_assert(BlockN != 256 || (kGroups == 2 && (Turns || Selective) && (PShared || !Persistent)),
                "256-key tiles: two groups in turns (without, the selective rule only); persistent with P in shared memory");
  static_assert(!Selective || (BlockN == 256 && PShared), "the selective rule: the 256-key kernel with P in shared memory");
  using Rule = std::conditional_t<Selective, SoftmaxRule<true, 0>, Fa3Rule>;
  auto* kernel = fa3_forward_ws_kernel<Ops, kStages, kOverlap, Turns, Rule, Persistent, kGroups>;
  allow_smem(kernel, static_cast<int>(bytes), "cuda.fa3.fp8");
  const dim3 grid = grid_of(p.shape, Layout::kCtaRows, "cuda.fa3.fp8");
  if constexpr (Persistent) {
    int device = 0, l2_bytes = 0;
    const int sms = device_sm_count("cuda.fa3.fp8");
    check_launch_result(cudaGetDevice(&device), "cuda.fa3.fp8");
    check_launch_result(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device), "cuda.fa3.fp8");
    WorkTiles tiles = persistent_work_tiles(p.shape, static_cast<int>(grid.x), kFp8SectionElementBytes, l2_bytes);
    tiles.o_by_tma = work.o_by_tma;
    kernel<<<std::min(tiles.m_tiles * tiles.pairs, sms), Layout::kThreads, bytes, stream>>>(m.q, m.k, m.vt, m.o, p, tiles, ex, NoTimeline{});
  } else {
    kernel<<<grid, Layout::kThreads, bytes, stream>>>(m.q, m.k, m.vt, m.o, p, work, ex, NoTimeline{});
  }
}

// One launch's arguments, and the two choices made at run time: O's type, and whether V is transposed in the kernel.
struct Fp8Launch {
  const Fp8TensorMaps& m;
  const WorkTiles& work;
  const ForwardParams& p;
  const BlockExponents& ex;
  cudaStream_t stream;
  bool fp16, v_in_kernel, persistent, selective, turns;
};
template <int D, int BlockN = kBlockN, bool PShared = false, int Groups = kForwardGroups<D>, bool Turns = true>
void launch_fp8_kernel(const Fp8Launch& l) {
  if constexpr (PShared && BlockN == 256) {
    if (l.selective) {
      // (Persistent, Turns at run time: four kernels for each O type)
      const auto launch = [&]<bool P, bool T>() {
        l.fp16 ? launch_fp8<__half, D, BlockN, PShared, Groups, T, false, P, true>(l.m, l.work, l.p, l.ex, l.stream)
               : launch_fp8<__nv_bfloat16, D, BlockN, PShared, Groups, T, false, P, true>(l.m, l.work, l.p, l.ex, l.stream);
      };
      if (l.persistent) {
        l.turns ? launch.template operator()<true, true>() : launch.template operator()<true, false>();
      } else {
        l.turns ? launch.template operator()<false, true>() : launch.template operator()<false, false>();
      }
      return;
    }
  }
  if constexpr (PShared && (!Turns || BlockN == 256) && D != 256) {
    if (l.persistent) {
      l.fp16 ? launch_fp8<__half, D, BlockN, PShared, Groups, Turns, false, true>(l.m, l.work, l.p, l.ex, l.stream)
             : launch_fp8<__nv_bfloat16, D, BlockN, PShared, Groups, Turns, false, true>(l.m, l.work, l.p, l.ex, l.stream);
      return;
    }
  }
  if constexpr (fp8_v_in_kernel_supported(BlockN, D)) {
    if (l.v_in_kernel) {
      l.fp16 ? launch_fp8<__half, D, BlockN, PShared, Groups, Turns, true>(l.m, l.work, l.p, l.ex, l.stream)
             : launch_fp8<__nv_bfloat16, D, BlockN, PShared, Groups, Turns, true>(l.m, l.work, l.p, l.ex, l.stream);
      return;
    }
  }
  l.fp16 ? launch_fp8<__half, D, BlockN, PShared, Groups, Turns>(l.m, l.work, l.p, l.ex, l.stream)
         : launch_fp8<__nv_bfloat16, D, BlockN, PShared, Groups, Turns>(l.m, l.work, l.p, l.ex, l.stream);
}

}  // namespace

// automatic: shared at d = 128 with 128-key tiles, + 5-7 % without a mask on the H200 (NOTES "P from shared memory"), and
// with 256-key tiles, where it lets the groups overlap S with P V, + 2-7 % (NOTES "256-key tiles with P in shared memory
// and overlap"); not at d = 256, where it measured level to 2 % slower (NOTES "Head dim 256"). It gives the register
// path's bits, so the choice changes the time only.
bool fa3_fp8_p_from_shared(const Fp8ForwardParams& f) {
  return f.p_operand == Fp8POperand::shared || (f.p_operand == Fp8POperand::automatic && fp8_p_shared_by_default(f.block_k, f.p.shape.head_dim));
}

// O by TMA (Fa3Epilogue::automatic) where the kernel has shared memory to stage it in: a 16-bit O of 64 rows x 128 is
// two boxes, an e4m3 Q tile holds one and the P tile the other (P in shared memory only); stochastic rounding draws
// each element's word by its index (store_rows), and TMA needs O's strides in multiples of 16 bytes.
// (d = 256: O's four boxes are more than the Q tile's two and the P tile's one)
bool fa3_fp8_o_by_tma(const Fp8ForwardParams& f) {
  return f.epilogue == Fa3Epilogue::automatic && fa3_fp8_p_from_shared(f) && f.p.shape.head_dim <= 128 && o_storable_by_tma(f.p);
}

// automatic: none where P is in shared memory (NOTES "Three groups without turns": the kernel alone + 3-6 % at 16k on the
// H100, the bench + 0.7 % on average, no point below - 1 %); the kernels with P in registers keep FA3's ping-pong.
// 256-key tiles take turns, at the exponentials: without turns the overlapped 256-key kernel measured 1.6-4.3 %
// slower than the loop without overlap without a mask, with turns at the exponentials 1.3-4.8 % faster (NOTES "256-key
// tiles with P in shared memory and overlap"). Only under the selective rule (tau > 0) does turns=none run it without
// them: there auto keeps the turns, which measured 3-7 % faster than none (NOTES "The selective rule without the row max
// in the 256-key FP8 kernel").
bool fa3_fp8_takes_turns(const Fp8ForwardParams& f) {
  return f.turns == Fp8Turns::ring || !fa3_fp8_p_from_shared(f) || (f.block_k == 256 && !(f.turns == Fp8Turns::none && f.p.rescale_threshold > 0.f));
}

// automatic: the pass. The producer warpgroup's transpose by 4-byte loads and stores lengthened the FP8 step by 450 SM
// clocks (the kernel 18-20 % slower, H200), against the pass's 1-4 % of the bench's FP8 time (NOTES "V transposed in the
// kernel"); FA3's way of it (ldmatrix.trans, PRMT, stmatrix) still leaves the kernel 2-7 % behind the pass and the
// kernel together (NOTES "FA3's V transpose in the kernel").
bool fa3_fp8_transposes_v_in_kernel(const Fp8ForwardParams& f) { return f.v_transpose == Fp8VTranspose::kernel; }

// (the kernels with P in shared memory at d = 128: 128-key tiles without turns, 256-key tiles in turns)
bool fa3_fp8_persistent_supported(const Fp8ForwardParams& f) {
  return f.p.shape.head_dim <= 128 && fa3_fp8_p_from_shared(f) && (!fa3_fp8_takes_turns(f) || f.block_k == 256) && !fa3_fp8_transposes_v_in_kernel(f);
}
// automatic: persistent under causal masks where supported; with 256-key tiles under every mask, where it measured
// + 0.7-2.2 % over the grid (NOTES "256-key tiles with P in shared memory and overlap").
bool fa3_fp8_persistent(const Fp8ForwardParams& f) {
  return f.scheduler == Fp8Scheduler::persistent ||
         (f.scheduler == Fp8Scheduler::automatic && (persistent_scheduler_by_default(f.p.shape) || f.block_k == 256) && fa3_fp8_persistent_supported(f));
}

bool fa3_fp8_selective_supported(const Fp8ForwardParams& f) { return f.block_k == 256 && f.p.shape.head_dim == 128 && fa3_fp8_p_from_shared(f); }

Fp8TensorMaps fa3_fp8_tensor_maps(const Fp8ForwardParams& f) {
  const ForwardParams& p = f.p;
  const AttentionShapeParams& s = p.shape;
  const int d = s.head_dim, vt_keys = fp8_vt_keys(s.seq_k);
  const MapStrides mq = strides_of(p.q, s.batch, s.heads_q, s.seq_q, d), mk = strides_of(p.k, s.batch, s.heads_kv, s.seq_k, d);
  const std::int64_t vt_head = static_cast<std::int64_t>(d) * vt_keys;
  Fp8TensorMaps m;
  const auto d_box = static_cast<std::uint32_t>(std::min(d, 128));  // (E4m3Ops::kDBoxBytes: two boxes along d at 256)
  m.q = make_tensor_map_e4m3_bhnd(p.q.data, s.batch, s.heads_q, s.seq_q, d, mq.batch, mq.head, mq.row, d_box, kGroupRows);
  m.k = make_tensor_map_e4m3_bhnd(p.k.data, s.batch, s.heads_kv, s.seq_k, d, mk.batch, mk.head, mk.row, d_box, f.block_k);
  if (fa3_fp8_transposes_v_in_kernel(f)) {
    const MapStrides mv = strides_of(f.v, s.batch, s.heads_kv, s.seq_k, d);
    m.vt = make_tensor_map_e4m3_bhnd(f.v.data, s.batch, s.heads_kv, s.seq_k, d, mv.batch, mv.head, mv.row, d, kBlockN);
  } else {
    m.vt = make_tensor_map_e4m3_bhnd(f.vt, s.batch, s.heads_kv, d, vt_keys, vt_head * s.heads_kv, vt_head, vt_keys, 128, d);
  }
  if (fa3_fp8_o_by_tma(f)) m.o = map_sw128(layout_of(p.o), p.type, s, s.heads_q, s.seq_q, kGroupRows);
  return m;
}

bool fa3_fp8_supports(const ForwardParams& p) {
  const AttentionShapeParams& s = p.shape;
  if ((s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) || s.heads_kv < 1 || s.heads_q % s.heads_kv != 0) return false;
  for (const auto& [x, heads, rows] : {std::tuple{&p.q, s.heads_q, s.seq_q}, std::tuple{&p.k, s.heads_kv, s.seq_k}}) {
    if (!strides_of(*x, s.batch, heads, rows, s.head_dim).valid(16) || reinterpret_cast<std::uintptr_t>(x->data) % 16 != 0) return false;
  }
  return true;
}

void fa3_fp8_forward(const Fp8ForwardParams& f, cudaStream_t stream) {
  const ForwardParams& p = f.p;
  const AttentionShapeParams& s = p.shape;
  if (!fa3_fp8_supports(p)) {
    throw std::runtime_error("cuda.fa3.fp8: head dim 64, 128 or 256 (got " + std::to_string(s.head_dim) +
                             "), heads_q a multiple of heads_kv, a 16-byte aligned base and strides that are multiples of 16 bytes only");
  }
  if (!fp8_key_tile_supported(f.block_k, s.head_dim)) {
    throw std::runtime_error("cuda.fa3.fp8: key tiles (block_k) of 128, or 224 or 256 at head dim 128 (got " + std::to_string(f.block_k) + " at head dim " + std::to_string(s.head_dim) + ")");
  }
  if (f.p_operand == Fp8POperand::shared && !fp8_p_shared_supported(f.block_k, s.head_dim)) {
    throw std::runtime_error("cuda.fa3.fp8: P from shared memory (p_operand=shared) with block_k 128 at head dim 128 or 256, or 256 at head dim 128 only (got head dim " +
                             std::to_string(s.head_dim) + ", block_k " + std::to_string(f.block_k) + ")");
  }
  if (f.turns == Fp8Turns::none && (!fa3_fp8_p_from_shared(f) || (f.block_k != 128 && !(f.block_k == 256 && p.rescale_threshold > 0.f)))) {
    throw std::runtime_error("cuda.fa3.fp8: turns=none with P in shared memory and block_k 128, or block_k 256 with tau > 0, only (p_operand=shared at head dim 128 or 256, "
                             "or auto at 128; got head dim " + std::to_string(s.head_dim) + ", block_k " + std::to_string(f.block_k) + ", p_operand=" +
                             fp8_p_operand_name(f.p_operand) + ", tau " + std::to_string(p.rescale_threshold) + ")");
  }
  const bool v_in_kernel = fa3_fp8_transposes_v_in_kernel(f);
  if (v_in_kernel && !fp8_v_in_kernel_supported(f.block_k, s.head_dim)) {
    throw std::runtime_error("cuda.fa3.fp8: V transposed in the kernel (v_transpose=kernel) with key tiles of 128 at head dim 64 or 128 only (got block_k " +
                             std::to_string(f.block_k) + " at head dim " + std::to_string(s.head_dim) + ")");
  }
  if (v_in_kernel && (!strides_of(f.v, s.batch, s.heads_kv, s.seq_k, s.head_dim).valid(16) || reinterpret_cast<std::uintptr_t>(f.v.data) % 16 != 0)) {
    throw std::runtime_error("cuda.fa3.fp8: V (read by the kernel) needs a 16-byte aligned base and strides that are multiples of 16 bytes");
  }
  if (!(p.rescale_threshold >= 0.f && p.rescale_threshold <= kFp8MaxTau)) {
    throw std::runtime_error("cuda.fa3.fp8: tau (the rescale threshold) in [0, 8] log2 units: P runs up to 2^tau and is rounded to e4m3, whose largest value is 448 (got " +
                             std::to_string(p.rescale_threshold) + ")");
  }
  const bool selective = p.rescale_threshold > 0.f;
  if (selective && !fa3_fp8_selective_supported(f)) {
    throw std::runtime_error("cuda.fa3.fp8: tau > 0 (FA4's selective rule) with block_k 256 and P in shared memory at head dim 128 only (got head dim " +
                             std::to_string(s.head_dim) + ", block_k " + std::to_string(f.block_k) + ", p_operand=" + fp8_p_operand_name(f.p_operand) + ")");
  }
  const bool persistent = fa3_fp8_persistent(f);
  if (persistent && !fa3_fp8_persistent_supported(f)) {
    throw std::runtime_error(
        "cuda.fa3.fp8: the persistent scheduler runs the kernels with P in shared memory and V^T from the pass only (head dim 128, p_operand auto or shared, "
        "v_transpose auto or pass; block_k 128 with turns auto or none, or block_k 256)");
  }
  if (persistent && p.work_counter == nullptr) {
    throw std::runtime_error("cuda.fa3.fp8: the persistent scheduler needs a work counter (ForwardParams::work_counter, 0 at the launch)");
  }
  const Fp8TensorMaps m = fa3_fp8_tensor_maps(f);
  const BlockExponents ex{f.q_exponents, f.k_exponents, f.v_exponents, (s.seq_q + kFp8BlockRows - 1) / kFp8BlockRows, (s.seq_k + f.block_k - 1) / f.block_k};
  const bool fp16 = p.type == StorageType::fp16;
  WorkTiles work;
  work.o_by_tma = fa3_fp8_o_by_tma(f);
  work.ctas_in_flight = device_sm_count("cuda.fa3.fp8 forward");
  const int d = s.head_dim;
  const Fp8Launch l{m, work, p, ex, stream, fp16, v_in_kernel, persistent, selective, fa3_fp8_takes_turns(f)};
  if (fa3_fp8_p_from_shared(f) && d == 256) {
    // (two groups: O's 128 registers leave no room for a third)
    fa3_fp8_takes_turns(f) ? launch_fp8_kernel<256, 128, true, 2>(l) : launch_fp8_kernel<256, 128, true, 2, false>(l);
  } else if (fa3_fp8_p_from_shared(f) && f.block_k == 256) {
    launch_fp8_kernel<128, 256, true, 2>(l);  // (two groups in turns at their exponentials, the overlapped loop)
  } else if (fa3_fp8_p_from_shared(f)) {
    fa3_fp8_takes_turns(f) ? launch_fp8_kernel<128, 128, true, 3>(l) : launch_fp8_kernel<128, 128, true, 3, false>(l);
  } else if (d == 256) {
    launch_fp8_kernel<256>(l);  // (two groups taking turns, P in registers: the only form that fits)
  } else if (d == 128 && f.block_k == 224) {
    launch_fp8_kernel<128, 224>(l);
  } else if (d == 128 && f.block_k == 256) {
    launch_fp8_kernel<128, 256>(l);  // (P in registers: the loop without overlap)
  } else if (d == 128) {
    launch_fp8_kernel<128>(l);
  } else {
    launch_fp8_kernel<64>(l);
  }
  check_launch("cuda.fa3.fp8 forward");
}

void quantize_e4m3_blocks(const Strided& x, WideType type, int batch, int heads, int rows, int dim, int block_rows, void* out, int* exponents,
                          unsigned* first_inexact, cudaStream_t stream) {
  require_grid(heads, batch, "cuda.fa3.fp8 quantize");
  if (block_rows < 1) throw std::runtime_error("cuda.fa3.fp8 quantize: " + std::to_string(block_rows) + " rows per block");
  const dim3 grid((rows + block_rows - 1) / block_rows, heads, batch);
  auto* dst = static_cast<std::uint8_t*>(out);
  switch (type) {
    case WideType::fp32: quantize_e4m3_blocks_kernel<float><<<grid, kPrepThreads, 0, stream>>>(x, heads, rows, dim, block_rows, dst, exponents, first_inexact); break;
    case WideType::bf16: quantize_e4m3_blocks_kernel<__nv_bfloat16><<<grid, kPrepThreads, 0, stream>>>(x, heads, rows, dim, block_rows, dst, exponents, first_inexact); break;
    case WideType::fp16: quantize_e4m3_blocks_kernel<__half><<<grid, kPrepThreads, 0, stream>>>(x, heads, rows, dim, block_rows, dst, exponents, first_inexact); break;
  }
  check_launch("cuda.fa3.fp8 quantize");
}

void transpose_v_e4m3(const Strided& v, int batch, int heads, int keys, int dim, void* vt, cudaStream_t stream) {
  require_grid(heads, batch, "cuda.fa3.fp8 V transpose");
  if (dim % 16 != 0 || dim > 256) throw std::runtime_error("cuda.fa3.fp8 V transpose: head dim " + std::to_string(dim) + " (a multiple of 16, at most 256)");
  const MapStrides m = strides_of(v, batch, heads, keys, dim);
  if (!m.valid(16) || reinterpret_cast<std::uintptr_t>(v.data) % 16 != 0) {
    throw std::runtime_error("cuda.fa3.fp8 V transpose: V needs a 16-byte aligned base and strides that are multiples of 16 bytes");
  }
  const Strided usable{v.data, m.batch, m.head, m.row};
  const int vt_keys = fp8_vt_keys(keys);
  transpose_v_e4m3_kernel<<<dim3(vt_keys / kBlockN, heads, batch), kPrepThreads, 0, stream>>>(usable, heads, keys, dim, vt_keys, static_cast<std::uint8_t*>(vt));
  check_launch("cuda.fa3.fp8 V transpose");
}

}  // namespace fc::kernels::cuda
