// cuda.fa3.fp8's kernels (fa3_fp8_kernels.cu): FlashAttention-3's FP8 forward on Hopper (QGMMA), the
// numerics of cpu.fa3.fp8 (kernels/cpu/flash_attention.hpp): e4m3 Q, K, V, each with a power-of-two scale per
// block of rows (128 of Q, a key tile of K and V); S = Q K^T in fp32; P rounded to e4m3 before O += P V; O stored in bf16 or fp16 (p.type),
// L in fp32. The preparation is separate kernels: quantize_e4m3_blocks (wider tensors to e4m3 and their block
// exponents) and transpose_v_e4m3 (V^T, which QGMMA needs K-major). Each entry point throws
// std::runtime_error naming the kernel and the CUDA error.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/fa3_kernels.hpp"

namespace fc::kernels::cuda {

constexpr int kFp8BlockRows = 128;  // rows of Q per block exponent (cpu.fa3.fp8's block_q), and of K and V by default (block_k)

// The key tiles cuda.fa3.fp8 is compiled for (Fp8ForwardParams::block_k): 128 at every head dim (64, 128, 256), and at
// d = 128 FA3's FP8 tile, 224, and cuDNN's, 256 (a step's FP8 products are short, so a longer tile spreads its fixed
// costs; 256 runs two groups in turns at their exponentials: with P in shared memory, auto's, the overlapped loop, with P
// in registers the loop without overlap). FA3's d = 64 tile, 160 keys with three consumer
// groups, spills in the step at 160 registers and measured 4-8 % slower (NOTES): not compiled.
inline bool fp8_key_tile_supported(int block_k, int head_dim) {
  return (block_k == 128 && (head_dim == 64 || head_dim == 128 || head_dim == 256)) || ((block_k == 224 || block_k == 256) && head_dim == 128);
}

// Keys of V^T per row: Nk rounded up to the 128-key tile (the padding holds zeros).
inline int fp8_vt_keys(int seq_k) { return (seq_k + 127) / 128 * 128; }

// Where P V reads P (the A operand) from: registers (two consumer warpgroups at d = 128 and 256, three at d = 64) or a
// tile in shared memory (key tiles of 128: three consumer warpgroups at d = 128: without P's 16 registers ptxas no
// longer serialises the wgmma of three groups of 160 registers, though the step still spills: kernels/cuda/NOTES.md, "P
// from shared memory"; two at d = 256; key tiles of 256 at d = 128: two groups whose next S overlaps the softmax, S's
// 128 registers and O's 64 beside no P: NOTES "256-key tiles with P in shared memory and overlap"). automatic is shared
// where fp8_p_shared_by_default says (d = 128), registers elsewhere.
enum class Fp8POperand : std::uint8_t { automatic, registers, shared };
// The option value that names each (cuda.fa3.fp8's p_operand, and the launcher's messages).
inline const char* fp8_p_operand_name(Fp8POperand p) { return p == Fp8POperand::registers ? "registers" : p == Fp8POperand::shared ? "shared" : "auto"; }
inline bool fp8_p_shared_supported(int block_k, int head_dim) { return (block_k == 128 && (head_dim == 128 || head_dim == 256)) || (block_k == 256 && head_dim == 128); }
// Where automatic takes shared memory: d = 128, where it lets three groups run (128-key tiles) or two overlap (256). At
// d = 256 both forms have two groups, and P from shared memory measured level to 2 % slower than from registers (H200,
// kernels/cuda/NOTES.md "Head dim 256").
inline bool fp8_p_shared_by_default(int block_k, int head_dim) { return (block_k == 128 || block_k == 256) && head_dim == 128; }
// Whether the consumer groups take turns to issue their products (ring: FA3's ping-pong, in a ring of three where P is
// in shared memory) or each issues them as soon as its own P is ready (none: with P in shared memory and block_k 128
// only, where the group's own barrier hands P to P V; the tensor pipe takes the three groups' products in the order they
// come). automatic: none where P is in shared memory with 128-key tiles (kernels/cuda/NOTES.md, "Three groups without
// turns"), ring elsewhere. 256-key tiles take turns at their exponentials rather than at the issue.
// The same bits either way: each group's products and their order do not change.
enum class Fp8Turns : std::uint8_t { automatic, ring, none };
// Where V^T comes from (8-bit wgmma reads its B operand K-major only, so P V needs V transposed): pass, the
// transpose_v_e4m3 pass the caller runs before the forward into Fp8ForwardParams::vt; kernel, V's tiles as stored
// (Fp8ForwardParams::v), rewritten by the forward's producer warpgroup in shared memory (FA3's in-kernel transpose), with
// key tiles of 128 at d = 64 and 128 only: no V^T buffer, but the kernel measured 2-7 % slower than the pass and the kernel together
// (kernels/cuda/NOTES.md, "FA3's V transpose in the kernel"), so automatic is the pass. The same bits either way.
enum class Fp8VTranspose : std::uint8_t { automatic, pass, kernel };
constexpr bool fp8_v_in_kernel_supported(int block_k, int head_dim) { return block_k == 128 && head_dim <= 128; }
// Which CTA computes a query tile: grid (one CTA per tile) or persistent (one CTA per SM walking the tiles longest
// first, cuda.fa3's and cuda.fa4's scheduler: fa3_forward.cuh's WorkTiles), the latter for the kernel with P in shared
// memory and V^T from the pass only at d = 128: block_k 128 without turns (auto's kernel), or block_k 256. automatic:
// persistent under causal masks where the 128-key kernel runs (persistent_scheduler_by_default; kernels/cuda/NOTES.md
// "The FP8 forward's persistent scheduler") and under every mask for the 256-key one (NOTES "256-key tiles with P in
// shared memory and overlap"), grid elsewhere. The persistent one takes its tiles from *p.work_counter, which must be 0 at
// the launch. The same bits either way.
enum class Fp8Scheduler : std::uint8_t { automatic, grid, persistent };
// The element size persistent_work_tiles sizes the persistent scheduler's L2 sections by (under a causal mask, as many
// (batch, head) pairs as have K and V in half the L2): 2 bytes, as for cuda.fa3's 16-bit K and V, though e4m3's are one.
// The FP8 scheduler was measured with these sections (fa3-timeline, NOTES "The FP8 forward's persistent scheduler");
// one byte would put twice the heads in a section, which is not measured.
constexpr std::size_t kFp8SectionElementBytes = 2;

struct Fp8ForwardParams {
  ForwardParams p;  // shape, O (p.type: bf16 or fp16), L, rounding; p.q and p.k: e4m3 (element strides = bytes)
  const void* vt = nullptr;  // V^T: e4m3 [B, Hkv, d, fp8_vt_keys(Nk)], contiguous, keys permuted (fa3_fp8_kernels.cu)
  Strided v;                 // V: e4m3 [B, Hkv, Nk, d] as stored, element strides = bytes (read where V is transposed in the kernel)
  Fp8VTranspose v_transpose = Fp8VTranspose::automatic;
  // Key tiles of block_k keys, one of fp8_key_tile_supported's (cuda.fa3.fp8's block_k option).
  int block_k = kFp8BlockRows;
  Fp8POperand p_operand = Fp8POperand::automatic;
  // automatic: O by TMA (through the group's Q and P tiles) where P is in shared memory (fa3_fp8_p_from_shared), O is
  // rounded to nearest and TMA can write it (fa3_fp8_o_by_tma); store_rows' 4-byte stores otherwise. The same bits.
  Fa3Epilogue epilogue = Fa3Epilogue::automatic;
  Fp8Turns turns = Fp8Turns::automatic;
  Fp8Scheduler scheduler = Fp8Scheduler::automatic;
  // Block exponents (values = e4m3 x 2^e): Q [B, Hq, ceil(Nq / 128)], K and V [B, Hkv, ceil(Nk / block_k)]. The caller
  // keeps each head's V exponents within 64 of each other (O is carried in the current V block's scale) and Q's plus
  // K's below fp32's exponent range (they scale the softmax's scale); the subject checks both.
  const int* q_exponents = nullptr;
  const int* k_exponents = nullptr;
  const int* v_exponents = nullptr;
};

// Head dims 64, 128 and 256; strides TMA can describe (multiples of 16 bytes, a 16-byte aligned base).
bool fa3_fp8_supports(const ForwardParams& p);
// Whether fa3_fp8_forward runs f with P in shared memory (three consumer groups at d = 128, two at 256): the launcher's own rule.
bool fa3_fp8_p_from_shared(const Fp8ForwardParams& f);
// Whether fa3_fp8_forward stores O through shared memory and TMA: the launcher's own rule.
bool fa3_fp8_o_by_tma(const Fp8ForwardParams& f);
// Whether fa3_fp8_forward runs f's consumer groups in turns (Fp8Turns): the launcher's own rule. It refuses
// turns=none where P is in registers.
bool fa3_fp8_takes_turns(const Fp8ForwardParams& f);
// Whether the persistent scheduler can run f (Fp8Scheduler), and whether fa3_fp8_forward runs it: the launcher's own
// rules. fa3_fp8_forward refuses scheduler=persistent where it cannot, and a persistent launch without p.work_counter.
bool fa3_fp8_persistent_supported(const Fp8ForwardParams& f);
bool fa3_fp8_persistent(const Fp8ForwardParams& f);
// tau's largest value for the FP8 forward (f.p.rescale_threshold, log2 units): under the selective rule P runs up to 2^tau
// against a stale max and is rounded to e4m3, whose largest finite value is 448 (2^8.8); fa3_fp8_forward refuses more.
constexpr float kFp8MaxTau = 8.f;
// Whether fa3_fp8_forward can run FA4's selective rule (f.p.rescale_threshold = tau > 0; 0 is FA3's rule, every tile's
// max taken): the 256-key kernel with P in shared memory (block_k 256, p_operand auto or shared, head dim 128), where
// unmasked tiles after the first take their exponentials against the running maxima before any row max (fa3_forward.cuh,
// softmax_tile_stale_first; kernels/cuda/NOTES.md "The selective rule without the row max in the 256-key FP8 kernel").
// fa3_fp8_forward refuses tau > 0 elsewhere. Rescales (per row and key tile after the first) are added to
// *f.p.rescale_count where it is set.
bool fa3_fp8_selective_supported(const Fp8ForwardParams& f);
// Whether fa3_fp8_forward transposes V in the kernel (reading f.v) rather than reading f.vt (Fp8VTranspose): the
// launcher's own rule, by which a caller knows whether to run transpose_v_e4m3 first. (fa3_fp8_forward then refuses
// v_transpose=kernel with key tiles of 224 or 256.)
bool fa3_fp8_transposes_v_in_kernel(const Fp8ForwardParams& f);
// The tensor maps fa3_fp8_forward builds for f: Q and K (e4m3, boxes of 64 rows and of block_k keys), V^T (boxes of 128
// keys; where fa3_fp8_transposes_v_in_kernel(f), V's, as K's) and, where fa3_fp8_o_by_tma(f), O's (16-bit, the 128-byte
// swizzle). For tools that launch the forward's kernels themselves (fa3-timeline), so that they time what the launcher
// builds. f must pass fa3_fp8_supports.
struct Fp8TensorMaps {
  CUtensorMap q{}, k{}, vt{}, o{};
};
Fp8TensorMaps fa3_fp8_tensor_maps(const Fp8ForwardParams& f);
void fa3_fp8_forward(const Fp8ForwardParams& f, cudaStream_t stream);

// The formats quantize_e4m3_blocks reads.
enum class WideType : std::uint8_t { fp32, bf16, fp16 };

// x ([B, H, N, d], strided) as e4m3 values times a power of two per block of block_rows rows of a head: exponents[(b H
// + h) blocks + i] = e4m3_block_exponent_of_float(the block's largest magnitude) and out (contiguous e4m3
// [B, H, N, d]) = x 2^-e rounded to nearest. Where that rounding is not exact (x is not e4m3 times its block's
// scale), *first_inexact is lowered to the block's index (b H + h) blocks + i; the caller sets it to UINT_MAX first
// (all bytes 0xff: a cudaMemsetAsync, which needs no host buffer that the copy engine would read after the call).
void quantize_e4m3_blocks(const Strided& x, WideType type, int batch, int heads, int rows, int dim, int block_rows, void* out, int* exponents,
                          unsigned* first_inexact, cudaStream_t stream);

// V^T of an e4m3 V ([B, H, Nk, d], strided): vt [B, H, d, fp8_vt_keys(Nk)] with the keys of every 32 in the
// order cuda.fa3.fp8's P fragments hold them (fa3_fp8_kernels.cu, fp8_key_of_slot), zeros past Nk.
void transpose_v_e4m3(const Strided& v, int batch, int heads, int keys, int dim, void* vt, cudaStream_t stream);

}  // namespace fc::kernels::cuda
