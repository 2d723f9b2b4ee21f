// Storing fp32 results into 16-bit outputs by the policy's rounding: to nearest (cvt.rn, equal to
// precision/rounding.hpp's RN), or stochastically with the Philox word of each element's logical
// index, through the same round_to the CPU backends use, so cuda.X and cpu.X round bit-identically.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/tile_primitives.cuh"
#include "precision/half.hpp"
#include "precision/philox.hpp"
#include "precision/rounding.hpp"

namespace fc::kernels::cuda {

template <class T>
struct HostFormat;  // the precision/ storage type of a CUDA 16-bit type
template <>
struct HostFormat<__nv_bfloat16> {
  using type = fc::bf16;
};
template <>
struct HostFormat<__half> {
  using type = fc::fp16;
};

// Elements `index` and `index + 1` (index even) of the logical tensor as one 32-bit word, rounded stochastically
// (rounding.stochastic set) by their Philox words.
template <class T>
__device__ inline std::uint32_t pack_pair_stochastic(float a, float b, const OutputRounding& rounding, std::uint32_t stream, std::uint64_t index) {
  using H = typename HostFormat<T>::type;
  // index is even, so both elements lie in one Philox group of 4: one call for the pair
  const Words4 w = RandomStream{rounding.seed, stream}.group(index >> 2);
  const H lo = round_to<H>(a, Rounding::stochastic, w.w[index & 3]);
  const H hi = round_to<H>(b, Rounding::stochastic, w.w[(index + 1) & 3]);
  return static_cast<std::uint32_t>(lo.bits) | (static_cast<std::uint32_t>(hi.bits) << 16);
}

// The same pair rounded by the policy: to nearest, or as pack_pair_stochastic.
template <class T>
__device__ inline std::uint32_t pack_pair(float a, float b, const OutputRounding& rounding, std::uint32_t stream, std::uint64_t index) {
  return rounding.stochastic ? pack_pair_stochastic<T>(a, b, rounding, stream, index) : Storage<T>::pack(a, b);
}

// The same word stored at dst.
template <class T>
__device__ inline void store_pair(T* dst, float a, float b, const OutputRounding& rounding, std::uint32_t stream, std::uint64_t index) {
  *reinterpret_cast<std::uint32_t*>(dst) = pack_pair<T>(a, b, rounding, stream, index);
}

}  // namespace fc::kernels::cuda
