// Attention Residuals' lane-layout kernels (version 4): the fast path of every phase, forward and
// backward, for D a multiple of 8 and 16-byte aligned rows (attnres_kernels.cu decides; the block
// kernels of attnres_kernels.cuh take every other case).
//
// The lane layout of a row of D entries: a token (phase 1) or a (layer, token) row (phase 2) belongs to
// a group of W warps; lane l of warp w of the group owns the 8 entries at 256 (w + W kk) + 8 l for
// kk < K (16-byte loads and stores). W and K are a function of D and N alone (attnres_kernels.cu), so
// the forward and the backward lay a row out the same way.
//
// Why it is faster than version 3 (a warp per token walking the sources one at a time): a lane issues
// the loads of all its row chunks (N x K for phase 1) before it uses any, so a warp keeps N K x 512
// bytes in flight instead of 512; the rows stay in registers between the dot products and the
// output, so the values are read from memory once and from L1 never; a layer's N dot products are
// summed over the warp by one reduce-scatter (N + 5 shuffles rather than 5 N).
//
// Determinism and the forward/backward agreement: a dot product is each lane's sum of its entries (kk,
// then the 8 entries, in order, by fmaf), then the warp tree of xor masks 16, 8, 4, 2, 1 (warp_sum's
// tree: fp addition is commutative, so the reduce-scatter gives warp_sum's bits), then the group's warps
// in order. Phase 1's backward recomputes every logit by that same sequence, so logit_bwd - lse_fwd is
// exactly the forward's, and p = exp(logit - lse) is the forward's to the last bit (the fp32 one-hot
// gap of version 3, NOTES.md).
//
// dw without atomics: the backward kernels write a coefficient per (token, layer, source) (phase 1:
// ds_i r_i) or per (layer, token) (phase 2: ds_u r_u) into the dw workspace; attnres_phase*_dw_kernel
// then sums coefficient x row over each chunk of 64 tokens in token order, sources in order (cpu.attnres's
// order), and attnres_dw_sum_kernel adds the chunks in order.
#pragma once

#include <type_traits>

#include "kernels/cuda/attnres_kernels.cuh"

namespace fc::kernels::cuda {

constexpr int kLaneWarps = 8;      // warps per block
constexpr int kLaneRowChunks = 8;  // phase 1: a lane holds N x K <= 8 row chunks (64 fp32 registers)
constexpr int kLaneMaxS = 16;      // layers (the dw kernel's accumulators)
constexpr int kLaneP2MaxK = 4;     // phase 2: chunks per lane (two rows of K x 8 fp32 in registers)

__host__ __device__ constexpr int log2_of(int m) { return m <= 1 ? 0 : 1 + log2_of(m / 2); }

// Where a lane sits: its warp's group (a token or a row), the warp within the group, the lane.
struct LanePlace {
  int warps;  // W
  int group, in_group, lane;
  __device__ LanePlace(int W) : warps(W), group(threadIdx.x / 32 / W), in_group(threadIdx.x / 32 % W), lane(threadIdx.x % 32) {}
  __device__ int groups() const { return kLaneWarps / warps; }
  __device__ int entry(int kk) const { return 256 * (in_group + warps * kk) + 8 * lane; }  // first of the lane's 8 entries
  __device__ int warp() const { return threadIdx.x / 32; }
};

// The group's warps in step: W = 1 needs only the warp; W > 1 the block (every group of the block
// passes the same barriers: the loops around them are uniform).
__device__ inline void group_sync(int W) {
  if (W == 1) {
    __syncwarp();
  } else {
    __syncthreads();
  }
}

// M values (M a power of two <= 32) summed over the warp, each by warp_sum's tree (xor masks 16, 8,
// 4, 2, 1): a reduce-scatter, M - 1 + (5 - log2 M) shuffles instead of 5 M. Lane l ends with value
// l >> (5 - log2 M)'s total; `out[j]` receives value j's total (written by one lane per value).
template <int M>
__device__ inline void warp_sums_to(float (&a)[M], int lane, float* out) {
  static_assert(M >= 1 && M <= 32 && (M & (M - 1)) == 0, "a power of two <= 32");
  int len = M;
#pragma unroll
  for (int mask = 16; mask >= 1; mask >>= 1) {
    if (len > 1) {
      const int half = len / 2;
      const bool upper = (lane & mask) != 0;
#pragma unroll
      for (int j = 0; j < half; ++j) {
        const float send = upper ? a[j] : a[j + half];
        const float keep = upper ? a[j + half] : a[j];
        a[j] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
      }
      len = half;
    } else {
      a[0] += __shfl_xor_sync(0xffffffffu, a[0], mask);
    }
  }
  constexpr int shift = 5 - log2_of(M);
  if ((lane & ((1 << shift) - 1)) == 0) out[lane >> shift] = a[0];
}

// The group's total of value j: the per-warp totals `part` (a stride of `stride` floats per warp) of the
// group's warps, in warp order.
__device__ inline float group_total(const float* part, int stride, const LanePlace& at, int j) {
  const int first = at.group * at.warps;
  float t = part[first * stride + j];
  for (int w = 1; w < at.warps; ++w) t += part[(first + w) * stride + j];
  return t;
}

// The staging areas of version 6 (shared memory, filled by cp.async): row chunks of 8 entries per lane,
// lane-minor: 16-byte piece u of chunk slot c of lane l at uint4 index (c pieces + u) 32 + l, so a warp's
// accesses are 512 contiguous bytes (conflict-free), and a lane writes and reads back only its own
// pieces: cp.async.wait_group is all the synchronisation a slot needs, no barrier.
__host__ __device__ constexpr int pieces_of(Elem type) { return type == Elem::f32 ? 2 : 1; }
// cp.async of the 8 entries at `c` of a row into chunk slot `slot` of `area`
__device__ inline void stage8(uint4* area, int slot, const void* row, Elem type, int c, int lane) {
  const int u = pieces_of(type);
  const auto* src = static_cast<const unsigned char*>(row) + static_cast<std::int64_t>(c) * (type == Elem::f32 ? 4 : 2);
  for (int j = 0; j < u; ++j) cp_async_16(area + (slot * u + j) * 32 + lane, src + 16 * j, 16);
}
// chunk slot `slot` of `area` (written by this lane's stage8) as fp32
__device__ inline void staged8(const uint4* area, int slot, Elem type, int lane, float (&x)[8]) {
  const int u = pieces_of(type);
  unpack8(type, area[slot * u * 32 + lane], u == 2 ? area[(slot * u + 1) * 32 + lane] : uint4{}, x);
}

// 8 entries as stored -> fp32 (the values' format known at compile time: the loads of every row chunk
// issue before the first conversion).
template <Elem E>
struct Raw8 {
  static constexpr int kPieces = pieces_of(E);
  uint4 w[kPieces];
  __device__ void load(const void* row, int c) {
    const auto* src = static_cast<const unsigned char*>(row) + static_cast<std::int64_t>(c) * (E == Elem::f32 ? 4 : 2);
#pragma unroll
    for (int j = 0; j < kPieces; ++j) w[j] = reinterpret_cast<const uint4*>(src)[j];
  }
  __device__ void load_staged(const uint4* area, int slot, int lane) {
#pragma unroll
    for (int j = 0; j < kPieces; ++j) w[j] = area[(slot * kPieces + j) * 32 + lane];
  }
  __device__ void zero() {
#pragma unroll
    for (auto& x : w) x = make_uint4(0, 0, 0, 0);
  }
  // NaN and Inf among the 8 entries into `bad2` for the 16-bit formats: flag_nonfinite's fma(x, 0, bad) on
  // packed pairs (fma.rn.bf16x2 / f16x2: half its instructions); packed_nonfinite reads the result.
  __device__ void flag_packed(unsigned& bad2) const {
    static_assert(E != Elem::f32, "16-bit formats only");
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned word = j == 0 ? w[0].x : j == 1 ? w[0].y : j == 2 ? w[0].z : w[0].w;
      if constexpr (E == Elem::bf16) {
        asm("fma.rn.bf16x2 %0, %1, %2, %0;" : "+r"(bad2) : "r"(word), "r"(0u));
      } else {
        asm("fma.rn.f16x2 %0, %1, %2, %0;" : "+r"(bad2) : "r"(word), "r"(0u));
      }
    }
  }
  static __device__ bool packed_nonfinite(unsigned bad2) {
    constexpr unsigned kInf = E == Elem::bf16 ? 0x7f80u : 0x7c00u;  // a NaN's magnitude bits exceed Inf's
    return (bad2 & 0x7fffu) > kInf || ((bad2 >> 16) & 0x7fffu) > kInf;
  }
  __device__ void to_float(float (&x)[8]) const {
    if constexpr (kPieces == 2) {
      unpack8(E, w[0], w[1], x);
    } else {
      unpack8(E, w[0], uint4{}, x);
    }
  }
};

// A layer's NMAX softmax weights from shared memory, in 16-byte loads where NMAX allows (the weights of a
// warp start 16-byte aligned and are NMAX apart).
template <int NMAX>
__device__ inline void load_weights(const float* w, float (&pw)[NMAX]) {
  if constexpr (NMAX % 4 == 0) {
#pragma unroll
    for (int i = 0; i < NMAX; i += 4) {
      const float4 q = reinterpret_cast<const float4*>(w + i)[0];
      pw[i] = q.x, pw[i + 1] = q.y, pw[i + 2] = q.z, pw[i + 3] = q.w;
    }
  } else if constexpr (NMAX == 2) {
    const float2 q = reinterpret_cast<const float2*>(w)[0];
    pw[0] = q.x, pw[1] = q.y;
  } else {
    pw[0] = w[0];
  }
}

// acc += sum_k a[k] b[k], in k order, each step one fmaf (the one sequence every kernel here uses).
__device__ inline float dot8(float acc, const float (&a)[8], const float (&b)[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) acc = fmaf(a[k], b[k], acc);
  return acc;
}

// NaN and Inf in the inputs (AttnResParams::nonfinite): `bad` = fmaf(x, 0, bad) over every entry read
// stays 0 while they are finite (x 0 = +-0 exactly) and turns NaN at the first NaN or Inf (Inf 0 = NaN):
// one instruction per entry, in place of a pass of its own over the inputs.
__device__ inline void flag_nonfinite(float& bad, const float (&x)[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) bad = fmaf(x[k], 0.f, bad);
}
__device__ inline unsigned nonfinite_bit(float bad, unsigned bit) { return isnan(bad) ? bit : 0u; }
// The warp's bits into *flag (every lane of the warp calls it; an atomic only where an input is bad).
__device__ inline void report_nonfinite(unsigned* flag, unsigned bits) {
  bits = __reduce_or_sync(0xffffffffu, bits);
  if (flag != nullptr && bits != 0 && threadIdx.x % 32 == 0) atomicOr(flag, bits);
}

// Stores a row that the group holds in the lane layout (K chunks of 8 per lane): contiguous 16-byte
// stores to nearest, or, for fp16 rows with scales and for stochastic rounding, store_row's rule (the
// row's largest finite magnitude over the group, then value / scale rounded per element with its
// Philox word). `red`: kLaneWarps floats of shared memory. Every group of the block calls it together.
template <int K>
__device__ inline void store_lane_row(const AttnResOut& out, std::int64_t row, int D, const float (&v)[K][8], const LanePlace& at,
                                      bool active, const OutputRounding& r, std::uint32_t stream, float* red) {
  void* base = static_cast<unsigned char*>(out.data) + row * D * (out.type == Elem::f32 ? 4 : 2);
  if (out.scale == nullptr && !r.stochastic) {
    if (!active) return;
#pragma unroll
    for (int kk = 0; kk < K; ++kk) {
      if (at.entry(kk) < D) store8(base, out.type, at.entry(kk), v[kk]);
    }
    return;
  }
  float scale = 1.f;
  if (out.scale) {
    float m = 0.f;
#pragma unroll
    for (int kk = 0; kk < K; ++kk) {
      if (at.entry(kk) >= D) continue;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float a = fabsf(v[kk][k]);
        if (!isinf(a) && a > m) m = a;  // (NaN fails a > m)
      }
    }
    m = warp_max(m);
    if (at.lane == 0) red[at.warp()] = m;
    group_sync(at.warps);
    for (int w = 0; w < at.warps; ++w) m = fmaxf(m, red[at.group * at.warps + w]);
    group_sync(at.warps);  // red is free again
    scale = fp16_row_scale_device(m);
    if (active && at.in_group == 0 && at.lane == 0) out.scale[row] = scale;
  }
  if (!active) return;
#pragma unroll
  for (int kk = 0; kk < K; ++kk) {
    if (at.entry(kk) >= D) continue;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const std::int64_t e = row * D + at.entry(kk) + k;
      store_elem(out.data, out.type, e, v[kk][k] / scale, r, stream, static_cast<std::uint64_t>(e));
    }
  }
}

// A token's N value rows in the lane layout, for the forward and the backward alike (the backward's
// logits must repeat the forward's sequence bit for bit): every row chunk read (from `staged`, where
// stage_token_rows put them, or else from global memory, every 16-byte load issued before any is used),
// converted to fp32 into x (zeros past N and D), NaN/Inf flagged into bad, and each row's ||v_i||^2
// summed over the warp into part[0 .. NMAX).
template <bool Staged, Elem E, int K, int NMAX>
__device__ inline void load_token_rows(const AttnResParams& p, int b, int t, bool active, const LanePlace& at, float (&x)[NMAX][K][8],
                                       float& bad, float* part, const uint4* staged = nullptr) {
  Raw8<E> raw[NMAX][K];
#pragma unroll
  for (int i = 0; i < NMAX; ++i) {
#pragma unroll
    for (int kk = 0; kk < K; ++kk) {
      if (active && i < p.sources && at.entry(kk) < p.dim) {
        if constexpr (Staged) {
          raw[i][kk].load_staged(staged, i * K + kk, at.lane);
        } else {
          raw[i][kk].load(row_ptr(p.values, i, b, t), at.entry(kk));
        }
      } else {
        raw[i][kk].zero();
      }
    }
  }
  if constexpr (E == Elem::f32) {
#pragma unroll
    for (int i = 0; i < NMAX; ++i) {
#pragma unroll
      for (int kk = 0; kk < K; ++kk) raw[i][kk].to_float(x[i][kk]), flag_nonfinite(bad, x[i][kk]);
    }
  } else {
    unsigned bad2 = 0;  // (the zeros past N and D are finite)
#pragma unroll
    for (int i = 0; i < NMAX; ++i) {
#pragma unroll
      for (int kk = 0; kk < K; ++kk) raw[i][kk].to_float(x[i][kk]), raw[i][kk].flag_packed(bad2);
    }
    if (Raw8<E>::packed_nonfinite(bad2)) bad = __int_as_float(0x7fc00000);  // (a NaN: nonfinite_bit's test)
  }
  float sq[NMAX];
#pragma unroll
  for (int i = 0; i < NMAX; ++i) {
    sq[i] = 0.f;
#pragma unroll
    for (int kk = 0; kk < K; ++kk) sq[i] = dot8(sq[i], x[i][kk], x[i][kk]);
  }
  warp_sums_to(sq, at.lane, part);
}
// The cp.async copies of token bt's (= b T + t) value rows into chunk slots i K + kk of `area`
// (load_token_rows' `staged`): NMAX K slots of pieces_of(E) uint4 per lane. The first row's address, then
// one source's step: no division per token where the values' (b, t) rows are evenly spaced (every
// contiguous layout), 64-bit products once per token rather than per row.
template <Elem E, int K, int NMAX>
__device__ inline void stage_token_rows(const AttnResParams& p, int bt, const LanePlace& at, uint4* area) {
  const AttnResIn& x = p.values;
  const bool even = p.batch == 1 || x.batch == static_cast<std::int64_t>(p.tokens) * x.token;
  const std::int64_t first = even ? bt * x.token : (bt / p.tokens) * x.batch + (bt % p.tokens) * x.token;
  constexpr int kBytes = E == Elem::f32 ? 4 : 2;
  const auto* row = static_cast<const unsigned char*>(x.data) + first * kBytes;
#pragma unroll
  for (int i = 0; i < NMAX; ++i, row += x.outer * kBytes) {
#pragma unroll
    for (int kk = 0; kk < K; ++kk) {
      if (i < p.sources && at.entry(kk) < p.dim) stage8(area, i * K + kk, row, E, at.entry(kk), at.lane);
    }
  }
}

// Version 6's token loop (phase 1, forward and backward): a persistent grid, group g of block x taking
// tokens x G + g, then + gridDim.x G, ... (G groups per block: every group of a block runs the same
// iterations, so the group barriers stay uniform). A token's rows are staged `stages` - 1 tokens ahead
// (cp.async into a ring of `stages` slots per warp), so a warp's next loads run under its current work.
struct TokenRing {
  int stages;       // 1: no prefetch (the token's own loads, all at once); 2 or 3
  int slot_uint4;   // one slot's uint4 per warp
  uint4* base;      // this warp's ring
  __device__ uint4* slot(int j) const { return base + j * slot_uint4; }
  __device__ void wait_current() const {  // all but the stages - 1 newest groups complete
    if (stages >= 3) {
      cp_async_wait<2>();
    } else if (stages == 2) {
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
  }
};

// The pseudo-queries as fp32 in shared memory (S D floats after the rings), converted once per block
// where they fit, since a persistent block reads every entry once per token (16-byte loads from L1 and a
// conversion per entry otherwise). Block 0 flags NaN/Inf in them as it converts.
constexpr int kStagedQueryFloats = 8192;
__host__ __device__ inline bool queries_staged(const AttnResParams& p) { return p.layers * p.dim <= kStagedQueryFloats; }
__host__ __device__ inline std::size_t staged_query_bytes(const AttnResParams& p) {
  return queries_staged(p) ? static_cast<std::size_t>(p.layers) * p.dim * sizeof(float) : 0;
}
// Every thread of the block calls it with `stage` the same; returns the staged queries, or nullptr where
// they do not fit or `stage` is false. Block 0 flags NaN/Inf in every query entry either way (the
// kernels' loops over layers then carry no checks).
__device__ inline const float* stage_queries(const AttnResParams& p, float* area, float& bad_w, bool stage = true) {
  stage = stage && queries_staged(p);
  if (!stage && blockIdx.x != 0) return nullptr;
  const int D = p.dim, n = p.layers * D;
  for (int j = 8 * threadIdx.x; j < n; j += 8 * blockDim.x) {  // (D % 8 == 0: 8 entries of one row)
    float w[8];
    load8(row_ptr(p.queries, 0, 0, j / D), p.queries.type, j % D, w);
    if (blockIdx.x == 0) flag_nonfinite(bad_w, w);
    if (stage) {
      reinterpret_cast<float4*>(area + j)[0] = make_float4(w[0], w[1], w[2], w[3]);
      reinterpret_cast<float4*>(area + j)[1] = make_float4(w[4], w[5], w[6], w[7]);
    }
  }
  if (!stage) return nullptr;
  __syncthreads();
  return area;
}
// w_s's 8 entries at c from the staged fp32 copy
__device__ inline void staged_float8(const float* staged, int D, int s, int c, float (&w)[8]) {
  const float4 a = reinterpret_cast<const float4*>(staged + s * D + c)[0], b = reinterpret_cast<const float4*>(staged + s * D + c)[1];
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}
// w_s's 8 entries at c: from the staged copy, or else from global memory
__device__ inline void query8(const AttnResParams& p, const float* staged, int s, int c, float (&w)[8]) {
  if (staged) {
    staged_float8(staged, p.dim, s, c, w);
  } else {
    load8(row_ptr(p.queries, 0, 0, s), p.queries.type, c, w);
  }
}

// The backward's staged queries: their bytes as stored (format E, the values'), half the shared memory
// of fp32 at 16 bits, which keeps two blocks per SM beside the backward's rings. Every thread of the
// block calls it; block 0 flags NaN/Inf in every entry.
template <Elem E>
__device__ inline const uint4* stage_queries_raw(const AttnResParams& p, uint4* area, float& bad_w) {
  const int D = p.dim, n = p.layers * D;
  for (int j = 8 * threadIdx.x; j < n; j += 8 * blockDim.x) {
    Raw8<E> r;
    r.load(row_ptr(p.queries, 0, 0, j / D), j % D);
    if (blockIdx.x == 0) {
      float w[8];
      r.to_float(w);
      flag_nonfinite(bad_w, w);
    }
#pragma unroll
    for (int u = 0; u < Raw8<E>::kPieces; ++u) area[j / 8 * Raw8<E>::kPieces + u] = r.w[u];
  }
  __syncthreads();
  return area;
}
template <Elem E>
__device__ inline void staged_query8(const uint4* area, int D, int s, int c, float (&w)[8]) {
  Raw8<E> r;
#pragma unroll
  for (int u = 0; u < Raw8<E>::kPieces; ++u) r.w[u] = area[(s * D + c) / 8 * Raw8<E>::kPieces + u];
  r.to_float(w);
}
__host__ __device__ inline std::size_t raw_query_bytes(const AttnResParams& p, Elem E) {
  return queries_staged(p) ? static_cast<std::size_t>(p.layers) * p.dim * (E == Elem::f32 ? 4 : 2) : 0;
}

// Layers per reduce-scatter in phase 1's dot products: the N sums of LB layers (LB NMAX <= `Values`, at
// least one layer, at most 8) reduced by one warp_sums_to, whose shuffles are independent of each other,
// where one layer at a time made a chain of dependent shuffles per layer. The bits are warp_sum's
// whatever LB is (every value's tree is the same butterfly), so the forward and the backward may batch
// differently.
template <int NMAX, int Values>
constexpr int kLayerBatch = Values / NMAX < 1 ? 1 : Values / NMAX < 8 ? Values / NMAX : 8;
__host__ __device__ constexpr int round_up(int n, int m) { return (n + m - 1) / m * m; }

// --- phase 1 ------------------------------------------------------------------------------------------
// Persistent grid (TokenRing), block 8 warps, a token per group of W warps. Shared: each warp's ring of
// `stages` slots of N K chunks (attnres_phase1_forward_smem), then per warp `part` [(S' + 1) NMAX] (its
// sums of ||v_i||^2, then of w_s . v_i), then per warp the weights p_i = exp(s_i - m) / l [S][NMAX],
// then store_lane_row's kLaneWarps floats.
template <Elem E, int K>
__host__ __device__ constexpr int phase1_slot_uint4() {
  return kLaneRowChunks * pieces_of(E) * 32;
}
template <Elem E, int K>
__host__ __device__ inline std::size_t attnres_phase1_forward_smem(const AttnResParams& p, int stages) {
  constexpr int NMAX = kLaneRowChunks / K;
  const int S = p.layers;
  return static_cast<std::size_t>(kLaneWarps) * stages * phase1_slot_uint4<E, K>() * 16 + staged_query_bytes(p) +
         (static_cast<std::size_t>(kLaneWarps) * ((round_up(S, kLayerBatch<NMAX, 8>) + 1) * NMAX + S * NMAX) + kLaneWarps) * sizeof(float);
}

template <Elem E, int K>
__global__ void __launch_bounds__(32 * kLaneWarps, 2) attnres_phase1_forward_lane_kernel(const AttnResParams p, int W, int stages) {
  constexpr int NMAX = kLaneRowChunks / K;
  extern __shared__ float smem[];
  const int S = p.layers, N = p.sources, D = p.dim, BT = p.batch * p.tokens;
  const LanePlace at(W);
  const TokenRing ring{stages, phase1_slot_uint4<E, K>(), reinterpret_cast<uint4*>(smem) + at.warp() * stages * phase1_slot_uint4<E, K>()};
  float bad_v = 0.f, bad_w = 0.f;
  const float* wq = stage_queries(p, smem + kLaneWarps * stages * phase1_slot_uint4<E, K>() * 4, bad_w);
  float* scratch = smem + kLaneWarps * stages * phase1_slot_uint4<E, K>() * 4 + staged_query_bytes(p) / 4;
  constexpr int LB = kLayerBatch<NMAX, 8>;
  const int stride = (round_up(S, LB) + 1) * NMAX;  // (S rounded up to LB: the last batch's unused sums land in it)
  float* part = scratch + at.warp() * stride;
  float* weight = scratch + kLaneWarps * stride + at.warp() * S * NMAX;
  float* red = scratch + kLaneWarps * (stride + S * NMAX);

  bool in_row[K];  // whether the lane's chunk kk lies inside the row (D not a multiple of 256 W K)
#pragma unroll
  for (int kk = 0; kk < K; ++kk) in_row[kk] = at.entry(kk) < D;
  // o in the values' format to nearest, unscaled; the fast path adds full rows (D = 256 W K: 256, 512 or 1024
  // where the N rows fit a warp's registers) and staged queries (S D <= 8192).
  const bool plain_o = p.o.type == E && p.o.scale == nullptr && !p.rounding.stochastic;
  const bool fast = plain_o && D == 256 * W * K && wq != nullptr;
  const int groups = at.groups(), step = gridDim.x * groups;
  const auto issue = [&](int first, int slot) {
    const int bt = first + at.group;
    if (bt < BT) stage_token_rows<E, K, NMAX>(p, bt, at, ring.slot(slot));
    cp_async_commit();  // (an empty group past the end keeps wait_current's count)
  };
  int first = blockIdx.x * groups;
  for (int j = 0; j + 1 < stages; ++j) issue(first + j * step, j);
  for (int slot = 0; first < BT; first += step, slot = slot + 1 == stages ? 0 : slot + 1) {
    if (stages > 1) issue(first + (stages - 1) * step, slot == 0 ? stages - 1 : slot - 1);  // the slot read last time
    const int bt = first + at.group;
    const bool active = bt < BT;
    if (stages == 1) {
      if (active) stage_token_rows<E, K, NMAX>(p, bt, at, ring.slot(0));
      cp_async_commit();
    }
    ring.wait_current();
    group_sync(W);  // (the previous token's readers of part and weight are done)
    float x[NMAX][K][8];
    load_token_rows<true, E, K>(p, 0, 0, active, at, x, bad_v, part, ring.slot(slot));  // (b, t: only for unstaged rows)
    // w_s . v_i for LB layers at a time, each in kk order (dot8). Full rows with staged queries (the
    // common shapes) take a copy of the loop with no per-chunk or per-layer tests: the last batch
    // repeats layer S - 1 into the unused sums past S instead of testing s0 + j < S.
    const auto logits = [&](auto full_rows) {
      constexpr bool full = decltype(full_rows)::value;
      for (int s0 = 0; s0 < S; s0 += LB) {
        float acc[LB * NMAX];
#pragma unroll
        for (int j = 0; j < LB * NMAX; ++j) acc[j] = 0.f;
#pragma unroll
        for (int kk = 0; kk < K; ++kk) {
          if (!full && !in_row[kk]) continue;
#pragma unroll
          for (int j = 0; j < LB; ++j) {
            if (!full && s0 + j >= S) break;
            const int s = s0 + j < S ? s0 + j : S - 1;
            float w[8];
            if constexpr (full) {
              staged_float8(wq, D, s, at.entry(kk), w);
            } else {
              query8(p, wq, s, at.entry(kk), w);
            }
#pragma unroll
            for (int i = 0; i < NMAX; ++i) acc[j * NMAX + i] = dot8(acc[j * NMAX + i], w, x[i][kk]);
          }
        }
        warp_sums_to(acc, at.lane, part + (1 + s0) * NMAX);
      }
    };
    if (fast) {
      logits(std::true_type{});
    } else {
      logits(std::false_type{});
    }
    group_sync(W);
    // The softmax of each layer's N logits, lane q of the warp on layer q / NMAX, source q % NMAX (every
    // warp of the group for itself): one logit, one exp per lane, m and l over the layer's NMAX lanes.
    // l is summed in source order (a shuffle per source, not a tree), so lse and the weights keep the
    // bits of the sequential loop over the sources.
    for (int q0 = 0; q0 < S * NMAX; q0 += 32) {
      const int q = q0 + at.lane, s = q / NMAX, i = q % NMAX;
      const bool valid = q < S * NMAX && i < N;
      float logit = -INFINITY;
      if (valid) logit = rms_inverse(group_total(scratch, stride, at, i), D, p.eps) * group_total(scratch, stride, at, (1 + s) * NMAX + i);
      float m = logit;
#pragma unroll
      for (int lanes = 1; lanes < NMAX; lanes *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, lanes));
      const float e = valid ? expf(logit - m) : 0.f;
      float l = 0.f;
#pragma unroll
      for (int j = 0; j < NMAX; ++j) l += __shfl_sync(0xffffffffu, e, (at.lane & ~(NMAX - 1)) + j);
      // o = sum_i (e_i / l) v_i: the weights normalised once per layer rather than o scaled per entry;
      // zero past N (those rows are zeros too), so the output loop needs no test of N
      if (q < S * NMAX) weight[q] = e * (1.f / l);
      if (q < S * NMAX && i == 0 && active && at.in_group == 0) p.lse[static_cast<std::int64_t>(s) * BT + bt] = m + logf(l);
    }
    __syncwarp();
    // o_s = sum_i p_i v_i, sources in order, from the registers
    const auto combine = [&](int s, float (&o)[K][8]) {
      float pw[NMAX];
      load_weights(weight + s * NMAX, pw);
#pragma unroll
      for (int kk = 0; kk < K; ++kk) {
#pragma unroll
        for (int k = 0; k < 8; ++k) o[kk][k] = fmaf(pw[0], x[0][kk][k], 0.f);
#pragma unroll
        for (int i = 1; i < NMAX; ++i) {
#pragma unroll
          for (int k = 0; k < 8; ++k) o[kk][k] = fmaf(pw[i], x[i][kk][k], o[kk][k]);
        }
      }
    };
    constexpr int kRowBytes = E == Elem::f32 ? 4 : 2;  // (o in the values' format: the plain paths below)
    const std::int64_t layer_bytes = static_cast<std::int64_t>(BT) * D * kRowBytes;
    if (fast) {
      // o's rows in the values' format, to nearest, unscaled, full (the common case): each lane's K
      // chunk addresses stepped by a layer's rows, no test per layer (version 8)
      if (!active) continue;
      unsigned char* o_lane = static_cast<unsigned char*>(p.o.data) + (static_cast<std::int64_t>(bt) * D + at.entry(0)) * kRowBytes;
      const int chunk_bytes = 256 * W * kRowBytes;  // from chunk kk to kk + 1
      for (int s = 0; s < S; ++s, o_lane += layer_bytes) {
        float o[K][8];
        combine(s, o);
#pragma unroll
        for (int kk = 0; kk < K; ++kk) store8(o_lane + kk * chunk_bytes, E, 0, o[kk]);
      }
    } else if (plain_o) {
      // (rows not full, or the queries not staged) typed stores through a pointer stepped by a layer's rows
      // (version 7: under the 128-register cap the compiler still rematerialises some addresses)
      unsigned char* o_row = static_cast<unsigned char*>(p.o.data) + static_cast<std::int64_t>(bt) * D * kRowBytes;
      for (int s = 0; s < S; ++s, o_row += layer_bytes) {
        float o[K][8];
        combine(s, o);
        if (!active) continue;
#pragma unroll
        for (int kk = 0; kk < K; ++kk) {
          if (in_row[kk]) store8(o_row, E, at.entry(kk), o[kk]);
        }
      }
    } else {
      for (int s = 0; s < S; ++s) {  // fp16 rows with scales, or stochastic rounding: store_row's rule
        float o[K][8];
        combine(s, o);
        store_lane_row<K>(p.o, static_cast<std::int64_t>(s) * BT + bt, D, o, at, active, p.rounding, p.o_stream, red);
      }
    }
  }
  cp_async_wait<0>();
  report_nonfinite(p.nonfinite, nonfinite_bit(bad_v, kNonfiniteValues) | nonfinite_bit(bad_w, kNonfiniteQueries));
}

// Grid and token loop as the forward (TokenRing; stages 0: no staging, every row read from global memory
// as version 5 did, for shapes whose slots do not fit). A slot holds the token's N K value chunks, then
// its S K chunks of do (the gradient format): read twice (the dot products do_s . v_i, then d_values),
// from shared memory. Shared after the rings: the queries as stored (Uniform, where they fit), then per
// warp `part` [(2 S' + 1) NMAX] (||v_i||^2, w_s . v_i, do_s . v_i; S' = S rounded up to the layer
// batch), then per warp prob, ds, coef [S][NMAX] each. Writes d_values and the dw coefficients ds_i r_i
// ([B T][S][N] after the chunk partials in dw_phase1).
__host__ __device__ inline int phase1_backward_slot_uint4(Elem values, Elem grads, int S, int K) {
  return (kLaneRowChunks * pieces_of(values) + S * K * pieces_of(grads)) * 32;
}
template <int K>
__host__ __device__ inline std::size_t attnres_phase1_backward_smem(const AttnResParams& p, Elem values, Elem grads, int stages, bool uniform) {
  constexpr int NMAX = kLaneRowChunks / K;
  const int S = p.layers;
  return static_cast<std::size_t>(kLaneWarps) * stages * phase1_backward_slot_uint4(values, grads, S, K) * 16 +
         (uniform ? raw_query_bytes(p, values) : 0) +
         static_cast<std::size_t>(kLaneWarps) * ((2 * round_up(S, kLayerBatch<NMAX, 4>) + 1) * NMAX + 3 * S * NMAX) * sizeof(float);
}
// Uniform: do, d_values and the queries are in the values' format (every policy issue 10 names), so
// their conversions are typed at compile time rather than chosen per entry, and the queries are staged
// as stored (stage_queries_raw) where they fit; otherwise they are read from global memory (L1).
template <Elem E, int K, bool Uniform>
__global__ void __launch_bounds__(32 * kLaneWarps, 2) attnres_phase1_backward_lane_kernel(const AttnResParams p, int W, int stages) {
  constexpr int NMAX = kLaneRowChunks / K;
  constexpr int IB = NMAX < 2 ? NMAX : 2;  // sources per pass of the d_values loop (its accumulators: 4 spilled)
  extern __shared__ float smem[];
  const int S = p.layers, N = p.sources, D = p.dim, BT = p.batch * p.tokens;
  const LanePlace at(W);
  const Elem gtype = Uniform ? E : p.d_values.type;  // do is stored in the gradient format
  const int slot_uint4 = phase1_backward_slot_uint4(E, gtype, S, K), values_uint4 = kLaneRowChunks * pieces_of(E) * 32;
  const TokenRing ring{stages, slot_uint4, reinterpret_cast<uint4*>(smem) + at.warp() * stages * slot_uint4};
  float bad_v = 0.f, bad_w = 0.f, bad_g = 0.f;
  uint4* const after_rings = reinterpret_cast<uint4*>(smem) + kLaneWarps * stages * slot_uint4;
  const uint4* qraw = nullptr;
  if constexpr (Uniform) {
    if (queries_staged(p)) qraw = stage_queries_raw<E>(p, after_rings, bad_w);
  }
  if (!qraw) stage_queries(p, nullptr, bad_w, false);  // (the checks only)
  const auto query = [&](int s, int c, float (&w)[8]) {
    if (qraw) {
      staged_query8<E>(qraw, D, s, c, w);
    } else {
      load8(row_ptr(p.queries, 0, 0, s), p.queries.type, c, w);
    }
  };
  float* scratch = reinterpret_cast<float*>(after_rings) + (Uniform ? raw_query_bytes(p, E) / 4 : 0);
  constexpr int LB = kLayerBatch<NMAX, 4>;
  const int Sp = round_up(S, LB);
  const int stride = (2 * Sp + 1) * NMAX;
  float* part = scratch + at.warp() * stride;
  const float* parts = scratch;
  float* prob = scratch + kLaneWarps * stride + at.warp() * 3 * S * NMAX;
  float* ds = prob + S * NMAX;
  float* coef = ds + S * NMAX;
  const auto do_row = [&](int s, int bt) {
    return static_cast<const unsigned char*>(p.d_o) + (static_cast<std::int64_t>(s) * BT + bt) * D * (gtype == Elem::f32 ? 4 : 2);
  };
  const auto stage = [&](int bt, uint4* area) {  // the token's value rows, then its do rows
    stage_token_rows<E, K, NMAX>(p, bt, at, area);
    for (int s = 0; s < S; ++s) {
#pragma unroll
      for (int kk = 0; kk < K; ++kk) {
        if (at.entry(kk) < D) stage8(area + values_uint4, s * K + kk, do_row(s, bt), gtype, at.entry(kk), at.lane);
      }
    }
  };
  const auto issue = [&](int first, int slot) {
    const int bt = first + at.group;
    if (bt < BT) stage(bt, ring.slot(slot));
    cp_async_commit();
  };
  const int groups = at.groups(), step = gridDim.x * groups;
  int first = blockIdx.x * groups;
  for (int j = 0; j + 1 < stages; ++j) issue(first + j * step, j);
  unsigned bits = 0;
  for (int slot = 0; first < BT; first += step, slot = slot + 1 == stages ? 0 : slot + 1) {
    if (stages > 1) issue(first + (stages - 1) * step, slot == 0 ? stages - 1 : slot - 1);
    const int bt = first + at.group;
    const bool active = bt < BT;
    const int b = active ? bt / p.tokens : 0, t = active ? bt % p.tokens : 0;
    if (stages == 1) {
      if (active) stage(bt, ring.slot(0));
      cp_async_commit();
    }
    if (stages > 0) ring.wait_current();
    group_sync(W);  // (the previous token's readers of the shared sums are done)
    const uint4* values_area = stages > 0 ? ring.slot(slot) : nullptr;
    const uint4* do_area = stages > 0 ? ring.slot(slot) + values_uint4 : nullptr;
    // do_s's 8 entries of chunk kk (zeros for an inactive group)
    const auto grad8 = [&](int s, int kk, float (&g)[8]) {
      if (!active) {
#pragma unroll
        for (int k = 0; k < 8; ++k) g[k] = 0.f;
      } else if (do_area) {
        staged8(do_area, s * K + kk, gtype, at.lane, g);
      } else {
        load8(do_row(s, bt), gtype, at.entry(kk), g);
      }
    };
    float x[NMAX][K][8];
    if (values_area) {
      load_token_rows<true, E, K>(p, b, t, active, at, x, bad_v, part, values_area);
    } else {
      load_token_rows<false, E, K>(p, b, t, active, at, x, bad_v, part);
    }
    for (int s0 = 0; s0 < S; s0 += LB) {  // w_s . v_i (the forward's sequence) and do_s . v_i, LB layers at a time
      float wv[LB * NMAX], gv[LB * NMAX];
#pragma unroll
      for (int j = 0; j < LB * NMAX; ++j) wv[j] = gv[j] = 0.f;
#pragma unroll
      for (int kk = 0; kk < K; ++kk) {
        if (at.entry(kk) >= D) continue;
#pragma unroll
        for (int j = 0; j < LB; ++j) {
          if (s0 + j >= S) break;
          float w[8], g[8];
          query(s0 + j, at.entry(kk), w);
          grad8(s0 + j, kk, g);
          flag_nonfinite(bad_g, g);
#pragma unroll
          for (int i = 0; i < NMAX; ++i) {
            wv[j * NMAX + i] = dot8(wv[j * NMAX + i], w, x[i][kk]), gv[j * NMAX + i] = dot8(gv[j * NMAX + i], g, x[i][kk]);
          }
        }
      }
      warp_sums_to(wv, at.lane, part + (1 + s0) * NMAX);
      warp_sums_to(gv, at.lane, part + (1 + Sp + s0) * NMAX);
    }
    group_sync(W);
    // per layer (lane s of every warp, each for itself): p_i, a_i, abar, ds_i, the coefficients
    for (int s = at.lane; s < S; s += 32) {
      const std::int64_t row = static_cast<std::int64_t>(s) * BT + bt;
      const float lse = active ? p.lse_in[row] : 0.f, dlse = active ? p.d_lse[row] : 0.f;
      bits |= (isfinite(lse) ? 0u : kNonfiniteLse) | (isfinite(dlse) ? 0u : kNonfiniteDlse);
      float abar = 0.f;
      for (int i = 0; i < N; ++i) {
        const float ri = rms_inverse(group_total(parts, stride, at, i), D, p.eps);
        const float logit = ri * group_total(parts, stride, at, (1 + s) * NMAX + i);
        const float a = group_total(parts, stride, at, (1 + Sp + s) * NMAX + i);
        const float pi = expf(logit - lse);
        prob[s * NMAX + i] = pi, ds[s * NMAX + i] = a;  // (a for now)
        coef[s * NMAX + i] = logit * ri * ri / static_cast<float>(D);
        abar += pi * a;
      }
      for (int i = 0; i < N; ++i) {
        const float dsi = prob[s * NMAX + i] * (ds[s * NMAX + i] - abar + dlse);
        const float ri = rms_inverse(group_total(parts, stride, at, i), D, p.eps);
        // d_values' coefficients: of w_s (ds_i r_i, also dw's) and of v_i (ds_i coef_i)
        ds[s * NMAX + i] = dsi * ri, coef[s * NMAX + i] *= dsi;
        if (active && at.in_group == 0) {
          p.dw_phase1[static_cast<std::int64_t>(attnres_chunk_count(BT)) * S * D + (static_cast<std::int64_t>(bt) * S + s) * N + i] = dsi * ri;
        }
      }
    }
    __syncwarp();
    const bool plain = !p.rounding.stochastic;  // (d_values has no scales)
    // dv_i = sum_s p_i do_s + ds_i (r_i w_s - coef_i v_i) = sum_s (p_i do_s + (ds_i r_i) w_s) - (sum_s ds_i coef_i) v_i:
    // two fmaf per entry and layer, layers in order, and one per entry for the v_i term; IB sources per pass
#pragma unroll
    for (int ib = 0; ib < NMAX; ib += IB) {
      if (ib >= N) break;
#pragma unroll
      for (int kk = 0; kk < K; ++kk) {
        if (at.entry(kk) >= D) continue;
        float dv[IB][8], cx[IB];
#pragma unroll
        for (int j = 0; j < IB; ++j) {
          cx[j] = 0.f;
#pragma unroll
          for (int k = 0; k < 8; ++k) dv[j][k] = 0.f;
        }
        for (int s = 0; s < S; ++s) {
          float w[8], g[8];
          query(s, at.entry(kk), w);
          grad8(s, kk, g);
#pragma unroll
          for (int j = 0; j < IB; ++j) {
            const int i = ib + j;
            if (i >= N) continue;
            const float pi = prob[s * NMAX + i], bw = ds[s * NMAX + i];
            cx[j] += coef[s * NMAX + i];
#pragma unroll
            for (int k = 0; k < 8; ++k) dv[j][k] = fmaf(pi, g[k], fmaf(bw, w[k], dv[j][k]));
          }
        }
#pragma unroll
        for (int j = 0; j < IB; ++j) {
#pragma unroll
          for (int k = 0; k < 8; ++k) dv[j][k] = fmaf(-cx[j], x[ib + j][kk][k], dv[j][k]);
        }
        if (!active) continue;
#pragma unroll
        for (int j = 0; j < IB; ++j) {
          const int i = ib + j;
          if (i >= N) continue;
          const std::int64_t vrow = static_cast<std::int64_t>(i) * BT + bt;
          if (plain) {
            store8(static_cast<unsigned char*>(p.d_values.data) + vrow * D * (gtype == Elem::f32 ? 4 : 2), gtype, at.entry(kk), dv[j]);
          } else {
#pragma unroll
            for (int k = 0; k < 8; ++k) {
              const std::int64_t e = vrow * D + at.entry(kk) + k;
              store_elem(p.d_values.data, gtype, e, dv[j][k], p.rounding, p.d_values_stream, static_cast<std::uint64_t>(e));
            }
          }
        }
      }
    }
  }
  if (stages > 0) cp_async_wait<0>();
  bits |= nonfinite_bit(bad_v, kNonfiniteValues) | nonfinite_bit(bad_w, kNonfiniteQueries) | nonfinite_bit(bad_g, kNonfiniteDo);
  report_nonfinite(p.nonfinite, bits);
}

// Entries c, c + 1 of a row (c even, the row 8-byte aligned) as fp32.
__device__ inline void load2(const void* row, Elem type, int c, float (&x)[2]) {
  if (type == Elem::f32) {
    const float2 f = *reinterpret_cast<const float2*>(static_cast<const float*>(row) + c);
    x[0] = f.x, x[1] = f.y;
    return;
  }
  const std::uint32_t w = *reinterpret_cast<const std::uint32_t*>(static_cast<const std::uint16_t*>(row) + c);
  const float2 f = type == Elem::bf16 ? Storage<__nv_bfloat16>::unpack(w) : Storage<__half>::unpack(w);
  x[0] = f.x, x[1] = f.y;
}

constexpr int kDwThreads = 256;  // a thread owns 2 columns: a block 512
constexpr int kDwMaxN = kLaneRowChunks;

// grid (chunks, ceil(D / 512)); shared: the chunk's coefficients [64][S][N]. The chunk's partial of dw
// (phase 1): dw_phase1[chunk][s][c] = sum over the chunk's tokens in order, sources in order, of
// coef[t][s][i] v_i[t][c] (cpu.attnres's order). A token's N rows load together (the loop over
// sources is unrolled), so a warp keeps N loads in flight.
// (4 blocks per SM, 64 registers: the loads in flight, not the arithmetic, set its speed)
__global__ void __launch_bounds__(kDwThreads, 4) attnres_phase1_dw_kernel(const AttnResParams p) {
  extern __shared__ float coef[];
  const int S = p.layers, N = p.sources, D = p.dim, BT = p.batch * p.tokens, chunk = blockIdx.x;
  const int first = chunk * kAttnResChunk, end = min(BT, first + kAttnResChunk);
  const float* coefs = p.dw_phase1 + static_cast<std::int64_t>(attnres_chunk_count(BT)) * S * D;
  for (int j = threadIdx.x; j < (end - first) * S * N; j += kDwThreads) coef[j] = coefs[static_cast<std::int64_t>(first) * S * N + j];
  __syncthreads();
  const int c = 2 * (blockIdx.y * kDwThreads + threadIdx.x);
  if (c >= D) return;
  float acc[kLaneMaxS][2];
#pragma unroll
  for (int s = 0; s < kLaneMaxS; ++s) acc[s][0] = acc[s][1] = 0.f;
  // (4 tokens' loads at once measured 13 % slower: 128 registers, half the blocks per SM)
  for (int bt = first; bt < end; ++bt) {
    const int b = bt / p.tokens, t = bt % p.tokens;
    float v[kDwMaxN][2];
#pragma unroll
    for (int i = 0; i < kDwMaxN; ++i) {
      if (i < N) load2(row_ptr(p.values, i, b, t), p.values.type, c, v[i]);
    }
    const float* k = coef + (bt - first) * S * N;
#pragma unroll
    for (int i = 0; i < kDwMaxN; ++i) {
      if (i >= N) break;
#pragma unroll
      for (int s = 0; s < kLaneMaxS; ++s) {
        if (s < S) acc[s][0] += k[s * N + i] * v[i][0], acc[s][1] += k[s * N + i] * v[i][1];
      }
    }
  }
  float* out = p.dw_phase1 + static_cast<std::int64_t>(chunk) * S * D;
#pragma unroll
  for (int s = 0; s < kLaneMaxS; ++s) {
    if (s < S) out[s * D + c] = acc[s][0], out[s * D + c + 1] = acc[s][1];
  }
}

// --- phase 2 ------------------------------------------------------------------------------------------
// A (layer, token) row per group of W warps, K chunks per lane. Shared: per warp `part` [4], then
// store_lane_row's kLaneWarps floats.
template <int K>
__device__ inline void load_row8(const AttnResIn& x, int i, int b, int t, const LanePlace& at, int D, bool active, float (&v)[K][8],
                                 float& bad) {
  const float scale = x.scale && active ? x.scale[i * x.scale_outer + b * x.scale_batch + t * x.scale_token] : 1.f;
#pragma unroll
  for (int kk = 0; kk < K; ++kk) {
    if (active && at.entry(kk) < D) {
      load8(row_ptr(x, i, b, t), x.type, at.entry(kk), v[kk]);
      flag_nonfinite(bad, v[kk]);
#pragma unroll
      for (int k = 0; k < 8; ++k) v[kk][k] *= scale;  // (exact: a power of two)
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) v[kk][k] = 0.f;
    }
  }
}

// r_u and s_u = r_u (w . u) of a row the group holds (every lane gets them); `part` as above.
template <int K>
__device__ inline void partial_logit(const AttnResParams& p, int s, const float (&u)[K][8], const LanePlace& at, float* smem, float extra_in,
                                     bool check_w, float& bad_w, float& ru, float& su, float& extra) {
  const int D = p.dim;
  float sums[4] = {0.f, 0.f, extra_in, 0.f};  // ||u||^2, w . u, (the backward's delta), unused
#pragma unroll
  for (int kk = 0; kk < K; ++kk) {
    if (at.entry(kk) >= D) continue;
    float w[8];
    load8(row_ptr(p.queries, 0, 0, s), p.queries.type, at.entry(kk), w);
    if (check_w) flag_nonfinite(bad_w, w);
    sums[0] = dot8(sums[0], u[kk], u[kk]), sums[1] = dot8(sums[1], w, u[kk]);
  }
  warp_sums_to(sums, at.lane, smem + at.warp() * 4);
  group_sync(at.warps);
  ru = rms_inverse(group_total(smem, 4, at, 0), D, p.eps);
  su = ru * group_total(smem, 4, at, 1);
  extra = group_total(smem, 4, at, 2);
  group_sync(at.warps);  // the sums' slots are free again
}

// (K <= 2: 4 blocks per SM, 64 registers, for more rows' loads in flight)
template <int K>
constexpr int kPhase2BlocksPerSm = K <= 2 ? 4 : 2;

// grid (ceil(S B T / (8 / W))); shared: per warp 4 floats, then kLaneWarps
template <int K>
__global__ void __launch_bounds__(32 * kLaneWarps, kPhase2BlocksPerSm<K>) attnres_phase2_forward_lane_kernel(const AttnResParams p, int W) {
  extern __shared__ float smem[];
  const int D = p.dim, BT = p.batch * p.tokens;
  const LanePlace at(W);
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * at.groups() + at.group;
  const bool active = row < static_cast<std::int64_t>(p.layers) * BT;
  const int s = active ? static_cast<int>(row / BT) : 0, bt = active ? static_cast<int>(row % BT) : 0;
  const int b = bt / p.tokens, t = bt % p.tokens;
  float u[K][8], o[K][8], bad_u = 0.f, bad_o = 0.f, bad_w = 0.f;
  load_row8(p.partial, s, b, t, at, D, active, u, bad_u);
  load_row8(p.o_in, s, b, t, at, D, active, o, bad_o);  // phase 1's stored o with its scales
  float ru, su, unused;
  partial_logit(p, s, u, at, smem, 0.f, active && bt == 0, bad_w, ru, su, unused);  // (the rows of token 0 read every query)
  const float lse = active ? p.lse_in[row] : 0.f;
  report_nonfinite(p.nonfinite, nonfinite_bit(bad_u, kNonfinitePartial) | nonfinite_bit(bad_o, kNonfiniteO) |
                                    nonfinite_bit(bad_w, kNonfiniteQueries) | (isfinite(lse) ? 0u : kNonfiniteLse));
  const float beta = active ? sigmoid_of_difference(su, lse) : 0.f;
#pragma unroll
  for (int kk = 0; kk < K; ++kk) {
#pragma unroll
    for (int k = 0; k < 8; ++k) o[kk][k] = o[kk][k] + beta * (u[kk][k] - o[kk][k]);
  }
  store_lane_row<K>(p.h, row, D, o, at, active, p.rounding, p.h_stream, smem + 4 * kLaneWarps);
}

// grid as the forward: do, dlse, du, and the dw coefficient ds_u r_u ([S][B T] after the chunk partials
// in dw_phase2)
template <int K>
__global__ void __launch_bounds__(32 * kLaneWarps, kPhase2BlocksPerSm<K>) attnres_phase2_backward_lane_kernel(const AttnResParams p, int W) {
  extern __shared__ float smem[];
  const int D = p.dim, BT = p.batch * p.tokens;
  const LanePlace at(W);
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * at.groups() + at.group;
  const bool active = row < static_cast<std::int64_t>(p.layers) * BT;
  const int s = active ? static_cast<int>(row / BT) : 0, bt = active ? static_cast<int>(row % BT) : 0;
  const int b = bt / p.tokens, t = bt % p.tokens;
  float u[K][8], g[K][8], bad_u = 0.f, bad_g = 0.f, bad_o = 0.f, bad_w = 0.f;
  load_row8(p.partial, s, b, t, at, D, active, u, bad_u);
  load_row8(p.dh, s, b, t, at, D, active, g, bad_g);
  float delta = 0.f;
  {
    float o[K][8];
    load_row8(p.o_in, s, b, t, at, D, active, o, bad_o);
#pragma unroll
    for (int kk = 0; kk < K; ++kk) {
#pragma unroll
      for (int k = 0; k < 8; ++k) delta = fmaf(g[kk][k], o[kk][k] - u[kk][k], delta);
    }
  }
  float ru, su;
  partial_logit(p, s, u, at, smem, delta, active && bt == 0, bad_w, ru, su, delta);
  const float lse = active ? p.lse_in[row] : 0.f;
  report_nonfinite(p.nonfinite, nonfinite_bit(bad_u, kNonfinitePartial) | nonfinite_bit(bad_g, kNonfiniteDh) | nonfinite_bit(bad_o, kNonfiniteO) |
                                    nonfinite_bit(bad_w, kNonfiniteQueries) | (isfinite(lse) ? 0u : kNonfiniteLse));
  // 1 - beta as a sigmoid of its own (cpu.attnres: subtraction loses every digit when beta rounds to 1)
  const float beta = sigmoid_of_difference(su, lse), one_minus_beta = sigmoid_of_difference(lse, su);
  const float dl = beta * one_minus_beta * delta, dsu = -dl;
  if (active && at.in_group == 0 && at.lane == 0) {
    p.d_lse[row] = dl;
    p.dw_phase2[static_cast<std::int64_t>(attnres_chunk_count(BT)) * p.layers * D + row] = dsu * ru;
  }
  const float coef = su * ru * ru / static_cast<float>(D);
  float dout[K][8], du[K][8];
#pragma unroll
  for (int kk = 0; kk < K; ++kk) {
    float w[8] = {};
    if (at.entry(kk) < D) load8(row_ptr(p.queries, 0, 0, s), p.queries.type, at.entry(kk), w);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      dout[kk][k] = one_minus_beta * g[kk][k];
      du[kk][k] = beta * g[kk][k] + dsu * (ru * w[k] - coef * u[kk][k]);
    }
  }
  const AttnResOut d_o{p.d_o, p.d_partial.type, nullptr};
  store_lane_row<K>(d_o, row, D, dout, at, active, p.rounding, p.d_o_stream, smem + 4 * kLaneWarps);
  store_lane_row<K>(p.d_partial, row, D, du, at, active, p.rounding, p.d_partial_stream, smem + 4 * kLaneWarps);
}

// grid (chunks, ceil(D / 512), S): dw_phase2[chunk][s][c] = sum over the chunk's tokens in order of
// coef[s][t] u_s[t][c]; eight tokens' loads in flight per thread
__global__ void __launch_bounds__(kDwThreads) attnres_phase2_dw_kernel(const AttnResParams p) {
  const int D = p.dim, BT = p.batch * p.tokens, chunk = blockIdx.x, s = blockIdx.z;
  const int c = 2 * (blockIdx.y * kDwThreads + threadIdx.x);
  if (c >= D) return;
  const float* coefs = p.dw_phase2 + static_cast<std::int64_t>(attnres_chunk_count(BT)) * p.layers * D + static_cast<std::int64_t>(s) * BT;
  float acc[2] = {0.f, 0.f};
  const int first = chunk * kAttnResChunk, end = min(BT, first + kAttnResChunk);
  for (int bt0 = first; bt0 < end; bt0 += 8) {
    float u[8][2];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int bt = bt0 + j;
      if (bt < end) load2(row_ptr(p.partial, s, bt / p.tokens, bt % p.tokens), p.partial.type, c, u[j]);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (bt0 + j < end) acc[0] += coefs[bt0 + j] * u[j][0], acc[1] += coefs[bt0 + j] * u[j][1];
    }
  }
  float* out = p.dw_phase2 + (static_cast<std::int64_t>(chunk) * p.layers + s) * D;
  out[c] = acc[0], out[c + 1] = acc[1];
}

}  // namespace fc::kernels::cuda
