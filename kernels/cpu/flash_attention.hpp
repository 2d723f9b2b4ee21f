// FlashAttention-2, FA3 and FA4-style attention on the CPU: cpu.fa2, cpu.fa3, cpu.fa3.fp8, cpu.fa4,
// cpu.fa4.emulated.
//
// Algorithm (FA2): a task owns one query tile of one head; it walks the key tiles it can see (causal
// tiles beyond the diagonal are skipped) keeping a running max m, running sum l and an unnormalised
// accumulator; O = acc / l and L = m + log l once at the end. Backward: D = rowsum(dO o O) from the
// stored O; pass 1 (a task per key tile of a kv head) recomputes P = exp(s S - L) and dS = P o (dP - D)
// and sums dV, dK over the group's query rows; pass 2 (a task per query tile) recomputes them and sums
// dQ. No atomics, no [Nq, Nk] buffer: memory O(tile) per task plus O(N d) for K^T and V^T.
// FA4 (cpu.fa4): the running max is raised only when a tile's max exceeds it by >= tau (default 8,
// log2 units); otherwise the old max stays and the exponentials run up to 2^tau. Counters: rescales.
// cpu.fa4.emulated: half the exponentials by FA4's cubic (precision/exp2_emulated.hpp, the same source as the
// GPU's): exp2_fraction f emulates the columns j of a key tile with (j / 8) % 8 < round(8 f), the n8 blocks
// cuda.fa4 emulates.
// FA3 (cpu.fa3): FA2's math (EQUATIONS.md: FA3 changes the schedule, not the arithmetic) with FA3's
// Hopper forward tiles, 128 x 128. cpu.fa3.fp8: FA3's FP8 forward, the numerics cuda.fa3's QGMMA
// path must match: Q, K, V as e4m3 operands, S = Q K^T accumulated in fp32 (e4m3 products are exact in
// fp32), P rounded to e4m3 before P V, O in bf16 (or the policy's o). Its operands are either e4m3
// tensors (operands=e4m3, the policy "e4m3") or, with operands=scaled, wider tensors that hold e4m3
// values times a power-of-two scale per block (block_q rows of Q, block_k rows of K and V, per head):
// FA3's per-block descale factors folded into the operands, which gives the same bits as applying them
// to S and O for power-of-two scales. The subject checks that every block is such (precision/fp8.hpp's
// e4m3_block_exponent) and refuses other values.
//
// Rounding points, against the CUDA kernels (kernels/cuda, planned for sm_90a):
//   same   inputs in the storage format; products of two 16-bit values exact in fp32; logits scaled to
//          log2 units (S * scale log2 e) and exponentiated as exp2(fma(S, scale log2 e, -m)); row sums
//          of P accumulated in fp32 before P is rounded; P rounded to the storage format (RN) before
//          P V, dS rounded before dS K and dS^T Q; the softmax scale applied to dQ and dK at the end;
//          D from the stored (rounded) O; outputs rounded per policy with the shared Philox streams.
//   differ the order of the sums inside a tile product (tensor cores add partial products in a tree
//          within each k-chunk of 16; here in increasing order); exp2 (libm's correctly rounded
//          exp2 here, the GPU's ex2.approx, ~2 ulp); the order in which a group's heads and query
//          tiles add into dK, dV (fixed here; atomics or ordered passes on the GPU). These move results
//          by a few units in the last place of fp32, below any storage rounding of bf16 or fp16.
#pragma once

#include <memory>

#include "kernels/attention_call.hpp"

namespace fc::kernels::cpu {

struct FlashOptions {
  int block_q = 128;               // query rows per tile (FA2's CUDA forward: 128)
  int block_k = 64;                // keys per tile (FA2's CUDA forward at d <= 128: 64)
  int block_k_large_d = 0;         // keys per tile at d > 128 (0: block_k): cpu.fa4's 64, cuda.fa4's tile at d = 256
  double rescale_threshold = 0;    // tau in log2 units: 0 is FA2 (rescale whenever the max grows)
  double exp2_fraction = 0;        // share of exponentials by the cubic emulation (in eighths: columns (j / 8) % 8 < round(8 f))
  bool fp8 = false;                // FP8 forward: P in e4m3 before P V (cpu.fa3.fp8)
  bool fp8_scaled = false;         // with fp8: operands in a wider format, e4m3 times per-block scales
};

std::unique_ptr<Subject> make_cpu_fa2();
std::unique_ptr<Subject> make_cpu_fa3();
std::unique_ptr<Subject> make_cpu_fa3_fp8();
std::unique_ptr<Subject> make_cpu_fa4();
std::unique_ptr<Subject> make_cpu_fa4_emulated();

}  // namespace fc::kernels::cpu
