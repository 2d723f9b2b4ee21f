// Template instances and launches of the Flash Hog kernels (hog_kernels.cuh): D, then the query-tiled
// statistics passes (dd, b; or both at once in the 2-pass variant), the query-tiled output pass (dQ',
// ddO) and the key-tiled pass (dK', dV'), in order on one stream. Where hog_wgmma_supports says so (head
// dim 64, TMA-readable operands) and p.mma_sync_only does not forbid it, the passes after D run on wgmma
// (hog_wgmma.cu) instead of mma.sync.
#include "kernels/cuda/hog_kernels.hpp"

#include "kernels/cuda/hog_kernels.cuh"
#include "kernels/cuda/hog_wgmma.hpp"
#include "kernels/cuda/kernel_launch.cuh"

namespace fc::kernels::cuda {
namespace {

template <class T, int D, HogPass kPass>
void query_pass(const HogParams& p, cudaStream_t stream, const char* name) {
  auto* kernel = hog_query_kernel<T, D, kPass>;
  allow_smem(kernel, HogQueryConfig<D>::kSmemBytes, name);
  const dim3 grid((p.shape.seq_q + kHogBlockM - 1) / kHogBlockM, p.shape.heads_q, p.shape.batch);
  kernel<<<grid, kHogThreads, HogQueryConfig<D>::kSmemBytes, stream>>>(p);
  check_launch(name);
}

template <class T, int D>
void double_backward(const HogParams& p, cudaStream_t stream) {
  BackwardParams d;  // D = rowsum(dO o O) by the first backward's kernel
  d.shape = p.shape, d.type = p.type, d.o = p.o, d.dout = p.dout, d.delta = p.delta;
  launch_delta<T>(d, stream, "hog delta");
  if (!p.mma_sync_only && hog_wgmma_supports(p)) {
    hog_wgmma_passes(p, stream);
    return;
  }
  if (p.two_pass) {
    query_pass<T, D, HogPass::kBoth>(p, stream, "hog pass 1 (dd, b)");
  } else {
    query_pass<T, D, HogPass::kDd>(p, stream, "hog pass 1 (dd)");
    query_pass<T, D, HogPass::kB>(p, stream, "hog pass 2 (b)");
  }
  query_pass<T, D, HogPass::kOut>(p, stream, "hog query outputs (dQ', ddO)");
  auto* key = hog_key_kernel<T, D>;
  allow_smem(key, HogKeyConfig<D>::kSmemBytes, "hog key pass (dK', dV')");
  const dim3 grid((p.shape.seq_k + kHogKeyBlockN - 1) / kHogKeyBlockN, p.shape.heads_kv, p.shape.batch);
  key<<<grid, kHogThreads, HogKeyConfig<D>::kSmemBytes, stream>>>(p);
  check_launch("hog key pass (dK', dV')");
}

}  // namespace

void hog_double_backward(const HogParams& p, cudaStream_t stream) {
  if (p.delta == nullptr || p.dd == nullptr || p.b == nullptr) throw std::runtime_error("hog: needs the D, dd and b workspaces");
  if (p.type == StorageType::bf16) {
    by_head_dim("hog", p, [&] { double_backward<__nv_bfloat16, 64>(p, stream); }, [&] { double_backward<__nv_bfloat16, 128>(p, stream); });
  } else {
    by_head_dim("hog", p, [&] { double_backward<__half, 64>(p, stream); }, [&] { double_backward<__half, 128>(p, stream); });
  }
}

}  // namespace fc::kernels::cuda
