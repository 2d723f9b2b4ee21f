// Hopper's asynchronous matrix machinery, as thin wrappers over PTX (sm_90a): the bulk tensor copy
// engine (TMA) completing on an mbarrier, and warpgroup MMA (wgmma) reading bf16 tiles from shared
// memory laid out with the 128-byte swizzle that TMA writes. The first layer of cuda.fa3 (issue 11);
// kernels/cuda/tests/hopper_primitives_test.cpp checks it on one tile before anything is built on it.
//
// Layout conventions (PTX ISA, "Matrix Descriptor" and "Tensor Map" sections):
//   - an operand tile read by wgmma_descriptor_sw128 is K-major: each row holds 64 bf16 of K, 128 bytes, the
//     128-byte swizzle's span (wgmma_descriptor_sw128_mn below reads the MN-major form: V for O = P V);
//     8 rows (1024 bytes) are one swizzle atom, so a tile must start 1024-byte aligned;
//   - a descriptor holds (start address >> 4) in bits 0-13, the leading byte offset >> 4 in 16-29
//     (unused for swizzled K-major tiles whose K step stays inside a row), the stride byte offset >> 4
//     in 32-45 (1024: from one 8-row atom to the next), and the swizzle mode in 62-63 (1: 128 bytes);
//   - one k16 step is 32 bytes further along the row: the descriptor's address field + 2 (the hardware
//     applies the swizzle to the computed address, as CUTLASS and FA3 rely on);
//   - the m64nNk16 f32 accumulator of a warpgroup: warp w holds rows 16 w .. 16 w + 15; lane l holds, for
//     j < N / 8, d[4 j], d[4 j + 1] at row 16 w + l / 4, columns 8 j + 2 (l % 4) + {0, 1}, and d[4 j + 2],
//     d[4 j + 3] eight rows lower (mma.sync's C fragment, repeated along N).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace fc::kernels::cuda::hopper {

__device__ inline std::uint32_t smem_address(const void* p) { return static_cast<std::uint32_t>(__cvta_generic_to_shared(p)); }

// --- mbarrier -------------------------------------------------------------------------------------
__device__ inline void mbarrier_init(std::uint64_t* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(arrivals) : "memory");
}
// Makes the initialisation visible to the copy engine (the async proxy) before its first use.
__device__ inline void mbarrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// One arrival that also announces `bytes` of transactions (the TMA copies that complete on it).
__device__ inline void mbarrier_arrive_expect_tx(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes) : "memory");
}
// One plain arrival (no transactions): a consumer releasing a buffer to the producer.
__device__ inline void mbarrier_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
}
// Waits until the phase with parity `phase` has completed.
__device__ inline void mbarrier_wait(std::uint64_t* bar, unsigned phase) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_address(bar)),
      "r"(phase)
      : "memory");
}

// --- named barriers (bar 0 is __syncthreads') -------------------------------------------------------
// Waits until `threads` threads (a multiple of 32) have arrived at barrier `id`, this one included.
__device__ inline void named_barrier_sync(int id, int threads) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory"); }
// A float read from shared memory that the compiler may neither cache nor move above a barrier before it.
__device__ inline float ld_volatile_shared(const float* p) {
  float x;
  asm volatile("ld.volatile.shared.f32 %0, [%1];" : "=f"(x) : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p))) : "memory");
  return x;
}
// Arrives at barrier `id` without waiting (the other side of a named_barrier_sync).
__device__ inline void named_barrier_arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory"); }

// --- register reallocation between warpgroups ------------------------------------------------------------
// The executing warpgroup gives registers back to the CTA's pool (dec) or takes them (inc) to `Count` per
// thread (24..256, a multiple of 8): a producer warpgroup that only issues copies needs few, the consumer
// warpgroups' accumulators many. ptxas allocates the code after it under the new count.
template <int Count>
__device__ inline void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Count));
}
template <int Count>
__device__ inline void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Count));
}

// --- values the warp shares ----------------------------------------------------------------------
// x as lane 0 holds it, for a value every lane of the warp already holds (a warpgroup's index, a ring position).
// ptxas cannot tell that threadIdx.x / 128 or a loop-carried index is warp-uniform; through the shuffle it can, and
// the shared-memory addresses and wgmma descriptors built from the value stay on the uniform datapath instead of
// being built in vector registers and moved (R2UR) before every wgmma (kernels/cuda/NOTES.md: "The warp-group index",
// "The persistent forward's step"; CUTLASS's canonical_warp_group_idx). Every lane of the warp must call it.
__device__ inline int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

// --- TMA ------------------------------------------------------------------------------------------
// The box at coordinates (c0 innermost, c1) of the tensor map into shared memory at dst, completing
// on bar. The map lives in kernel parameter space (a __grid_constant__ CUtensorMap).
__device__ inline void tma_load_2d(void* dst, const CUtensorMap* map, std::uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_address(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// The box at (c0 = d, c1 = row, c2 = head, c3 = batch) of a 4D map (make_tensor_map_sw128_bhnd).
__device__ inline void tma_load_4d(void* dst, const CUtensorMap* map, std::uint64_t* bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_address(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// A tile of the 4D map into L2 only (no shared memory, no barrier): a later load of it hits L2 instead of HBM.
__device__ inline void tma_prefetch_l2_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];" ::"l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1),
               "r"(c2), "r"(c3)
               : "memory");
}

// --- wgmma ----------------------------------------------------------------------------------------
// The descriptor of a K-major bf16 tile with the 128-byte swizzle, starting at p (1024-byte aligned).
__device__ inline std::uint64_t wgmma_descriptor_sw128(const void* p) {
  std::uint64_t d = (smem_address(p) & 0x3ffffu) >> 4;
  d |= std::uint64_t{1} << 16;           // leading byte offset 16 (unused here)
  d |= std::uint64_t{1024 >> 4} << 32;   // stride byte offset: one 8-row atom
  d |= std::uint64_t{1} << 62;           // 128-byte swizzle
  return d;
}
// The descriptor k16 steps further along K (32 bytes per step).
__device__ inline std::uint64_t wgmma_descriptor_advance(std::uint64_t d, int k16) { return d + static_cast<std::uint64_t>(2 * k16); }

__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int Pending>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}

// d (+)= A B for a 64 x 16 A and a 16 x 64 B, both 16-bit in shared memory by descriptor, fp32 accumulators
// (j < 8); accumulate = 0 overwrites d. Issued by all 128 threads of a warpgroup. Mn false: both K-major (d = A B^T
// of two row-major tiles: the probe's, and the backward's S^T = K Q^T and dP^T = V dO^T over 64 queries); Mn true:
// both MN-major (imm-trans-a = imm-trans-b = 1; descriptors by wgmma_descriptor_sw128_mn, one k16 step by
// wgmma_descriptor_advance_mn): the backward's dQ += dS K, with dS^T stored [key][query] and K's tile [key][d].
#define FC_WGMMA_SS_64(TYPE, TRANS)                                                                                       \
  asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %34, 0;\n"                                                          \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, acc, 1, 1, " TRANS ";\n}\n"  \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                                                             \
               : "l"(a), "l"(b), "r"(accumulate))
template <bool Fp16, bool Mn = false>
__device__ inline void wgmma_m64n64k16_ss(float (&d)[32], std::uint64_t a, std::uint64_t b, int accumulate) {
  if constexpr (Fp16 && Mn) {
    FC_WGMMA_SS_64("f16.f16", "1, 1");
  } else if constexpr (Fp16) {
    FC_WGMMA_SS_64("f16.f16", "0, 0");
  } else if constexpr (Mn) {
    FC_WGMMA_SS_64("bf16.bf16", "1, 1");
  } else {
    FC_WGMMA_SS_64("bf16.bf16", "0, 0");
  }
}
#undef FC_WGMMA_SS_64
__device__ inline void wgmma_m64n64k16_bf16(float (&d)[32], std::uint64_t a, std::uint64_t b, int accumulate) {
  wgmma_m64n64k16_ss<false>(d, a, b, accumulate);
}

// --- the second product of attention: O += P V -----------------------------------------------------
// V's tile for O = P V is stored [key][d] (d contiguous, as TMA copies it from a [key, d] tensor): B (k = key,
// n = d) is MN-major, which wgmma reads with imm-trans-b = 1 from a descriptor of the MN-major canonical
// layout with the 128-byte swizzle: 64 n (128 bytes) per k-row, 8 k-rows per 1024-byte atom (stride byte
// offset 1024, from one 8-row group to the next along k), and `n_block_bytes` from one 64-wide n block to
// the next (leading byte offset: the two TMA boxes of a d = 128 tile). One k16 step is 16 rows further:
// + 2048 bytes. (PTX ISA, "Shared Memory Matrix Layout", MN-major; run by the probe before any kernel uses it.)
__device__ inline std::uint64_t wgmma_descriptor_sw128_mn(const void* p, unsigned n_block_bytes) {
  std::uint64_t d = (smem_address(p) & 0x3ffffu) >> 4;
  d |= std::uint64_t{(n_block_bytes >> 4) & 0x3fffu} << 16;  // leading byte offset: the next 64-wide n block
  d |= std::uint64_t{1024 >> 4} << 32;                       // stride byte offset: the next 8 k-rows
  d |= std::uint64_t{1} << 62;                               // 128-byte swizzle
  return d;
}
__device__ inline std::uint64_t wgmma_descriptor_advance_mn(std::uint64_t d, int k16) { return d + static_cast<std::uint64_t>(128 * k16); }

// A warpgroup's 64-row 16-bit tile (D wide, K-major: boxes of 64 rows x 64 columns, 8 KB apart, each 1024-byte aligned
// with the 128-byte swizzle, TMA's layout) as register A fragments, k16 step k in a[k]: ldmatrix from the tile (row r's
// 16-byte chunk c at chunk c ^ (r % 8)), in mma.sync's A layout, which is wgmma's (Q held for S = Q K^T; Flash Hog's
// held tiles). Steps < D / 16: the first Steps k16 steps only (the persistent forward's half of Q). (Steps is not deduced
// from the array, so an array of another size than the steps asked for does not compile.)
template <int D, int Steps = D / 16>
__device__ inline void load_fragments(std::type_identity_t<std::uint32_t[Steps][4]>& a, const unsigned char* tile, int warp, int lane) {
  static_assert(Steps >= 1 && Steps <= D / 16, "k16 steps of the tile");
  constexpr int kBoxBytes = 64 * 128;  // a box: 64 rows of 64 16-bit entries
  const int m = lane / 8, row = 16 * warp + lane % 8 + 8 * (m % 2);  // ldmatrix x4: matrix m's rows from lanes 8 m ..
#pragma unroll
  for (int k = 0; k < Steps; ++k) {
    const int chunk = 2 * (k % 4) + m / 2;
    const std::uint32_t address = smem_address(tile + (k / 4) * kBoxBytes + row * 128 + ((chunk ^ (row % 8)) << 4));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[k][0]), "=r"(a[k][1]), "=r"(a[k][2]), "=r"(a[k][3])
                 : "r"(address));
  }
}

// d (+)= A B for a 64 x 16 A from registers (per warp w, rows 16 w ..: mma.sync's A fragment, which is the
// accumulator's layout of two adjacent n8 blocks packed to 16-bit pairs: P straight from S's registers) and a
// 16 x N MN-major B by descriptor (trans-b), N = 128 or 64 (V's tile for head dim 128 or 64); the _nt forms below take
// B K-major (trans-b = 0). Issued by all 128 threads of a warpgroup. Fp16: f16 inputs, else bf16; fp32 accumulators
// either way.
#define FC_WGMMA_RS_128(TYPE, TRANS_B)                                                                                     \
  asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %69, 0;\n"                                                        \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, acc, 1, 1, " TRANS_B ";\n}\n"  \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))
template <bool Fp16>
__device__ inline void wgmma_m64n128k16_rs_tn(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b, int accumulate) {
  if constexpr (Fp16) {
    FC_WGMMA_RS_128("f16.f16", "1");
  } else {
    FC_WGMMA_RS_128("bf16.bf16", "1");
  }
}
// The same with B K-major (trans-b = 0, wgmma_descriptor_sw128's tile): d (+)= A B^T of a 64 x 16 A from registers and a
// 128-row [n][k] tile: S = Q K^T over 128 keys with Q's fragments held in registers.
template <bool Fp16>
__device__ inline void wgmma_m64n128k16_rs_nt(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b, int accumulate) {
  if constexpr (Fp16) {
    FC_WGMMA_RS_128("f16.f16", "0");
  } else {
    FC_WGMMA_RS_128("bf16.bf16", "0");
  }
}
#undef FC_WGMMA_RS_128

// The same with N = 256 (O += P V at head dim 256: V's tile as four 64-wide n blocks, MN-major, trans-b = 1), fp32
// accumulators j < 32.
#define FC_WGMMA_RS_256(TYPE)                                                                                              \
  asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %133, 0;\n"                                                       \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, acc, 1, 1, 1;\n}\n"  \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))
template <bool Fp16>
__device__ inline void wgmma_m64n256k16_rs_tn(float (&d)[128], const std::uint32_t (&a)[4], std::uint64_t b, int accumulate) {
  if constexpr (Fp16) {
    FC_WGMMA_RS_256("f16.f16");
  } else {
    FC_WGMMA_RS_256("bf16.bf16");
  }
}
#undef FC_WGMMA_RS_256

#define FC_WGMMA_RS_64(TYPE, TRANS_B)                                                                                     \
  asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %37, 0;\n"                                                        \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, acc, 1, 1, " TRANS_B ";\n}\n"  \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))
template <bool Fp16>
__device__ inline void wgmma_m64n64k16_rs_tn(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t b, int accumulate) {
  if constexpr (Fp16) {
    FC_WGMMA_RS_64("f16.f16", "1");
  } else {
    FC_WGMMA_RS_64("bf16.bf16", "1");
  }
}
// The same with B K-major (trans-b = 0, wgmma_descriptor_sw128's tile): d (+)= A B^T of a 64 x 16 A from registers and
// a 64-row [n][k] tile, e.g. S = Q K^T with Q's fragments held in registers (Flash Hog's wgmma passes).
template <bool Fp16>
__device__ inline void wgmma_m64n64k16_rs_nt(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t b, int accumulate) {
  if constexpr (Fp16) {
    FC_WGMMA_RS_64("f16.f16", "0");
  } else {
    FC_WGMMA_RS_64("bf16.bf16", "0");
  }
}
#undef FC_WGMMA_RS_64

// d (+)= A B^T for a 64 x 16 A and a 128 x 16 B, both K-major 16-bit in shared memory by descriptor (S = Q K^T
// with 128 keys), fp32 accumulators in the layout above (j < 16). Issued by all 128 threads of a warpgroup. MnB: B is
// MN-major (imm-trans-b = 1, wgmma_descriptor_sw128_mn's layout) and d (+)= A B: O += P V with P's tile in shared
// memory and V's tile as the register form reads it.
#define FC_WGMMA_SS_128(TYPE, TRANS)                                                                                              \
  asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %66, 0;\n"                                                          \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, acc, 1, 1, " TRANS ";\n}\n"  \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                                             \
               : "l"(a), "l"(b), "r"(accumulate))
template <bool Fp16, bool MnB = false>
__device__ inline void wgmma_m64n128k16_ss(float (&d)[64], std::uint64_t a, std::uint64_t b, int accumulate) {
  if constexpr (Fp16 && MnB) {
    FC_WGMMA_SS_128("f16.f16", "0, 1");
  } else if constexpr (Fp16) {
    FC_WGMMA_SS_128("f16.f16", "0, 0");
  } else if constexpr (MnB) {
    FC_WGMMA_SS_128("bf16.bf16", "0, 1");
  } else {
    FC_WGMMA_SS_128("bf16.bf16", "0, 0");
  }
}
#undef FC_WGMMA_SS_128

// The same with a 176 x 16 B: S = Q K^T over key tiles of 176 (FA3's tile for 16-bit d = 128 without a mask), fp32
// accumulators j < 22.
#define FC_WGMMA_SS_176(TYPE) \
  asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %90, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n176k16.f32." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87}, %88, %89, acc, 1, 1, 0, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]) \
               : "l"(a), "l"(b), "r"(accumulate))
template <bool Fp16>
__device__ inline void wgmma_m64n176k16_ss(float (&d)[88], std::uint64_t a, std::uint64_t b, int accumulate) {
  if constexpr (Fp16) {
    FC_WGMMA_SS_176("f16.f16");
  } else {
    FC_WGMMA_SS_176("bf16.bf16");
  }
}
#undef FC_WGMMA_SS_176

// Orders this thread's earlier generic-proxy writes to shared memory (st.shared) before later async-proxy reads
// of it (wgmma's descriptors, TMA stores): a tile written from registers and then read by wgmma needs it.
__device__ inline void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// --- TMA reductions (shared -> global) ---------------------------------------------------------------------
// global[box at (c0, c1, c2, c3) of `map`] += the box in shared memory at src (laid out as the map's swizzle
// writes it; 1024-byte aligned for the 128-byte swizzle), elementwise, in this thread's current bulk group (closed
// by bulk_commit). Entries outside the tensor are skipped. The adds are atomic per element; their order between CTAs varies.
// The source must be written and fenced (fence_proxy_async_shared) before, and not rewritten before
// bulk_wait_read<N> says its reads are done.
__device__ inline void tma_reduce_add_4d(const CUtensorMap* map, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(reinterpret_cast<std::uint64_t>(map)),
      "r"(smem_address(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// global[box at (c0, c1, c2, c3) of `map`] = the box in shared memory at src (the map's swizzled layout, 1024-byte
// aligned), in this thread's current bulk group; entries outside the tensor are not written (a tile's rows past the
// end). The same rules for the source as tma_reduce_add_4d's.
__device__ inline void tma_store_4d(const CUtensorMap* map, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(reinterpret_cast<std::uint64_t>(map)),
               "r"(smem_address(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
// Closes this thread's current bulk group (the reductions or stores issued since the last commit).
__device__ inline void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most `Pending` of this thread's bulk groups still read their shared source.
template <int Pending>
__device__ inline void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(Pending) : "memory");
}
// Waits until at most `Pending` of this thread's bulk groups (the latest committed) are incomplete: every earlier
// group's global writes are done.
template <int Pending>
__device__ inline void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(Pending) : "memory");
}
// Waits until every bulk group of this thread is complete (its global writes done).
__device__ inline void bulk_wait_all() { bulk_wait<0>(); }

}  // namespace fc::kernels::cuda::hopper
