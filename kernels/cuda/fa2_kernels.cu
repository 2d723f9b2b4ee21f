// Template instances and launches of the FA2 kernels (fa2_forward.cuh, fa2_backward.cuh).
#include "kernels/cuda/fa2_kernels.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cuda/fa2_backward.cuh"
#include "kernels/cuda/fa2_backward_tiled.cuh"
#include "kernels/cuda/fa2_forward.cuh"
#include "kernels/cuda/kernel_launch.cuh"

namespace fc::kernels::cuda {
namespace {

// Tile shapes (notes: kernels/cuda/NOTES.md). Forward: ForwardParams::tile. dK/dV: BackwardParams::
// dk_dv_layout, tiled (TiledDkDvConfig: 8 warps, 128 keys, steps of 64 rows) or warp_keys (4 warps, 8
// with bwd_keys=128, 16 keys each, steps of kDkDvStep<D> rows); dQ: 64 query rows, key tiles of
// kDkDvStep<D>.
constexpr int kWarps = 4;

template <class T, int D, int kW, int kBN, int kMT>
void forward_with(const ForwardParams& p, cudaStream_t stream) {
  using Cfg = Fa2ForwardConfig<D, kW, kBN, kMT>;
  auto* kernel = fa2_forward_kernel<T, D, kW, kBN, kMT>;
  allow_smem(kernel, Cfg::kSmemBytes, "fa2_forward");
  const dim3 grid((p.shape.seq_q + Cfg::kBlockM - 1) / Cfg::kBlockM, p.shape.heads_q, p.shape.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  check_launch("fa2_forward");
}

template <class T, int D>
void forward(const ForwardParams& p, cudaStream_t stream) {
  switch (p.tile) {
    case ForwardTile::m64n64w4: return forward_with<T, D, 4, 64, 1>(p, stream);
    case ForwardTile::m128n64w4: return forward_with<T, D, 4, 64, 2>(p, stream);
    case ForwardTile::m128n48w4: return forward_with<T, D, 4, 48, 2>(p, stream);
    case ForwardTile::m128n32w4: return forward_with<T, D, 4, 32, 2>(p, stream);
    case ForwardTile::m128n64w8: return forward_with<T, D, 8, 64, 1>(p, stream);
  }
}

// The dK/dV pass with kW warps (16 keys each) and dQ delivered per kDq.
template <class T, int D, int kW, DqMode kDq>
void launch_dk_dv(const BackwardParams& p, cudaStream_t stream, const char* name) {
  using Cfg = DkDvConfig<D, kW, kDkDvStep<D>>;
  constexpr int kSmem = kDq == DqMode::separate_pass ? Cfg::kSmemBytes : Cfg::kSmemBytesWithDs;
  auto* kernel = dk_dv_kernel<T, D, kW, kDkDvStep<D>, kDq>;
  allow_smem(kernel, kSmem, name);
  const dim3 grid((p.shape.seq_k + Cfg::kBlockN - 1) / Cfg::kBlockN, p.shape.heads_kv, p.shape.batch);
  kernel<<<grid, Cfg::kThreads, kSmem, stream>>>(p);
  check_launch(name);
}

// The dK/dV pass in FA2's tiled layout (128 keys, 8 warps), with dQ partials added by atomics or not.
template <class T, int D, bool kDqHere>
void launch_dk_dv_tiled(const BackwardParams& p, cudaStream_t stream, const char* name) {
  using Cfg = TiledDkDvConfig<D>;
  auto* kernel = dk_dv_tiled_kernel<T, D, kDqHere>;
  allow_smem(kernel, Cfg::kSmemBytes, name);
  const dim3 grid((p.shape.seq_k + Cfg::kBlockN - 1) / Cfg::kBlockN, p.shape.heads_kv, p.shape.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  check_launch(name);
}

template <class T, int D>
void backward(const BackwardParams& p, cudaStream_t stream) {
  const bool tiled = p.dk_dv_layout == DkDvLayout::tiled || (p.dk_dv_layout == DkDvLayout::automatic && D == 128);
  if (!p.deterministic && p.dq_accum == nullptr) throw std::runtime_error("fa2_backward: the fast mode needs the dq_accum workspace");
  launch_delta<T>(p, stream, "fa2_backward delta (and, fast, dq_accum's zeros)", !p.deterministic);
  if (!p.deterministic) {  // fast: dQ partials added with atomics by the dk_dv pass
    if (tiled) {
      launch_dk_dv_tiled<T, D, true>(p, stream, "fa2_backward dk_dv (tiled, atomic dQ)");
    } else if (p.dk_dv_keys == 128) {
      launch_dk_dv<T, D, 8, DqMode::atomic>(p, stream, "fa2_backward dk_dv (atomic dQ, 128 keys)");
    } else {
      launch_dk_dv<T, D, 4, DqMode::atomic>(p, stream, "fa2_backward dk_dv (atomic dQ)");
    }
    launch_dq_convert<T>(p, p.shape.scale, stream, "fa2_backward dq_convert");
    return;
  }
  if (tiled) {
    launch_dk_dv_tiled<T, D, false>(p, stream, "fa2_backward dk_dv (tiled)");
  } else if (p.dk_dv_keys == 128) {
    launch_dk_dv<T, D, 8, DqMode::separate_pass>(p, stream, "fa2_backward dk_dv (128 keys)");
  } else {
    launch_dk_dv<T, D, 4, DqMode::separate_pass>(p, stream, "fa2_backward dk_dv");
  }

  using QCfg = DqConfig<D, kWarps, kDkDvStep<D>>;
  constexpr int kDqSmem = (2 * QCfg::kBlockM * D + 2 * kDkDvStep<D> * D) * 2;
  auto* dq = dq_kernel<T, D, kWarps, kDkDvStep<D>>;
  allow_smem(dq, kDqSmem, "fa2_backward dq");
  const dim3 q_grid((p.shape.seq_q + QCfg::kBlockM - 1) / QCfg::kBlockM, p.shape.heads_q, p.shape.batch);
  dq<<<q_grid, QCfg::kThreads, kDqSmem, stream>>>(p);
  check_launch("fa2_backward dq");
}

}  // namespace

bool fa2_supports_head_dim(int d) { return d == 64 || d == 128; }

void fa2_forward(const ForwardParams& p, cudaStream_t stream) {
  if (p.type == StorageType::bf16) {
    by_head_dim("fa2", p, [&] { forward<__nv_bfloat16, 64>(p, stream); }, [&] { forward<__nv_bfloat16, 128>(p, stream); });
  } else {
    by_head_dim("fa2", p, [&] { forward<__half, 64>(p, stream); }, [&] { forward<__half, 128>(p, stream); });
  }
}

void fa2_backward(const BackwardParams& p, cudaStream_t stream) {
  if (p.type == StorageType::bf16) {
    by_head_dim("fa2", p, [&] { backward<__nv_bfloat16, 64>(p, stream); }, [&] { backward<__nv_bfloat16, 128>(p, stream); });
  } else {
    by_head_dim("fa2", p, [&] { backward<__half, 64>(p, stream); }, [&] { backward<__half, 128>(p, stream); });
  }
}

}  // namespace fc::kernels::cuda
