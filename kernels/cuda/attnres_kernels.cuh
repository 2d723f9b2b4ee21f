// Attention Residuals on CUDA cores (EQUATIONS.md section 4), with cpu.attnres's algorithm and rounding
// points (kernels/cpu/attnres.hpp says which differ): the block kernels, four and a final sum. They
// take the shapes the lane-layout kernels (attnres_lane_kernels.cuh, the fast path) do not: D not a
// multiple of 8, rows not 16-byte aligned, N x ceil(D / 2048) > 8 or S > 16.
//   phase1_forward   a block per token: r_i, the S x N logits (block sums over D), then per layer the
//                    softmax statistics and o = sum_i p_i v_i / l (sources in order), lse = m + log l
//   phase2_forward   a block per (layer, token): s_u, beta from the stored o and lse (o_in, lse_in), h = o + beta (u - o)
//   phase2_backward  a block per (layer, chunk of 64 tokens), tokens in order: do (stored in the gradient
//                    format), dlse (fp32), du, and the chunk's partial of dw
//   phase1_backward  a block per chunk of 64 tokens, tokens in order: dv (every layer's part in layer
//                    order), the chunk's partial of dw
//   dw_sum           dw = sum of phase 2's chunk partials in chunk order + phase 1's (as cpu.attnres)
// A thread owns the D entries c = threadIdx.x + k blockDim.x; a dot product over D is each thread's sum
// of its entries, then a fixed tree (warp shuffles, then the warps' sums in order): deterministic, no
// atomics. fp16 rows of role o carry a per-row power-of-two scale chosen from the fp32 row's largest
// magnitude (precision/row_scale.hpp); stored values round to nearest or stochastically with the Philox
// word of the element's logical index, so cuda.attnres and cpu.attnres round identically.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attnres_params.hpp"
#include "kernels/cuda/tile_primitives.cuh"
#include "precision/half.hpp"
#include "precision/philox.hpp"
#include "precision/rounding.hpp"

namespace fc::kernels::cuda {

constexpr int kAttnResThreads = 128;
constexpr int kAttnResWarps = kAttnResThreads / 32;
constexpr int kAttnResChunk = 64;  // tokens per dw partial: cpu.attnres's task size, which fixes dw's summation order
__host__ __device__ constexpr int attnres_chunk_count(int tokens) { return (tokens + kAttnResChunk - 1) / kAttnResChunk; }

__device__ inline std::int64_t row_of(const AttnResIn& x, int i, int b, int t) { return i * x.outer + b * x.batch + t * x.token; }

__device__ inline float load_elem(const void* p, Elem type, std::int64_t at) {
  switch (type) {
    case Elem::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[at]);
    case Elem::f16: return __half2float(static_cast<const __half*>(p)[at]);
    default: return static_cast<const float*>(p)[at];
  }
}

// A row's decoded values: stored x its scale (exact: a power of two), as the host's read_rows does.
struct RowIn {
  const void* data;
  Elem type;
  float scale;
  __device__ float operator[](int c) const { return load_elem(data, type, c) * scale; }
};
__device__ inline RowIn row_in(const AttnResIn& x, int i, int b, int t) {
  const float s = x.scale ? x.scale[i * x.scale_outer + b * x.scale_batch + t * x.scale_token] : 1.f;
  const std::size_t bytes = x.type == Elem::f32 ? 4 : 2;
  return {static_cast<const unsigned char*>(x.data) + row_of(x, i, b, t) * static_cast<std::int64_t>(bytes), x.type, s};
}

// Element `index` of a logical tensor, rounded to its storage per the policy (the host's round_to and
// Philox word: bit-identical to cpu.attnres for the same value).
__device__ inline void store_elem(void* base, Elem type, std::int64_t at, float x, const OutputRounding& r, std::uint32_t stream,
                                  std::uint64_t index) {
  const Rounding mode = r.stochastic ? Rounding::stochastic : Rounding::nearest_even;
  const std::uint32_t word = r.stochastic ? RandomStream{r.seed, stream}.word(index) : 0u;
  switch (type) {
    case Elem::bf16: static_cast<fc::bf16*>(base)[at] = round_to<fc::bf16>(x, mode, word); return;
    case Elem::f16: static_cast<fc::fp16*>(base)[at] = round_to<fc::fp16>(x, mode, word); return;
    default: static_cast<float*>(base)[at] = x; return;
  }
}

// precision/row_scale.hpp's fp16_row_scale on the device (the same frexp exponent and clamps).
__device__ inline float fp16_row_scale_device(float row_max_abs) {
  if (!(row_max_abs > 0.f) || isinf(row_max_abs)) return 1.f;
  int e = 0;
  frexp(static_cast<double>(row_max_abs), &e);
  const int k = min(max(e - 15, -126), 127);
  return ldexpf(1.f, k);
}

// The block's sum of v (every thread gets it): warp shuffles, then the warps' sums in order. `red`:
// kAttnResWarps floats of shared memory.
__device__ inline float block_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kAttnResWarps; ++w) total += red[w];
  __syncthreads();  // red is free again
  return total;
}
__device__ inline float block_max(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float m = red[0];
#pragma unroll
  for (int w = 1; w < kAttnResWarps; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  return m;
}

__device__ inline float rms_inverse(float sum_sq, int D, float eps) { return 1.f / sqrtf(sum_sq / static_cast<float>(D) + eps); }
__device__ inline float sigmoid_of_difference(float s, float lse) { return 1.f / (1.f + expf(lse - s)); }

// Stores one row of `value(c)` (a [outer, B T, D] row `row`), with its per-row scale when `out` has
// scales: the scale from the row's largest finite magnitude, then value / scale (exact) rounded.
template <class F>
__device__ inline void store_row(const AttnResOut& out, std::int64_t row, int D, F value, const OutputRounding& r, std::uint32_t stream,
                                 float* red) {
  float scale = 1.f;
  if (out.scale) {
    float m = 0.f;
    for (int c = threadIdx.x; c < D; c += kAttnResThreads) {
      const float a = fabsf(value(c));
      if (!isinf(a) && a > m) m = a;  // (NaN fails a > m)
    }
    scale = fp16_row_scale_device(block_max(m, red));
    if (threadIdx.x == 0) out.scale[row] = scale;
  }
  for (int c = threadIdx.x; c < D; c += kAttnResThreads) {
    const std::int64_t at = row * D + c;
    store_elem(out.data, out.type, at, value(c) / scale, r, stream, static_cast<std::uint64_t>(at));
  }
}

// grid (B T); shared: red, then r [N], logits [S][N]
__global__ void __launch_bounds__(kAttnResThreads) attnres_phase1_forward_kernel(const AttnResParams p) {
  extern __shared__ float smem[];
  float* red = smem;
  float* r = red + kAttnResWarps;
  float* logit = r + p.sources;
  const int bt = blockIdx.x, b = bt / p.tokens, t = bt % p.tokens, N = p.sources, D = p.dim;
  const int BT = p.batch * p.tokens;
  for (int i = 0; i < N; ++i) {
    const RowIn v = row_in(p.values, i, b, t);
    float sq = 0.f;
    for (int c = threadIdx.x; c < D; c += kAttnResThreads) sq += v[c] * v[c];
    const float ri = rms_inverse(block_sum(sq, red), D, p.eps);
    if (threadIdx.x == 0) r[i] = ri;
    for (int s = 0; s < p.layers; ++s) {
      const RowIn w = row_in(p.queries, 0, 0, s);
      float dot = 0.f;
      for (int c = threadIdx.x; c < D; c += kAttnResThreads) dot += w[c] * v[c];
      const float total = block_sum(dot, red);
      if (threadIdx.x == 0) logit[s * N + i] = ri * total;
    }
  }
  __syncthreads();
  for (int s = 0; s < p.layers; ++s) {
    float m = -INFINITY;
    for (int i = 0; i < N; ++i) m = fmaxf(m, logit[s * N + i]);
    float l = 0.f;
    for (int i = 0; i < N; ++i) l += expf(logit[s * N + i] - m);
    const std::int64_t row = static_cast<std::int64_t>(s) * BT + bt;
    const auto o = [&](int c) {
      float acc = 0.f;
      for (int i = 0; i < N; ++i) acc += expf(logit[s * N + i] - m) * row_in(p.values, i, b, t)[c];  // sources in order
      return acc / l;
    };
    store_row(p.o, row, D, o, p.rounding, p.o_stream, red);
    if (threadIdx.x == 0) p.lse[row] = m + logf(l);
  }
}

// --- helpers of the lane-layout kernels (attnres_lane_kernels.cuh) ------------------------------------
__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// 8 entries as stored (16-byte pieces: two for fp32, one for the 16-bit formats) -> fp32.
__device__ inline void unpack8(Elem type, uint4 a, uint4 b, float (&x)[8]) {
  if (type == Elem::f32) {
    const std::uint32_t u[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = __uint_as_float(u[k]);
    return;
  }
  const std::uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = type == Elem::bf16 ? Storage<__nv_bfloat16>::unpack(w[k]) : Storage<__half>::unpack(w[k]);
    x[2 * k] = f.x, x[2 * k + 1] = f.y;
  }
}
// Entries c .. c + 7 of a row (c % 8 == 0, the row 16-byte aligned) as fp32.
__device__ inline void load8(const void* row, Elem type, int c, float (&x)[8]) {
  if (type == Elem::f32) {
    const uint4* q = reinterpret_cast<const uint4*>(static_cast<const float*>(row) + c);
    unpack8(type, q[0], q[1], x);
    return;
  }
  unpack8(type, *reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(row) + c), uint4{}, x);
}
// Stores entries c .. c + 7 of a contiguous row rounded to nearest (cvt.rn: the host's RN).
__device__ inline void store8(void* row, Elem type, int c, const float (&x)[8]) {
  if (type == Elem::f32) {
    float4* q = reinterpret_cast<float4*>(static_cast<float*>(row) + c);
    q[0] = make_float4(x[0], x[1], x[2], x[3]), q[1] = make_float4(x[4], x[5], x[6], x[7]);
    return;
  }
  std::uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    w[k] = type == Elem::bf16 ? Storage<__nv_bfloat16>::pack(x[2 * k], x[2 * k + 1]) : Storage<__half>::pack(x[2 * k], x[2 * k + 1]);
  }
  *reinterpret_cast<uint4*>(static_cast<std::uint16_t*>(row) + c) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ inline const void* row_ptr(const AttnResIn& x, int i, int b, int t) {
  return static_cast<const unsigned char*>(x.data) + row_of(x, i, b, t) * (x.type == Elem::f32 ? 4 : 2);
}

// grid (B T, S)
__global__ void __launch_bounds__(kAttnResThreads) attnres_phase2_forward_kernel(const AttnResParams p) {
  __shared__ float red[kAttnResWarps];
  const int bt = blockIdx.x, s = blockIdx.y, b = bt / p.tokens, t = bt % p.tokens, D = p.dim;
  const std::int64_t row = static_cast<std::int64_t>(s) * p.batch * p.tokens + bt;
  const RowIn u = row_in(p.partial, s, b, t), w = row_in(p.queries, 0, 0, s), o = row_in(p.o_in, s, b, t);  // phase 1's stored o
  float sq = 0.f, dot = 0.f;
  for (int c = threadIdx.x; c < D; c += kAttnResThreads) sq += u[c] * u[c], dot += w[c] * u[c];
  const float ru = rms_inverse(block_sum(sq, red), D, p.eps);
  const float su = ru * block_sum(dot, red);
  const float beta = sigmoid_of_difference(su, p.lse_in[row]);
  store_row(p.h, row, D, [&](int c) { return o[c] + beta * (u[c] - o[c]); }, p.rounding, p.h_stream, red);
}

// grid (chunks, S); shared: red, then this chunk's dw partial [D]
__global__ void __launch_bounds__(kAttnResThreads) attnres_phase2_backward_kernel(const AttnResParams p) {
  extern __shared__ float smem[];
  float* red = smem;
  float* dw = red + kAttnResWarps;
  const int chunk = blockIdx.x, s = blockIdx.y, D = p.dim, BT = p.batch * p.tokens;
  const RowIn w = row_in(p.queries, 0, 0, s);
  for (int c = threadIdx.x; c < D; c += kAttnResThreads) dw[c] = 0.f;
  const int end = min(BT, (chunk + 1) * kAttnResChunk);
  for (int bt = chunk * kAttnResChunk; bt < end; ++bt) {
    const int b = bt / p.tokens, t = bt % p.tokens;
    const std::int64_t row = static_cast<std::int64_t>(s) * BT + bt;
    const RowIn u = row_in(p.partial, s, b, t), o = row_in(p.o_in, s, b, t), g = row_in(p.dh, s, b, t);
    float sq = 0.f, dot = 0.f, delta = 0.f;
    for (int c = threadIdx.x; c < D; c += kAttnResThreads) sq += u[c] * u[c], dot += w[c] * u[c], delta += g[c] * (o[c] - u[c]);
    const float ru = rms_inverse(block_sum(sq, red), D, p.eps), su = ru * block_sum(dot, red);
    delta = block_sum(delta, red);
    const float lse = p.lse_in[row];
    // 1 - beta as a sigmoid of its own (cpu.attnres: subtraction loses every digit when beta rounds to 1)
    const float beta = sigmoid_of_difference(su, lse), one_minus_beta = sigmoid_of_difference(lse, su);
    const float dl = beta * one_minus_beta * delta, dsu = -dl;
    if (threadIdx.x == 0) p.d_lse[row] = dl;
    const float coef = su * ru * ru / static_cast<float>(D);
    for (int c = threadIdx.x; c < D; c += kAttnResThreads) {
      const std::int64_t at = row * D + c;
      const float gc = g[c], uc = u[c];
      store_elem(p.d_o, p.d_partial.type, at, one_minus_beta * gc, p.rounding, p.d_o_stream, static_cast<std::uint64_t>(at));
      store_elem(p.d_partial.data, p.d_partial.type, at, beta * gc + dsu * (ru * w[c] - coef * uc), p.rounding, p.d_partial_stream,
                 static_cast<std::uint64_t>(at));
      dw[c] += dsu * ru * uc;  // (each thread its own entries: no race)
    }
  }
  float* out = p.dw_phase2 + (static_cast<std::int64_t>(chunk) * p.layers + s) * D;
  for (int c = threadIdx.x; c < D; c += kAttnResThreads) out[c] = dw[c];
}

// grid (chunks); shared: red, r [N], prob [S][N], ds [S][N], coef [S][N], logit [S][N]; the chunk's
// dw partial accumulates in dw_phase1 (this block's own slice of it)
__global__ void __launch_bounds__(kAttnResThreads) attnres_phase1_backward_kernel(const AttnResParams p) {
  extern __shared__ float smem[];
  const int N = p.sources, S = p.layers, D = p.dim, BT = p.batch * p.tokens, chunk = blockIdx.x;
  float* red = smem;
  float* r = red + kAttnResWarps;
  float* prob = r + N;
  float* ds = prob + S * N;
  float* coef = ds + S * N;
  float* a = coef + S * N;
  float* dw = p.dw_phase1 + static_cast<std::int64_t>(chunk) * S * D;  // [S, D]
  for (int j = threadIdx.x; j < S * D; j += kAttnResThreads) dw[j] = 0.f;
  __syncthreads();  // (the zeroing's entries are not the ones each thread accumulates below)
  const int end = min(BT, (chunk + 1) * kAttnResChunk);
  const Elem gtype = p.d_values.type;  // do is stored in the gradient format
  for (int bt = chunk * kAttnResChunk; bt < end; ++bt) {
    const int b = bt / p.tokens, t = bt % p.tokens;
    for (int i = 0; i < N; ++i) {
      const RowIn v = row_in(p.values, i, b, t);
      float sq = 0.f;
      for (int c = threadIdx.x; c < D; c += kAttnResThreads) sq += v[c] * v[c];
      const float ri = rms_inverse(block_sum(sq, red), D, p.eps);
      if (threadIdx.x == 0) r[i] = ri;
      for (int s = 0; s < S; ++s) {
        const RowIn w = row_in(p.queries, 0, 0, s);
        const std::int64_t row = static_cast<std::int64_t>(s) * BT + bt;
        const unsigned char* g = static_cast<const unsigned char*>(p.d_o) + row * D * (gtype == Elem::f32 ? 4 : 2);
        float wv = 0.f, gv = 0.f;
        for (int c = threadIdx.x; c < D; c += kAttnResThreads) wv += w[c] * v[c], gv += load_elem(g, gtype, c) * v[c];
        wv = block_sum(wv, red), gv = block_sum(gv, red);
        if (threadIdx.x == 0) {
          const float logit = ri * wv;
          prob[s * N + i] = expf(logit - p.lse_in[row]);
          a[s * N + i] = gv;
          coef[s * N + i] = logit * ri * ri / static_cast<float>(D);
        }
      }
    }
    __syncthreads();
    for (int s = threadIdx.x; s < S; s += kAttnResThreads) {  // ds_i = p_i (a_i - abar + dlse), abar over sources in order
      const std::int64_t row = static_cast<std::int64_t>(s) * BT + bt;
      float abar = 0.f;
      for (int i = 0; i < N; ++i) abar += prob[s * N + i] * a[s * N + i];
      for (int i = 0; i < N; ++i) ds[s * N + i] = prob[s * N + i] * (a[s * N + i] - abar + p.d_lse[row]);
    }
    __syncthreads();
    for (int i = 0; i < N; ++i) {
      const RowIn v = row_in(p.values, i, b, t);
      const std::int64_t vrow = static_cast<std::int64_t>(i) * BT + bt;
      for (int c = threadIdx.x; c < D; c += kAttnResThreads) {
        const float vc = v[c];
        float dv = 0.f;
        for (int s = 0; s < S; ++s) {  // every layer's part, in layer order
          const RowIn w = row_in(p.queries, 0, 0, s);
          const std::int64_t row = static_cast<std::int64_t>(s) * BT + bt;
          const float gc = load_elem(p.d_o, gtype, row * D + c);
          const float pi = prob[s * N + i], dsi = ds[s * N + i];
          dv += pi * gc + dsi * (r[i] * w[c] - coef[s * N + i] * vc);
        }
        const std::int64_t at = vrow * D + c;
        store_elem(p.d_values.data, p.d_values.type, at, dv, p.rounding, p.d_values_stream, static_cast<std::uint64_t>(at));
      }
    }
    // dw_s += ds_i r_i v_i, per layer, sources in order (this block's slice: no race)
    for (int s = 0; s < S; ++s) {
      for (int i = 0; i < N; ++i) {
        const RowIn v = row_in(p.values, i, b, t);
        const float k = ds[s * N + i] * r[i];
        for (int c = threadIdx.x; c < D; c += kAttnResThreads) dw[s * D + c] += k * v[c];
      }
    }
    __syncthreads();  // r, prob, ds, a, coef are rewritten by the next token
  }
}

// grid (ceil(S D / threads)): dw = (phase 2's partials in chunk order) + (phase 1's in chunk order)
__global__ void __launch_bounds__(kAttnResThreads) attnres_dw_sum_kernel(const AttnResParams p, int chunks) {
  const std::int64_t n = static_cast<std::int64_t>(p.layers) * p.dim;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * kAttnResThreads + threadIdx.x;
  if (j >= n) return;
  float two = 0.f, one = 0.f;  // (a null partial array: that phase's part is not wanted)
  if (p.dw_phase2) {
    for (int k = 0; k < chunks; ++k) two += p.dw_phase2[k * n + j];
  }
  if (p.dw_phase1) {
    for (int k = 0; k < chunks; ++k) one += p.dw_phase1[k * n + j];
  }
  store_elem(p.d_queries.data, p.d_queries.type, j, two + one, p.rounding, p.d_queries_stream, static_cast<std::uint64_t>(j));
}

}  // namespace fc::kernels::cuda
