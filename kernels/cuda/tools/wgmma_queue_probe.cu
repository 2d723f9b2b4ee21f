// wgmma-queue-probe: how long issuing a chain of wgmma instructions holds the issuing warps, and how fast the chain
// runs, on one SM of a Hopper GPU (a tool, not a test; NOTES "What the products cost the softmax").
//
// One CTA; each of G warpgroups (G = 1..3, the consumer groups of cuda.fa3.fp8's kernel) issues K QGMMA m64n128k32
// (e4m3 from shared memory, S = Q K^T's instruction) into one accumulator chain, commits and waits, 200 times. Warp 0 of
// each group reads the SM clock before the first instruction, after the commit ("issue": while the warp is held at
// issue) and after the wait ("total"). Every chain's result is read after its wait: ptxas replaces a chain whose
// accumulators are overwritten unread by a placeholder (HGMMA.64x8x16 RZ), and times of such a loop measure nothing.
// The descriptors are formed before the loop. A chain of one instruction is serialised by ptxas (C7511: its wait comes
// before the issue clock), so its "issue" is its latency.
//
// Usage: wgmma-queue-probe

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/hopper/wgmma_e4m3.cuh"
#include "kernels/cuda/tools/hopper_device.hpp"

namespace {

using namespace fc::kernels::cuda::hopper;

constexpr int kIters = 200;
constexpr int kMaxGroups = 3;
constexpr unsigned kTileBytes = 16384;  // one group's Q (8 KB used) or the shared K tile: 128 rows of 128 e4m3

template <int K>
__global__ void __launch_bounds__(128 * kMaxGroups) issue_chains(long long* out, int groups) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t{1023});
  // e4m3 bytes 0x10 .. 0x4f (magnitudes 2^-5 .. 2^2, no NaN)
  for (unsigned i = threadIdx.x; i < (kMaxGroups + 1) * kTileBytes / 4; i += blockDim.x) reinterpret_cast<unsigned*>(smem)[i] = ((i * 2654435761u) & 0x3f3f3f3fu) + 0x10101010u;
  __syncthreads();
  const int g = static_cast<int>(threadIdx.x / 128);
  if (g >= groups) return;
  std::uint64_t q_desc[4], k_desc[4];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    q_desc[s] = wgmma_descriptor_advance(wgmma_descriptor_sw128(smem + g * kTileBytes), s);
    k_desc[s] = wgmma_descriptor_advance(wgmma_descriptor_sw128(smem + kMaxGroups * kTileBytes), s);
  }
  float acc[64];
  float keep = 0.f;
  long long issue = 0, total = 0;
  for (int it = 0; it < kIters; ++it) {
    const long long t0 = clock64();
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < K; ++s) wgmma_m64n128k32_e4m3_ss(acc, q_desc[s % 4], k_desc[s % 4], s > 0);
    wgmma_commit();
    const long long t1 = clock64();
    wgmma_wait<0>();
    const long long t2 = clock64();
    keep += acc[0] + acc[63];  // (the chain's result is read: not dead code; fixed indices keep acc in registers)
    if (it > 0) issue += t1 - t0, total += t2 - t0;  // (the first chain warms the instruction cache)
  }
  if (threadIdx.x % 128 == 0) out[2 * g] = issue, out[2 * g + 1] = total;
  if (keep == 12345.f) out[2 * kMaxGroups] = 1;  // (never true for these bytes; keeps `keep` live)
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "wgmma-queue-probe: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <int K>
void run(int groups, long long* d_out) {
  const int bytes = (kMaxGroups + 1) * kTileBytes + 1024;
  check(cudaFuncSetAttribute(issue_chains<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), "cudaFuncSetAttribute");
  issue_chains<K><<<1, 128 * kMaxGroups, bytes>>>(d_out, groups);
  check(cudaGetLastError(), "launch");
  check(cudaDeviceSynchronize(), "the probe");
  long long h[2 * kMaxGroups + 1] = {};
  check(cudaMemcpy(h, d_out, sizeof h, cudaMemcpyDeviceToHost), "cudaMemcpy");
  std::printf("%d group(s), chains of %2d QGMMA:", groups, K);
  double longest = 0;
  for (int g = 0; g < groups; ++g) {
    const double issue = static_cast<double>(h[2 * g]) / (kIters - 1), total = static_cast<double>(h[2 * g + 1]) / (kIters - 1);
    std::printf("  group %d: issue %7.1f, total %7.1f", g, issue, total);
    longest = total > longest ? total : longest;
  }
  // (the SM's rate: every group's chain in the longest group's time)
  std::printf("  | %5.1f clocks an instruction, SM-wide\n", longest / (K * groups));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {  // (before the device: a usage error is one on any machine)
    std::fprintf(stderr, "wgmma-queue-probe: unknown argument '%s'\nusage: wgmma-queue-probe\n", argv[1]);
    return 2;
  }
  const cudaDeviceProp prop = fc::kernels::cuda::tools::hopper_device_or_exit("wgmma-queue-probe");
  long long* d_out = nullptr;
  check(cudaMalloc(&d_out, (2 * kMaxGroups + 1) * sizeof(long long)), "cudaMalloc");
  std::printf("%s; one CTA; SM clocks (clock64), means over %d chains of warp 0 of each group\n", prop.name, kIters - 1);
  for (int groups = 1; groups <= kMaxGroups; ++groups) {
    run<1>(groups, d_out);
    run<4>(groups, d_out);
    run<8>(groups, d_out);
    run<16>(groups, d_out);
    run<32>(groups, d_out);
  }
  cudaFree(d_out);
  return 0;
}
