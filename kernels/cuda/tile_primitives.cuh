// The warp-level building blocks of the mma.sync kernels (sm_80+ instructions, run on Hopper):
// asynchronous global->shared copies (cp.async, 16 bytes, zero-filled past the end of a tensor),
// swizzled shared-memory tiles, ldmatrix, and the m16n8k16 tensor-core product with fp32
// accumulation. Names follow the PTX ISA; fragment layouts are those of mma.m16n8k16 (PTX ISA,
// "Matrix Fragments for mma.m16n8k16"): with g = lane / 4 and t = lane % 4,
//   A (16 x 16, row-major)  a0: (g, 2t..2t+1)  a1: (g+8, 2t..)  a2: (g, 2t+8..)  a3: (g+8, 2t+8..)
//   B (16 x 8, k x n)       b0: (k 2t..2t+1, n g)  b1: (k 2t+8.., n g)
//   C (16 x 8, fp32)        c0, c1: (g, 2t..2t+1)  c2, c3: (g+8, 2t..2t+1)
// A C fragment pair of two adjacent n-blocks is exactly an A fragment of one k-step: a product's
// output (P, dS) feeds the next product from registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fc::kernels::cuda {

// --- storage types -----------------------------------------------------------------------------

template <class T>
struct Storage;
template <>
struct Storage<__nv_bfloat16> {
  static constexpr bool is_bf16 = true;
  // Two fp32 values rounded to nearest (cvt.rn), packed low = a, high = b.
  __device__ static uint32_t pack(float a, float b) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  __device__ static float2 unpack(uint32_t x) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
  }
  __device__ static float to_float(uint16_t x) { return __uint_as_float(static_cast<uint32_t>(x) << 16); }
};
template <>
struct Storage<__half> {
  static constexpr bool is_bf16 = false;
  __device__ static uint32_t pack(float a, float b) {
    const __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  __device__ static float2 unpack(uint32_t x) { return __half22float2(*reinterpret_cast<const __half2*>(&x)); }
  __device__ static float to_float(uint16_t x) { return __half2float(__ushort_as_half(x)); }
};

// --- cp.async --------------------------------------------------------------------------------------

// 16 bytes global -> shared; fewer than 16 source bytes (0 for a row past the end) fill the rest with
// zeros, so tails never read out of bounds and never leave stale data in a tile.
__device__ inline void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
// 4 bytes global -> shared (through L1: cp.async.ca, the only form of sizes below 16); src_bytes 0
// writes a zero.
__device__ inline void cp_async_4(void* smem, const void* gmem, int src_bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// --- swizzled tiles --------------------------------------------------------------------------------

// A [Rows, Cols] tile of 16-bit values in shared memory, rows of Cols * 2 bytes. The 16-byte chunk c of
// row r lives at chunk c ^ (r % 8): the 8 rows an ldmatrix reads at one logical chunk land in 8
// different bank groups (without it, rows of 128 or 256 bytes put them all in one: an 8-way conflict).
// Needs Cols >= 64 (8 chunks a row).
template <int Rows, int Cols>
struct SwizzledTile {
  static_assert(Cols % 64 == 0, "rows of at least 8 chunks of 16 bytes");
  static constexpr int kChunks = Cols / 8;
  __device__ static int chunk_offset(int row, int chunk) { return row * Cols + ((chunk ^ (row & 7)) * 8); }
  // Element offset of (row, col) for col a multiple of 8 (a chunk start).
  __device__ static int offset(int row, int col) { return chunk_offset(row, col / 8); }
  // ldmatrix addresses in two parts, so the inner loops pay one XOR and one add per fragment instead
  // of the whole swizzle: the lane's part (row lr, chunk lc < 8) once, then the fragment's origin
  // (row0 a multiple of 8, col0 a multiple of 8 whose chunk bits are disjoint from lc's), by
  //   offset(row0 + lr, col0 + 8 lc) = (lane_offset(lr, lc) ^ col0) + row0 Cols:
  // row0 leaves row % 8 and so the swizzle alone, and (lc | C) ^ s = (lc ^ s) ^ C when lc & C = 0
  // (C = col0 / 8); col0 < Cols never reaches the row bits of lr Cols.
  __device__ static int lane_offset(int lr, int lc) { return lr * Cols + ((lc ^ (lr & 7)) * 8); }
  __device__ static int fragment_offset(int lane_off, int row0, int col0) { return (lane_off ^ col0) + row0 * Cols; }
};

// A [Rows, Cols] tile with each row padded by 16 bytes: rows of Cols * 2 + 16 bytes put the 8 rows an
// ldmatrix reads in 8 different 16-byte bank groups for any Cols a multiple of 8 (narrow tiles, where
// the XOR swizzle has too few chunks). Any col, not only chunk starts.
template <int Rows, int Cols>
struct PaddedTile {
  static_assert(Cols % 8 == 0, "rows of whole 16-byte chunks");
  static constexpr int kStride = Cols + 8;
  static constexpr int kElements = Rows * kStride;
  __device__ static int offset(int row, int col) { return row * kStride + col; }
  __device__ static int lane_offset(int lr, int lc) { return lr * kStride + lc * 8; }
  __device__ static int fragment_offset(int lane_off, int row0, int col0) { return lane_off + row0 * kStride + col0; }
};

// A thread's share of loading [Rows, Cols] tiles of one strided global tensor into swizzled tiles, with
// all threads of the block. Thread x copies chunk x % kChunks of rows x / kChunks + p R (R = Threads /
// kChunks rows per pass, a multiple of 8): its swizzle (row % 8) is the same in every pass. The
// addresses that do not change between tiles are computed once, when the loader is made, so a tile
// costs per pass one 64-bit add, one compare and the cp.async (the loop of a kernel keeps its loaders).
template <int Rows, int Cols, int Threads, class T>
struct TileLoader {
  using Tile = SwizzledTile<Rows, Cols>;
  static constexpr int kRowsPerPass = Threads / Tile::kChunks;
  static_assert(Threads % Tile::kChunks == 0 && kRowsPerPass % 8 == 0 && Rows % kRowsPerPass == 0,
                "whole rows per pass, a multiple of 8 (the swizzle period)");
  const T* src;         // this thread's chunk in its first row of a tile at row 0
  int64_t row_stride;   // elements between rows
  int dst;              // element offset of its chunk in the tile
  int row;              // its first row within the tile

  __device__ TileLoader(const T* base, int64_t stride) : row_stride(stride) {
    const int c = threadIdx.x % Tile::kChunks;
    row = threadIdx.x / Tile::kChunks;
    src = base + row * stride + c * 8;
    dst = Tile::chunk_offset(row, c);
  }
  // Rows [row0, row0 + Rows) of the tensor at base + offset (elements; e.g. another head) into tile;
  // rows at or past n_rows become zeros.
  __device__ void load(T* tile, int row0, int n_rows, int64_t offset = 0) const {
    const T* from = src + offset + row0 * row_stride;
    const T* row_zero = src - row * row_stride;  // a valid address to name when nothing is read (row 0)
    const int64_t pass_stride = kRowsPerPass * row_stride;
#pragma unroll
    for (int pass = 0; pass < Rows / kRowsPerPass; ++pass) {
      const bool inside = row0 + row + pass * kRowsPerPass < n_rows;
      cp_async_16(tile + dst + pass * kRowsPerPass * Cols, inside ? from : row_zero, inside ? 16 : 0);
      from += pass_stride;
    }
  }
};

// One tile, loaded once (where the loader would not be reused).
template <int Rows, int Cols, int Threads, class T>
__device__ inline void load_tile_async(T* tile, const T* base, int64_t stride, int row0, int n_rows) {
  TileLoader<Rows, Cols, Threads, T>(base, stride).load(tile, row0, n_rows);
}

// --- ldmatrix ------------------------------------------------------------------------------------

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// The fragment loads below need (SwizzledTile::fragment_offset) row0 a multiple of 8 and col0 a
// multiple of 16 (load_a, load_a_trans's row0, load_b_kn) or 32 (load_b_nk's k0): every caller steps
// by whole fragments.

// An A fragment (16 x 16 at rows row0.., cols col0..) of a row-major swizzled tile.
template <class Tile, class T>
__device__ inline void load_a(uint32_t (&a)[4], const T* tile, int row0, int col0) {
  const int lane = threadIdx.x % 32, m = lane / 8;
  ldmatrix_x4(a, tile + Tile::fragment_offset(Tile::lane_offset(lane % 8 + (m % 2) * 8, m / 2), row0, col0));
}
// An A fragment (16 x 16 at rows row0.., cols col0..) of A stored transposed, [col][row] (e.g. dS from
// a staged dS^T): ldmatrix.trans hands each thread the (row g, cols 2t, 2t + 1) pairs.
template <class Tile, class T>
__device__ inline void load_a_trans(uint32_t (&a)[4], const T* tile, int row0, int col0) {
  const int lane = threadIdx.x % 32, m = lane / 8;
  ldmatrix_x4_trans(a, tile + Tile::fragment_offset(Tile::lane_offset(lane % 8 + (m / 2) * 8, m % 2), col0, row0));
}
// B fragments of two k-steps (k0 and k0 + 16) for the 8 columns n0.. of B, from a tile stored [n][k]
// (B^T row-major, e.g. K for S = Q K^T): {b0, b1} of k-step k0 in r[0..1], of k0 + 16 in r[2..3].
template <class Tile, class T>
__device__ inline void load_b_nk(uint32_t (&b)[4], const T* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4(b, tile + Tile::fragment_offset(Tile::lane_offset(lane % 8, lane / 8), n0, k0));
}
// B fragments of one k-step (k0..k0+15) for two n-blocks (n0 and n0 + 8), from a tile stored [k][n]
// (e.g. V for O = P V): {b0, b1} of n-block n0 in r[0..1], of n0 + 8 in r[2..3].
template <class Tile, class T>
__device__ inline void load_b_kn(uint32_t (&b)[4], const T* tile, int k0, int n0) {
  const int lane = threadIdx.x % 32, m = lane / 8;
  ldmatrix_x4_trans(b, tile + Tile::fragment_offset(Tile::lane_offset(lane % 8 + (m % 2) * 8, m / 2), k0, n0));
}

// --- the tensor-core product ---------------------------------------------------------------------

// c += a b on one m16n8k16 block, 16-bit inputs (exact products), fp32 accumulation.
template <class T>
__device__ inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (Storage<T>::is_bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// The A fragment of k-step kk built from the C fragments of n-blocks 2kk and 2kk + 1 (rounded to T).
template <class T>
__device__ inline void a_from_c(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = Storage<T>::pack(c0[0], c0[1]);
  a[1] = Storage<T>::pack(c0[2], c0[3]);
  a[2] = Storage<T>::pack(c1[0], c1[1]);
  a[3] = Storage<T>::pack(c1[2], c1[3]);
}

// 2^x by the special-function unit: one MUFU.EX2 (ex2.approx.ftz, max error 2 ulp of fp32). Results
// below 2^-126 flush to 0, where the CPU's exp2 gives an fp32 subnormal: such a P is below 2^-126 of
// the row's largest, far under any 16-bit rounding of O (fp16 rounds it to 0 anyway; a bf16 subnormal
// P would add < 2^-126 max|V| to O). ex2(-inf) = +0.
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Max and sum over the 4 threads of a quad (the threads that share rows g and g + 8).
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace fc::kernels::cuda
