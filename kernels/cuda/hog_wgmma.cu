// Template instances and launches of Flash Hog's wgmma passes (hog_wgmma.cuh): the tensor maps of the seven
// operands (boxes of 64 rows), then the statistics passes, the query output pass and the key pass on one stream.
#include "kernels/cuda/hog_wgmma.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/hog_wgmma.cuh"
#include "kernels/cuda/hopper/tensor_map.hpp"
#include "kernels/cuda/kernel_launch.cuh"

namespace fc::kernels::cuda {
namespace {

using namespace hog_wg;

CUtensorMap map_of(const Strided& x, const HogParams& p, int heads, int rows) { return fa3::map_sw128(x, p.type, p.shape, heads, rows, kTileRows); }

struct Maps {
  CUtensorMap q, k, v, dout, ddq, ddk, ddv;
};

template <class T, int D, HogPass kPass>
void query_pass(const HogParams& p, const Maps& m, cudaStream_t stream, const char* name) {
  constexpr std::size_t bytes = query_smem_bytes<T, D>();
  static_assert(bytes <= kSm90SharedBytesPerBlock, "hog: shared memory beyond sm_90's 227 KiB per block");
  auto* kernel = hog_wg_query_kernel<T, D, kPass>;
  allow_smem(kernel, static_cast<int>(bytes), name);
  kernel<<<fa3::grid_of(p.shape, fa3::kCtaRows, "hog"), fa3::kWsThreads, bytes, stream>>>(m.q, m.k, m.v, m.dout, m.ddq, m.ddk, m.ddv, p);
  check_launch(name);
}

template <class T, int D>
void passes(const HogParams& p, cudaStream_t stream) {
  const AttentionShapeParams& s = p.shape;
  const Maps m{map_of(p.q, p, s.heads_q, s.seq_q),      map_of(p.k, p, s.heads_kv, s.seq_k),   map_of(p.v, p, s.heads_kv, s.seq_k),
               map_of(p.dout, p, s.heads_q, s.seq_q),   map_of(p.ddq, p, s.heads_q, s.seq_q),  map_of(p.ddk, p, s.heads_kv, s.seq_k),
               map_of(p.ddv, p, s.heads_kv, s.seq_k)};
  if (p.two_pass) {
    query_pass<T, D, HogPass::kBoth>(p, m, stream, "hog wgmma pass 1 (dd, b)");
  } else {
    query_pass<T, D, HogPass::kDd>(p, m, stream, "hog wgmma pass 1 (dd)");
    query_pass<T, D, HogPass::kB>(p, m, stream, "hog wgmma pass 2 (b)");
  }
  query_pass<T, D, HogPass::kOut>(p, m, stream, "hog wgmma query outputs (dQ', ddO)");
  constexpr std::size_t bytes = key_smem_bytes<T, D>();
  static_assert(bytes <= kSm90SharedBytesPerBlock, "hog: shared memory beyond sm_90's 227 KiB per block");
  auto* kernel = hog_wg_key_kernel<T, D>;
  allow_smem(kernel, static_cast<int>(bytes), "hog wgmma key pass (dK', dV')");
  const dim3 grid((s.seq_k + fa3::kCtaRows - 1) / fa3::kCtaRows, s.heads_kv, s.batch);
  kernel<<<grid, fa3::kWsThreads, bytes, stream>>>(m.q, m.k, m.v, m.dout, m.ddq, m.ddk, m.ddv, p);
  check_launch("hog wgmma key pass (dK', dV')");
}

}  // namespace

bool hog_wgmma_supports(const HogParams& p) {
  const AttentionShapeParams& s = p.shape;
  if (s.head_dim != 64 || s.heads_q > 65535 || s.batch > 65535) return false;
  for (const Strided* x : {&p.q, &p.dout, &p.ddq}) {
    if (!fa3::tma_readable16(*x, s.batch, s.heads_q, s.seq_q, s.head_dim)) return false;
  }
  for (const Strided* x : {&p.k, &p.v, &p.ddk, &p.ddv}) {
    if (!fa3::tma_readable16(*x, s.batch, s.heads_kv, s.seq_k, s.head_dim)) return false;
  }
  return true;
}

void hog_wgmma_passes(const HogParams& p, cudaStream_t stream) {
  if (!hog_wgmma_supports(p)) throw std::runtime_error("hog wgmma: head dim 64 and TMA-readable operands only (hog_wgmma_supports)");
  if (p.type == StorageType::fp16) {
    passes<__half, 64>(p, stream);
  } else {
    passes<__nv_bfloat16, 64>(p, stream);
  }
}

}  // namespace fc::kernels::cuda
