// Portability layer for code that runs on both the host and a CUDA device: the FC_HD qualifier and
// bit casts between floating-point values and their integer encodings.
//
// The rounding engine, Philox and the storage types are compiled by g++ for the CPU backends and by
// nvcc for the CUDA kernels; one source guarantees that both draw the same random bits and round the
// same way (bit-identical CPU/GPU stochastic rounding depends on it).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FC_HD __host__ __device__
#else
#define FC_HD
#endif

namespace fc {

FC_HD inline std::uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FC_HD inline std::uint64_t bits_of(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FC_HD inline float float_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

FC_HD inline double double_from_bits(std::uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// Index of the highest set bit of a non-zero value (floor(log2 v)).
FC_HD inline int highest_bit(std::uint64_t v) {
#if defined(__CUDA_ARCH__)
  return 63 - __clzll(static_cast<long long>(v));
#else
  return 63 - __builtin_clzll(v);
#endif
}

}  // namespace fc
