// softmax-probe: what one forward step's softmax costs a warp on its own, on a Hopper GPU (a tool, not a test; NOTES
// "What the softmax costs a warp: a microbenchmark").
//
// The forward kernels' step (fa3_forward.cuh) runs softmax_tile_as on a thread's 2 rows x 32 columns of S (a 128-key
// tile: 64 MUFU.EX2 a thread). Inside the kernel the timeline (fa3-timeline) sees the whole softmax take 1580-1900 SM
// clocks. This tool calls the same function in a loop, one CTA on one SM, with nothing else on the SM or with one
// neighbour at a time, and prints SM clocks (clock64) per call, so that the softmax's own cost can be told from what
// the kernel's other warps add:
//   1. the softmax at 1, 4, 8, 12 and 16 warps a SM (1 to 4 warps a sub-partition); the kernel's entry (softmax_tile),
//      once and copied 8 or 20 times into the loop's body (the instruction cache's share);
//   2. 64 independent FFMA + MUFU.EX2 a thread alone (the special-function unit's rate), and the exponentials and row
//      sums without the max;
//   3. FA4's cubic exp2 (exp2_emulated) on 1/8 .. 4/8 of the exponentials, at 4 and 12 warps;
//   4. the softmax beside a warpgroup that keeps issuing products (S = Q K^T at d = 128 from shared memory: QGMMA
//      m64n128k32 accumulating or not, with A from registers, HGMMA m64n128k16, or QGMMA with a spin after each pair) or
//      shared loads, with one and two softmax warpgroups; the exponentials and sums without the max, and the exponentials
//      alone, beside QGMMA and beside shared loads;
//   5. the softmax after the warpgroup's own 4 QGMMA, into registers of their own or as its S (fresh from the
//      accumulator);
//   6. the softmax beside a warpgroup of mbarrier try_wait loops, of shared stores with fence.proxy.async (a pack's), or
//      of shuffles;
//   7. (--exp-forms) the FP8 step's exponentials with P packed to e4m3, each pair of a row either by MUFU.EX2 or by a
//      packed-half polynomial (exp2_half2 below: fp16 arithmetic, two exponentials an instruction), on a share of the
//      pairs, alone and beside QGMMA; and that polynomial's error against exp2 over the arguments P can have.
// Each softmax call takes the previous call's P as its S (the chain a kernel step has from S to P); the values stay
// finite and bounded.
//
// Usage: softmax-probe [--all-sms | --exp-forms] (--all-sms: the "alone" rows on every SM at once, one CTA each;
// --exp-forms: only rows 7, with softmax_tile_as's as the reference).

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cuda/fa3_forward.cuh"
#include "kernels/cuda/fa3_fp8_ops.cuh"
#include "kernels/cuda/tools/hopper_device.hpp"

namespace {

using namespace fc::kernels::cuda;
using namespace fc::kernels::cuda::fa3;

constexpr int kNb = 16;  // n8 blocks of a 128-key tile
constexpr float kScale2 = 0.125f;

__device__ void fill_scores(float (&sc)[kNb][4]) {
#pragma unroll
  for (int nb = 0; nb < kNb; ++nb) {
#pragma unroll
    for (int i = 0; i < 4; ++i) sc[nb][i] = __sinf(threadIdx.x * 0.37f + nb * 1.3f + i * 0.7f) * 4.f;
  }
}

// A thread's inputs to softmax_tile_as: its S, its rows' running max and sum, its place in a group of 64 rows, and a
// shape with no mask and no key tail (every call takes the unmasked path).
struct StepState {
  float sc[kNb][4];
  RowStats st;
  GroupThread th;
  AttentionShapeParams s{};
  __device__ StepState() : th(0, static_cast<int>(threadIdx.x % 128)) {
    fill_scores(sc);
    s.seq_q = s.seq_k = 1 << 20;
  }
};

// 48 KB of bytes for the products' operands at the 1024-byte alignment the 128-byte swizzle wants (the dynamic
// allocation is 1 KB larger): e4m3's Q (8 KB) and K (16 KB) tiles, or bf16's (16 and 32 KB). As e4m3: 0x10 .. 0x4f,
// magnitudes 2^-5 .. 2^2, no NaN (as bf16 the same bytes are finite; the products' values are not read).
constexpr unsigned kQkBytes = 16384 + 32768;
__device__ unsigned char* fill_operands(unsigned char* raw) {
  unsigned char* smem = aligned_smem(raw);
  for (unsigned i = threadIdx.x; i < kQkBytes / 4; i += blockDim.x) reinterpret_cast<unsigned*>(smem)[i] = ((i * 2654435761u) & 0x3f3f3f3fu) + 0x10101010u;
  __syncthreads();
  return smem;
}

// The thread's values folded into one float, written out so that no call is dead code.
__device__ float fold(const float (&sc)[kNb][4], const RowStats& st) {
  float acc = st.l[0] + st.l[1] + st.m[0] + st.m[1];
#pragma unroll
  for (int nb = 0; nb < kNb; ++nb) acc += sc[nb][0] + sc[nb][1] + sc[nb][2] + sc[nb][3];
  return acc;
}

enum class Work { softmax, softmax_tile, mufu_only, exp_and_sums, exp_pack };

// 2^x0 and 2^x1 (x < 1/2: FA3's rule's P, never a stale max's) in fp16 arithmetic, two lanes an instruction: x
// rounded to fp16 and clamped at -15, n = round(x) by the 1551 trick (fp16 spacing 1 in [1024, 2048); 1551 = 1536 + 15
// leaves n + 15 in the low 4 bits), f = x - n in [-1/2, 1/2], 2^f by a degree-2 polynomial (relative error 2.2e-3 with
// fp16 coefficients, far under e4m3's spacing of 1/8), and 2^n formed from n + 15 as fp16's exponent field. At n = -15
// that field is 0 and so is the result: every x below -14.5 (-inf included) gives exactly 0, so nothing reaches the
// row's sum where P is 0 (a clamp at -14 would add 2^-14 a key there). A candidate for the FP8 step, where P keeps
// 3 bits: MUFU does one exponential a lane, this form two an instruction on the FMA pipe.
__device__ inline __half2 exp2_half2(float x0, float x1) {
  const __half2 h = __hmax2(__floats2half2_rn(x0, x1), __float2half2_rn(-15.f));
  const __half2 magic = __float2half2_rn(1551.f);
  const __half2 t = __hadd2(h, magic);
  const __half2 f = __hsub2(h, __hsub2(t, magic));
  const __half2 p = __hfma2(__hfma2(__float2half2_rn(0.2384f), f, __float2half2_rn(0.7031f)), f, __float2half2_rn(1.f));
  std::uint32_t bits;
  std::memcpy(&bits, &t, 4);
  bits = (bits << 10) & 0x3C003C00u;  // (each lane's n + 15 into its exponent field)
  __half2 scale;
  std::memcpy(&scale, &bits, 4);
  return __hmul2(p, scale);
}

// The share of a row's pairs that --exp-forms takes by exp2_half2: the pairs of n8 blocks nb with nb % 8 < Eighths.
// (It travels through step, timed_steps and beside_products in their softmax rule's place: Work::exp_pack has no rule.)
template <int Eighths>
struct HalfShare {
  static constexpr int kEighths = Eighths;
};

// One pair of a row's P (x = S scaled, less the max) rounded to e4m3 and packed (low = x0), summed into the row's sum:
// by MUFU.EX2 and an fp32 sum, or by exp2_half2 and a packed-half sum (converted once a call).
__device__ inline std::uint32_t e4m3_pair_by_mufu(float x0, float x1, float& sum) {
  const float p0 = fast_exp2(x0), p1 = fast_exp2(x1);
  sum += p0;
  sum += p1;
  return __nv_cvt_float2_to_fp8x2(make_float2(p0, p1), __NV_SATFINITE, __NV_E4M3);
}
__device__ inline std::uint32_t e4m3_pair_by_half2(float x0, float x1, __half2& sum) {
  const __half2 p = exp2_half2(x0, x1);
  sum = __hadd2(sum, p);
  return __nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(p), __NV_SATFINITE, __NV_E4M3);
}

template <Work W, class Rule>
__device__ void step(float (&sc)[kNb][4], RowStats& st, const GroupThread& th, const AttentionShapeParams& s) {
  if constexpr (W == Work::softmax) {
    float alpha[2];
    softmax_tile_as<false, Rule>(sc, st, alpha, 0, th, s, kScale2);
    sc[0][0] += alpha[0], sc[0][2] += alpha[1];
  } else if constexpr (W == Work::softmax_tile) {  // (the kernel's entry: the masked test, and both paths compiled)
    float alpha[2];
    softmax_tile<Rule>(sc, st, alpha, 0, th, s, kScale2);
    sc[0][0] += alpha[0], sc[0][2] += alpha[1];
  } else if constexpr (W == Work::mufu_only) {
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) {
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[nb][i] = fast_exp2(fmaf(sc[nb][i], kScale2, -1.f));
    }
  } else if constexpr (W == Work::exp_pack) {
    // (the max is the row's previous sum scaled to nothing: each call waits for the last, as a step's P waits for S)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m = 1.f + st.l[r] * 1e-30f;
      float sum = 0.f;
      __half2 half_sum = __float2half2_rn(0.f);
      std::uint32_t words = 0;
#pragma unroll
      for (int nb = 0; nb < kNb; nb += 2) {
        std::uint32_t half_words[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const float x0 = fmaf(sc[nb + k][2 * r], kScale2, -m), x1 = fmaf(sc[nb + k][2 * r + 1], kScale2, -m);
          half_words[k] = (nb + k) % 8 < Rule::kEighths ? e4m3_pair_by_half2(x0, x1, half_sum) : e4m3_pair_by_mufu(x0, x1, sum);
        }
        words ^= half_words[0] | (half_words[1] << 16);
      }
      // (every packed byte reaches the chain through the next call's max, so no conversion is dead code: the two
      // halves folded, then 23 bits as a tiny float)
      const float2 halves = __half22float2(half_sum);
      st.l[r] += sum + halves.x + halves.y + __uint_as_float((words ^ (words >> 16)) & 0x007fffffu);
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float row_sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < kNb; ++nb) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = sc[nb][2 * r + c];
          x = fast_exp2(fmaf(x, kScale2, -1.f));
          row_sum += x;
        }
      }
      st.l[r] += row_sum;
    }
  }
}

// Warps [0, working_warps) run `iters` steps and record their clocks; the rest of the CTA is the neighbour. Unroll > 1
// copies the step that many times into the loop's body (a body of kernel size: the instruction cache's share).
template <Work W, class Rule, int Unroll = 1>
__device__ void timed_steps(float* out, long long* cycles, int iters) {
  StepState x;
  const long long t0 = clock64();
#pragma unroll Unroll
  for (int it = 0; it < iters; ++it) step<W, Rule>(x.sc, x.st, x.th, x.s);
  const long long t1 = clock64();
  out[threadIdx.x] = fold(x.sc, x.st);
  if (threadIdx.x % 32 == 0) cycles[threadIdx.x / 32] = t1 - t0;
}

template <Work W, class Rule, int Unroll = 1>
__global__ void __launch_bounds__(512) alone(float* out, long long* cycles, int iters) {
  timed_steps<W, Rule, Unroll>(out, cycles, iters);
}

// What the last warpgroup of beside_products runs, a pair at a time (each pair waited for, its results read):
//   qgmma           S = Q K^T at d = 128 in e4m3: 2 chains of 4 QGMMA m64n128k32, each accumulating after its first
//                   instruction (a kernel's S);
//   qgmma_overwrite the same 8 QGMMA with accumulation off in every instruction (the tensor pipe does not read the
//                   accumulators). The flag is a kernel argument: with a constant 0, the first three of each chain are
//                   overwritten unread, and ptxas dropped them (SASS: 2 QGMMA a pair, serialised);
//   hgmma           S = Q K^T at d = 128 in bf16: 2 chains of 8 HGMMA m64n128k16 (the 16-bit kernels' S);
//   qgmma_half      qgmma's pairs, each followed by as long a spin on the clock (CS2R, compare, branch: issue slots
//                   on all four sub-partitions) before the next;
//   qgmma_rs        qgmma's 8 QGMMA with A from registers (fixed fragments): B alone from shared memory, 4 KB an
//                   instruction instead of 6;
//   shared_loads    no products: 16 LDS.128 a thread a "pair" over the 48 KB, summed into the two values read after
//                   each pair (shared memory's read path at its rate, the path the products' operands take).
// The two chains of a pair read different tiles, so that no compiler can merge them.
enum class Neighbour { qgmma, qgmma_overwrite, hgmma, qgmma_half, shared_loads, qgmma_rs };

template <Neighbour N>
__device__ void product_pair(float (&a)[kNb][4], float (&b)[kNb][4], const unsigned char* smem, int accumulate, int pair) {
  if constexpr (N == Neighbour::shared_loads) {
    // (volatile loads at addresses that move with the pair: neither hoisted out of the loop nor dropped)
    const unsigned t = threadIdx.x % 128;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const unsigned at = smem_address(smem) + 16u * ((t + 128u * i + 7u * static_cast<unsigned>(pair)) % (kQkBytes / 16));
      float x, y, z, w;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(x), "=f"(y), "=f"(z), "=f"(w) : "r"(at));
      a[3][1] += x + y, b[5][2] += z + w;
    }
  } else if constexpr (N == Neighbour::qgmma_rs) {
    const std::uint32_t fragment[4] = {0x38383838u + static_cast<unsigned>(accumulate), 0x30303030u, 0x28282828u, 0x34343434u};  // (e4m3 0.25 .. 1.125; a runtime term, so that no compiler folds them)
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      wgmma_m64n128k32_e4m3_rs(reinterpret_cast<float(&)[64]>(a), fragment, wgmma_descriptor_advance(wgmma_descriptor_sw128(smem + 8192), k), k > 0 ? accumulate : 0);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      wgmma_m64n128k32_e4m3_rs(reinterpret_cast<float(&)[64]>(b), fragment, wgmma_descriptor_advance(wgmma_descriptor_sw128(smem + 24576), k), k > 0 ? accumulate : 0);
    }
    wgmma_commit();
  } else if constexpr (N == Neighbour::hgmma) {
    using Ops = Wide16Ops<__nv_bfloat16, 128, 128, false>;  // (Q 16 KB, K 32 KB: b's Q is the second half of K's bytes)
    Ops::qk(a, smem, smem + 16384);
    Ops::qk(b, smem + 32768, smem + 16384);
  } else {
    // (Q at 0, a's K at 8 KB, b's K at 24 KB: 40 KB of fill_operands' 48)
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      wgmma_m64n128k32_e4m3_ss(reinterpret_cast<float(&)[64]>(a), wgmma_descriptor_advance(wgmma_descriptor_sw128(smem), k),
                               wgmma_descriptor_advance(wgmma_descriptor_sw128(smem + 8192), k), k > 0 ? accumulate : 0);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      wgmma_m64n128k32_e4m3_ss(reinterpret_cast<float(&)[64]>(b), wgmma_descriptor_advance(wgmma_descriptor_sw128(smem), k),
                               wgmma_descriptor_advance(wgmma_descriptor_sw128(smem + 24576), k), k > 0 ? accumulate : 0);
    }
    wgmma_commit();
  }
}
constexpr int kInstructionsAPair(Neighbour n) { return n == Neighbour::hgmma || n == Neighbour::shared_loads ? 16 : 8; }

// The last warpgroup issues `pairs` product pairs (Neighbour) on fill_operands' bytes; the others run the softmax.
// `accumulate` is 1, or 0 for qgmma_overwrite (a runtime value: see above).
template <Neighbour N, Work W = Work::softmax, class Rule = Fa3Rule>
__global__ void __launch_bounds__(384) beside_products(float* out, long long* cycles, int iters, int pairs, int accumulate) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = fill_operands(smem_raw);
  if (threadIdx.x / 128 == blockDim.x / 128 - 1) {
    float a[kNb][4] = {}, b[kNb][4] = {}, keep = 0.f;
    long long in_pairs = 0;
    const long long t0 = clock64();
    for (int i = 0; i < pairs; ++i) {
      const long long p0 = clock64();
      product_pair<N>(a, b, smem, accumulate, i);
      wgmma_wait<0>();
      // Every pair's results are read: a chain whose accumulators are overwritten unread is dead code to ptxas, which
      // put a placeholder (HGMMA.64x8x16 RZ) in place of three pairs of every four before this read (SASS, nvcc 13.0):
      // the "25-29 clocks a QGMMA" of session 34's runs were those placeholders.
      keep += a[3][1] + b[5][2];
      const long long p1 = clock64();
      in_pairs += p1 - p0;
      if constexpr (N == Neighbour::qgmma_half) {
        while (clock64() - p1 < p1 - p0) {
        }
      }
    }
    const long long t1 = clock64();
    if (threadIdx.x % 128 == 0) cycles[31] = t1 - t0, cycles[30] = in_pairs;
    out[threadIdx.x] = keep;
    return;
  }
  timed_steps<W, Rule>(out, cycles, iters);
}

// Each softmax warp first runs a product of its own (S = Q K^T at d = 128: 4 QGMMA), waited for before the call: into
// registers of its own (OwnProducts), or (Fresh) into S itself, so that the softmax reads registers the tensor pipe
// has just written, as a kernel step does. Without OwnProducts the same loop without the products.
template <bool OwnProducts, bool Fresh = false>
__global__ void __launch_bounds__(128) under_own_products(float* out, long long* cycles, int iters) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = fill_operands(smem_raw);
  using Ops = E4m3Ops<__nv_bfloat16, 128>;
  float acc[kNb][4] = {};
  StepState x;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    if constexpr (OwnProducts) {
      Ops::qk(Fresh ? x.sc : acc, smem, smem + 8192);
      wgmma_wait<0>();
    }
    step<Work::softmax, Fa3Rule>(x.sc, x.st, x.th, x.s);
    if constexpr (OwnProducts && !Fresh) x.sc[1][1] += acc[1][1];  // (the product's values reach the softmax's chain, as fresh S's do)
  }
  const long long t1 = clock64();
  out[threadIdx.x] = fold(x.sc, x.st) + acc[1][2];
  if (threadIdx.x % 32 == 0) cycles[threadIdx.x / 32] = t1 - t0;
}

enum class Noise { none, mbarrier_waits, shared_stores, shuffles };

// Warpgroup 0 runs the softmax; warpgroup 1 makes noise of one kind until warpgroup 0 is done.
template <Noise N>
__global__ void __launch_bounds__(256) beside_noise(float* out, long long* cycles, int iters) {
  __shared__ __align__(16) float tile[128 * 64];
  __shared__ std::uint64_t done_bar;
  __shared__ volatile int done_flag;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(&done_bar)) : "memory");
    done_flag = 0;
  }
  __syncthreads();
  if (threadIdx.x >= 128) {
    float v = static_cast<float>(threadIdx.x);
    if constexpr (N == Noise::mbarrier_waits) {
      mbarrier_wait(&done_bar, 0);
    } else if constexpr (N == Noise::shared_stores) {
      const int t = static_cast<int>(threadIdx.x) - 128;
      while (!done_flag) {
#pragma unroll
        for (int i = 0; i < 16; ++i) reinterpret_cast<float4*>(tile)[(t * 16 + i) % 2048] = make_float4(v, v + 1, v + 2, v + i);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        v += 1.f;
      }
    } else if constexpr (N == Noise::shuffles) {
      while (!done_flag) {
#pragma unroll
        for (int i = 0; i < 16; ++i) v += __shfl_xor_sync(0xffffffffu, v, 1 + i % 4);
      }
    }
    out[threadIdx.x] = v;
    return;
  }
  timed_steps<Work::softmax, Fa3Rule>(out, cycles, iters);
  named_barrier_sync(1, 128);
  if (threadIdx.x == 0) {
    done_flag = 1;
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(&done_bar)) : "memory");
  }
}

// exp2_half2 against exp2 (in double) at `count` pairs of arguments over [lo, 0]: x evenly spaced in the low lane, lo - x
// in the high lane (both lanes checked, with different arguments). Counters: [0] the largest relative error of the fp16
// result where 2^x is an fp16 normal (x >= -14), as float bits; [1] how many e4m3 roundings of it differ from exp2's
// (the exact value rounded to fp32, then by the same conversion); [2] how many arguments have a nonzero e4m3 P by
// exp2's rounding (x >= -10: e4m3's least subnormal is 2^-9), the share where the difference can show.
__global__ void exp2_half2_error(float lo, int count, unsigned* counters) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= count) return;
  const float x = lo - lo * static_cast<float>(i) / static_cast<float>(count - 1);
  const float args[2] = {x, lo - x};
  const __half2 y = exp2_half2(args[0], args[1]);
  const float by_half[2] = {__low2float(y), __high2float(y)};
#pragma unroll
  for (int lane = 0; lane < 2; ++lane) {
    const double exact = exp2(static_cast<double>(args[lane]));
    if (args[lane] >= -14.f) {
      const float relative = static_cast<float>(fabs(static_cast<double>(by_half[lane]) - exact) / exact);
      atomicMax(&counters[0], __float_as_uint(relative));  // (non-negative floats order as their bits)
    }
    const std::uint32_t half_p = __nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(__float2half2_rn(by_half[lane])), __NV_SATFINITE, __NV_E4M3) & 0xffu;
    const std::uint32_t exp2_p = __nv_cvt_float2_to_fp8x2(make_float2(static_cast<float>(exact), 0.f), __NV_SATFINITE, __NV_E4M3) & 0xffu;
    if (half_p != exp2_p) atomicAdd(&counters[1], 1u);
    if (exp2_p != 0) atomicAdd(&counters[2], 1u);
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "softmax-probe: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Runs `launch(out, cycles, iters, timed)` once untimed with 10 calls a warp (a warm-up), then timed with kIters, and
// returns the timed run's mean over the first `warps` warps of clocks a call; `products` gets slots 31 and 30
// (beside_products' clocks in all and in its pairs).
constexpr int kIters = 1000;
template <class Launch>
double clocks_a_call(int warps, const Launch& launch, long long (*products)[2] = nullptr) {
  float* out = nullptr;
  long long* cycles = nullptr;
  check(cudaMalloc(&out, 1024 * 1024 * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&cycles, 32 * sizeof(long long)), "cudaMalloc");
  launch(out, cycles, 10, false);
  launch(out, cycles, kIters, true);
  check(cudaGetLastError(), "launch");
  check(cudaDeviceSynchronize(), "the probe");
  long long h[32] = {};
  check(cudaMemcpy(h, cycles, sizeof(h), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(out), cudaFree(cycles);
  double sum = 0;
  for (int w = 0; w < warps; ++w) sum += static_cast<double>(h[w]);
  if (products != nullptr) (*products)[0] = h[31], (*products)[1] = h[30];
  return sum / warps / kIters;
}

int g_ctas = 1;  // (--all-sms: one CTA on every SM, the clock where the GPU is loaded as a kernel loads it)

template <Work W, class Rule = Fa3Rule, int Unroll = 1>
void run_alone(const char* what, int threads) {
  const double per_call = clocks_a_call(threads / 32, [&](float* out, long long* cycles, int iters, bool) {
    alone<W, Rule, Unroll><<<g_ctas, threads>>>(out, cycles, iters);
  });
  std::printf("%-44s %2d warps a SM: %7.1f clocks a call\n", what, threads / 32, per_call);
}

template <Work W, class Rule = Fa3Rule>
std::string work_name() {
  if constexpr (W == Work::exp_pack) return "e4m3 P, " + std::to_string(Rule::kEighths) + "/8 by half2";
  return W == Work::softmax ? "softmax" : W == Work::exp_and_sums ? "exp + sums" : "64 FFMA + MUFU";
}

template <Neighbour N, Work W = Work::softmax, class Rule = Fa3Rule>
void run_beside_products(const char* what, int softmax_groups, int pairs) {
  const int threads = 128 * (softmax_groups + 1);
  check(cudaFuncSetAttribute(beside_products<N, W, Rule>, cudaFuncAttributeMaxDynamicSharedMemorySize, kQkBytes + 1024), "cudaFuncSetAttribute");
  long long products[2] = {};
  const double per_call = clocks_a_call(4 * softmax_groups, [&](float* out, long long* cycles, int iters, bool timed) {
    beside_products<N, W, Rule><<<1, threads, kQkBytes + 1024>>>(out, cycles, iters, timed ? pairs : 1, N == Neighbour::qgmma_overwrite ? 0 : 1);
  }, &products);
  if (pairs > 0) {
    // (the row holds only if the products outlast the softmax's calls; it says so where they do not)
    const double per_instruction = static_cast<double>(products[1]) / (kInstructionsAPair(N) * pairs);
    const bool outlasted = static_cast<double>(products[0]) >= per_call * kIters;
    // ("in pairs": the neighbour's share of its time from a pair's issue to its results read, not the tensor pipe's)
    std::printf("%s, %d warpgroup(s), beside %-15s %5d pairs (%5.1f clocks an instruction, in pairs %3.0f %%): %7.1f clocks a call%s\n",
                work_name<W, Rule>().c_str(), softmax_groups, what, pairs, per_instruction, 100.0 * products[1] / products[0], per_call,
                outlasted ? "" : " (the products ended first: too few pairs)");
  } else {
    std::printf("%s, %d warpgroup(s), no products beside it: %51s %7.1f clocks a call\n", work_name<W, Rule>().c_str(), softmax_groups, "", per_call);
  }
}

template <bool OwnProducts, bool Fresh = false>
void run_under_own_products(const char* what) {
  check(cudaFuncSetAttribute(under_own_products<OwnProducts, Fresh>, cudaFuncAttributeMaxDynamicSharedMemorySize, kQkBytes + 1024), "cudaFuncSetAttribute");
  const double per_call = clocks_a_call(4, [](float* out, long long* cycles, int iters, bool) {
    under_own_products<OwnProducts, Fresh><<<1, 128, kQkBytes + 1024>>>(out, cycles, iters);
  });
  std::printf("softmax (4 warps) %-52s %7.1f clocks a call\n", what, per_call);
}

template <Noise N>
void run_beside_noise(const char* what) {
  const double per_call = clocks_a_call(4, [](float* out, long long* cycles, int iters, bool) { beside_noise<N><<<1, 256>>>(out, cycles, iters); });
  std::printf("softmax (4 warps) beside a warpgroup of %-26s %7.1f clocks a call\n", what, per_call);
}

}  // namespace

template <int... Eighths>
void run_exp_forms_alone(int threads) {
  (run_alone<Work::exp_pack, HalfShare<Eighths>>(work_name<Work::exp_pack, HalfShare<Eighths>>().c_str(), threads), ...);
}
template <int... Eighths>
void run_exp_forms_beside_qgmma(int softmax_groups) {
  (run_beside_products<Neighbour::qgmma, Work::exp_pack, HalfShare<Eighths>>("", softmax_groups, 0), ...);
  (run_beside_products<Neighbour::qgmma, Work::exp_pack, HalfShare<Eighths>>("QGMMA", softmax_groups, 4000), ...);
}

// Rows 7: exp2_half2's error, then the FP8 exponentials by share, with the 16-bit softmax as the reference.
void run_exp_forms() {
  unsigned* counters = nullptr;
  check(cudaMalloc(&counters, 3 * sizeof(unsigned)), "cudaMalloc");
  for (const float lo : {-14.f, -20.f}) {
    constexpr int kCount = 1 << 20;
    check(cudaMemset(counters, 0, 3 * sizeof(unsigned)), "cudaMemset");
    exp2_half2_error<<<kCount / 256, 256>>>(lo, kCount, counters);
    check(cudaDeviceSynchronize(), "exp2_half2_error");
    unsigned host_counters[3] = {};
    check(cudaMemcpy(host_counters, counters, sizeof(host_counters), cudaMemcpyDeviceToHost), "cudaMemcpy");
    float relative = 0.f;
    std::memcpy(&relative, &host_counters[0], 4);
    std::printf("exp2_half2 over [%g, 0], %d arguments (both lanes): largest relative error %.3g (x >= -14); e4m3 P differing "
                "from exp2's rounding: %u (%.3f %% of all, %.3f %% of those with a nonzero P)\n",
                lo, 2 * kCount, relative, host_counters[1], 100.0 * host_counters[1] / (2.0 * kCount), 100.0 * host_counters[1] / host_counters[2]);
  }
  cudaFree(counters);
  for (int threads : {128, 384}) {
    run_alone<Work::softmax>("softmax_tile_as (unmasked, FA3's rule)", threads);
    run_exp_forms_alone<0, 2, 4, 6, 8>(threads);
  }
  for (int groups : {1, 2}) {
    run_beside_products<Neighbour::qgmma>("", groups, 0);
    run_beside_products<Neighbour::qgmma>("QGMMA", groups, 4000);
    run_exp_forms_beside_qgmma<0, 2, 4, 8>(groups);
  }
}

int main(int argc, char** argv) {
  const std::string flag = argc == 2 ? argv[1] : "";
  if (argc > 2 || (argc == 2 && flag != "--all-sms" && flag != "--exp-forms")) {  // (before the device: a usage error is one on any machine)
    std::fprintf(stderr, "softmax-probe: unknown argument '%s'\nusage: softmax-probe [--all-sms | --exp-forms]\n", argv[argc - 1]);
    return 2;
  }
  const cudaDeviceProp prop = fc::kernels::cuda::tools::hopper_device_or_exit("softmax-probe");
  if (flag == "--all-sms") g_ctas = prop.multiProcessorCount;
  std::printf("%s; %d CTA(s), one a SM (the clocks of one CTA's warps); SM clocks (clock64) per call, the mean over the working warps of %d calls\n", prop.name, g_ctas, kIters);
  if (flag == "--exp-forms") {
    run_exp_forms();
    return 0;
  }
  for (int threads : {32, 128, 256, 384, 512}) run_alone<Work::softmax>("softmax_tile_as (unmasked, FA3's rule)", threads);
  for (int threads : {128, 384}) run_alone<Work::softmax_tile>("softmax_tile (the kernel's entry, unmasked)", threads);
  for (int threads : {128, 384}) run_alone<Work::softmax_tile, Fa3Rule, 8>("softmax_tile, 8 copies in the loop", threads);
  for (int threads : {128, 384}) run_alone<Work::softmax_tile, Fa3Rule, 20>("softmax_tile, 20 copies in the loop", threads);
  for (int threads : {32, 128, 384}) run_alone<Work::mufu_only>("64 independent FFMA + MUFU.EX2", threads);
  for (int threads : {128, 384}) run_alone<Work::exp_and_sums>("FFMA + MUFU.EX2 + row sums (no max)", threads);
  for (int threads : {128, 384}) {
    run_alone<Work::softmax, SoftmaxRule<false, 1>>("softmax, 1/8 of exp2 emulated", threads);
    run_alone<Work::softmax, SoftmaxRule<false, 2>>("softmax, 2/8 of exp2 emulated", threads);
    run_alone<Work::softmax, SoftmaxRule<false, 4>>("softmax, 4/8 of exp2 emulated", threads);
  }
  for (int groups : {1, 2}) {
    run_beside_products<Neighbour::qgmma>("", groups, 0);
    run_beside_products<Neighbour::qgmma>("QGMMA", groups, 4000);
    run_beside_products<Neighbour::qgmma_overwrite>("QGMMA (no acc.)", groups, 8000);
    run_beside_products<Neighbour::hgmma>("HGMMA", groups, 2000);
    run_beside_products<Neighbour::qgmma_half>("QGMMA + spins", groups, 4000);
    run_beside_products<Neighbour::shared_loads>("LDS.128", groups, 20000);
  }
  for (int groups : {1, 2}) run_beside_products<Neighbour::qgmma_rs>("QGMMA, A in regs", groups, 4000);
  // (the exponentials and row sums without the max: no shuffles, no max chain; and the exponentials alone)
  run_beside_products<Neighbour::qgmma, Work::exp_and_sums>("", 1, 0);
  run_beside_products<Neighbour::qgmma, Work::exp_and_sums>("QGMMA", 1, 4000);
  run_beside_products<Neighbour::shared_loads, Work::exp_and_sums>("LDS.128", 1, 20000);
  run_beside_products<Neighbour::qgmma, Work::mufu_only>("", 1, 0);
  run_beside_products<Neighbour::qgmma, Work::mufu_only>("QGMMA", 1, 4000);
  run_beside_products<Neighbour::shared_loads, Work::mufu_only>("LDS.128", 1, 20000);
  run_under_own_products<false>("alone, in this loop:");
  run_under_own_products<true>("after its own 4 QGMMA into other registers:");
  run_under_own_products<true, true>("on S fresh from its own 4 QGMMA:");
  run_beside_noise<Noise::none>("nothing");
  run_beside_noise<Noise::mbarrier_waits>("mbarrier try_wait loops");
  run_beside_noise<Noise::shared_stores>("shared stores + fence");
  run_beside_noise<Noise::shuffles>("shuffles");
  return 0;
}
