// The Hopper primitives under cuda.fa3 (kernels/cuda/hopper/): TMA into 128-byte-swizzled shared
// memory and warpgroup MMA on it, on one 64 x 64 x 64 tile (label `gpu`; skipped without a device of
// compute capability 9.0 or later, with the reason).
//   - C = I B^T must be B^T bit for bit: any mistake in the swizzle, the descriptors, the K steps or the
//     accumulator layout moves or mixes entries;
//   - C = A B^T for random bf16 A, B against a double reference: products of bf16 values are exact in
//     fp32 and the 64-term sums round at most 63 times, so |C - ref| <= 64 u_fp32 sum_k |a_ik b_jk|;
//   - FA3's second product with cuda.fa3's operands, C = A V with A [64, 128] from registers and V
//     [128, 128] read as an MN-major B (the transposed-B descriptor, two 64-wide boxes of 128 rows): [I 0] V
//     must be V's first 64 rows bit for bit, and random A V meets the bound with 128 terms (128 u_fp32;
//     the random case also catches a transposed A fragment, which the symmetric I cannot).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/hopper/tile_probe.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"
#include "precision/half.hpp"
#include "precision/rounding.hpp"

namespace fc::kernels::cuda {
namespace {

std::vector<float> product_on_gpu(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  void *da = nullptr, *db = nullptr;
  float* dc = nullptr;
  EXPECT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&db, b.size() * 2), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&dc), 64 * 64 * sizeof(float)), cudaSuccess);
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(dc, 0xff, 64 * 64 * sizeof(float));  // NaN: an entry never written shows
  hopper::tile_product_64(da, db, dc, nullptr);
  std::vector<float> c(64 * 64);
  EXPECT_EQ(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(da), cudaFree(db), cudaFree(dc);
  return c;
}

std::vector<float> pv_on_gpu(const std::vector<bf16>& a, const std::vector<bf16>& v) {
  void *da = nullptr, *dv = nullptr;
  float* dc = nullptr;
  EXPECT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&dv, v.size() * 2), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&dc), 64 * 128 * sizeof(float)), cudaSuccess);
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(dc, 0xff, 64 * 128 * sizeof(float));  // NaN: an entry never written shows
  hopper::tile_product_64_pv(da, dv, dc, nullptr);
  std::vector<float> c(64 * 128);
  EXPECT_EQ(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(da), cudaFree(dv), cudaFree(dc);
  return c;
}

TEST(HopperPrimitives, IdentityTimesBTransposedIsExact) {
  REQUIRE_HOPPER();
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  std::vector<bf16> a(64 * 64, round_to<bf16>(0.0f, Rounding::nearest_even)), b(64 * 64);
  for (int i = 0; i < 64; ++i) a[i * 64 + i] = round_to<bf16>(1.0f, Rounding::nearest_even);
  for (bf16& x : b) x = round_to<bf16>(normal(gen), Rounding::nearest_even);
  const std::vector<float> c = product_on_gpu(a, b);
  for (int r = 0; r < 64; ++r) {
    for (int col = 0; col < 64; ++col) ASSERT_EQ(c[r * 64 + col], to_float(b[col * 64 + r])) << "C[" << r << "][" << col << "]";
  }
}

TEST(HopperPrimitives, RandomTileMatchesADoubleReference) {
  REQUIRE_HOPPER();
  std::mt19937 gen(2);
  std::normal_distribution<float> normal;
  std::vector<bf16> a(64 * 64), b(64 * 64);
  for (bf16& x : a) x = round_to<bf16>(normal(gen), Rounding::nearest_even);
  for (bf16& x : b) x = round_to<bf16>(normal(gen), Rounding::nearest_even);
  const std::vector<float> c = product_on_gpu(a, b);
  for (int r = 0; r < 64; ++r) {
    for (int col = 0; col < 64; ++col) {
      double ref = 0, size = 0;
      for (int k = 0; k < 64; ++k) {
        const double p = static_cast<double>(to_float(a[r * 64 + k])) * to_float(b[col * 64 + k]);
        ref += p, size += std::fabs(p);
      }
      ASSERT_LE(std::fabs(c[r * 64 + col] - ref), 64 * std::ldexp(1.0, -24) * size) << "C[" << r << "][" << col << "]";
    }
  }
}

TEST(HopperPrimitives, IdentityTimesVFromAnMnMajorTileIsExact) {
  REQUIRE_HOPPER();
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  std::vector<bf16> a(64 * 128, round_to<bf16>(0.0f, Rounding::nearest_even)), v(128 * 128);
  for (int i = 0; i < 64; ++i) a[i * 128 + i] = round_to<bf16>(1.0f, Rounding::nearest_even);
  for (bf16& x : v) x = round_to<bf16>(normal(gen), Rounding::nearest_even);
  const std::vector<float> c = pv_on_gpu(a, v);
  for (int r = 0; r < 64; ++r) {
    for (int col = 0; col < 128; ++col) ASSERT_EQ(c[r * 128 + col], to_float(v[r * 128 + col])) << "C[" << r << "][" << col << "]";
  }
}

TEST(HopperPrimitives, RandomPTimesVMatchesADoubleReference) {
  REQUIRE_HOPPER();
  std::mt19937 gen(4);
  std::normal_distribution<float> normal;
  std::vector<bf16> a(64 * 128), v(128 * 128);
  for (bf16& x : a) x = round_to<bf16>(normal(gen), Rounding::nearest_even);
  for (bf16& x : v) x = round_to<bf16>(normal(gen), Rounding::nearest_even);
  const std::vector<float> c = pv_on_gpu(a, v);
  for (int r = 0; r < 64; ++r) {
    for (int col = 0; col < 128; ++col) {
      double ref = 0, size = 0;
      for (int k = 0; k < 128; ++k) {
        const double p = static_cast<double>(to_float(a[r * 128 + k])) * to_float(v[k * 128 + col]);
        ref += p, size += std::fabs(p);
      }
      ASSERT_LE(std::fabs(c[r * 128 + col] - ref), 128 * std::ldexp(1.0, -24) * size) << "C[" << r << "][" << col << "]";
    }
  }
}

}  // namespace
}  // namespace fc::kernels::cuda
