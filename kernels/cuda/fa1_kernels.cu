// Template instances and launches of the FA1 kernels: the forward of fa1_forward.cuh, and the backward
// as FA1's Algorithm 4: delta, then one block per (batch, kv head) walking the key tiles in order
// (fa2_backward.cuh's dk_dv pass in DqMode::sequential, dQ added to an fp32 accumulator), then dQ
// rounded to the storage format.
#include "kernels/cuda/fa1_kernels.hpp"

#include <algorithm>

#include "kernels/cuda/fa1_forward.cuh"
#include "kernels/cuda/fa2_backward.cuh"
#include "kernels/cuda/kernel_launch.cuh"

namespace fc::kernels::cuda {
namespace {

// Query-tile chunks per head: enough blocks for two per SM (the forward's numbers do not depend on it).
int forward_splits(const ForwardParams& p, int tiles_m) {
  static const int sms = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      return 1;
    }
    return n;
  }();
  const long heads = static_cast<long>(p.shape.batch) * p.shape.heads_q;
  const long wanted = (2L * sms + heads - 1) / heads;
  return static_cast<int>(std::clamp<long>(wanted, 1, tiles_m));
}

template <class T, int D>
void forward(const ForwardParams& p, cudaStream_t stream) {
  if (p.row_state == nullptr) throw std::runtime_error("fa1_forward: needs the row_state workspace");
  using Cfg = Fa1ForwardConfig<D>;
  auto* kernel = fa1_forward_kernel<T, D>;
  allow_smem(kernel, Cfg::kSmemBytes, "fa1_forward");
  const int tiles_m = (p.shape.seq_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  const dim3 grid(forward_splits(p, tiles_m), p.shape.heads_q, p.shape.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  check_launch("fa1_forward");
}

// 64 keys per tile (cpu.fa1's block_k: DkDvConfig's 16 per warp x 4 warps), query steps of kDkDvStep.
template <class T, int D>
void backward(const BackwardParams& p, cudaStream_t stream) {
  if (p.dq_accum == nullptr || p.delta == nullptr) throw std::runtime_error("fa1_backward: needs the delta and dq_accum workspaces");
  launch_delta<T>(p, stream, "fa1_backward delta and dq_accum's zeros", true);
  using Cfg = DkDvConfig<D, 4, kDkDvStep<D>>;
  static_assert(Cfg::kBlockN == 64, "cpu.fa1's key tile");
  auto* kernel = dk_dv_kernel<T, D, 4, kDkDvStep<D>, DqMode::sequential>;
  allow_smem(kernel, Cfg::kSmemBytesWithDs, "fa1_backward");
  kernel<<<dim3(1, p.shape.heads_kv, p.shape.batch), Cfg::kThreads, Cfg::kSmemBytesWithDs, stream>>>(p);
  check_launch("fa1_backward key/value-outer pass");
  launch_dq_convert<T>(p, 1.f, stream, "fa1_backward dq_convert");
}

}  // namespace

void fa1_forward(const ForwardParams& p, cudaStream_t stream) {
  if (p.type == StorageType::bf16) {
    by_head_dim("fa1", p, [&] { forward<__nv_bfloat16, 64>(p, stream); }, [&] { forward<__nv_bfloat16, 128>(p, stream); });
  } else {
    by_head_dim("fa1", p, [&] { forward<__half, 64>(p, stream); }, [&] { forward<__half, 128>(p, stream); });
  }
}

void fa1_backward(const BackwardParams& p, cudaStream_t stream) {
  if (p.type == StorageType::bf16) {
    by_head_dim("fa1", p, [&] { backward<__nv_bfloat16, 64>(p, stream); }, [&] { backward<__nv_bfloat16, 128>(p, stream); });
  } else {
    by_head_dim("fa1", p, [&] { backward<__half, 64>(p, stream); }, [&] { backward<__half, 128>(p, stream); });
  }
}

}  // namespace fc::kernels::cuda
