// Launches of the Attention Residuals kernels (attnres_kernels.cuh), in order on one stream.
#include "kernels/cuda/attnres_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels/cuda/attnres_lane_kernels.cuh"
#include "kernels/cuda/kernel_launch.cuh"

namespace fc::kernels::cuda {
namespace {

// The device's limits, read once per device (the ops launch these kernels every call: attribute
// queries on each were host time the GPU waited for).
struct DeviceLimits {
  int sms = 0, smem_optin = 0;
};
const DeviceLimits& device_limits(const char* name) {
  int device = 0;
  check_launch_result(cudaGetDevice(&device), name);
  static std::mutex mutex;
  static std::map<int, DeviceLimits> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it == cache.end()) {
    DeviceLimits d;
    check_launch_result(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device), name);
    check_launch_result(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), name);
    it = cache.emplace(device, d).first;
  }
  return it->second;
}

// Blocks of 32 kLaneWarps threads per SM with `smem` bytes (the occupancy calculator), once per
// (kernel, bytes, device); and the kernel's shared-memory attribute raised to `smem` where it was lower
// (only ever raised: a launch needs the attribute >= its bytes, and a shape with less shared memory
// must not lower it under one with more that is launched later from the cache).
template <class Kernel>
int blocks_per_sm(Kernel kernel, int smem, const char* name) {
  int device = 0;
  check_launch_result(cudaGetDevice(&device), name);
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int>, int> occupancy;
  static std::map<std::pair<const void*, int>, int> attribute;  // the largest value set so far
  const std::lock_guard<std::mutex> lock(mutex);
  const void* k = reinterpret_cast<const void*>(kernel);
  if (smem > 48 * 1024) {
    int& set = attribute[{k, device}];
    if (smem > set) allow_smem(kernel, smem, name), set = smem;
  }
  const auto key = std::make_tuple(k, smem, device);
  auto it = occupancy.find(key);
  if (it == occupancy.end()) {
    int per_sm = 0;
    check_launch_result(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kLaneWarps, smem), name);
    it = occupancy.emplace(key, per_sm).first;
  }
  return it->second;
}

// Dynamic shared memory of a kernel, checked against the device's opt-in limit (N and S are not
// bounded by the kernels, only by this).
template <class Kernel>
int smem_for(Kernel kernel, std::size_t floats, const char* name, bool set_attribute = true) {
  const std::size_t bytes = floats * sizeof(float);
  const int limit = device_limits(name).smem_optin;
  if (bytes > static_cast<std::size_t>(limit)) {
    throw std::runtime_error(std::string(name) + ": needs " + std::to_string(bytes) +
                             " bytes of shared memory (N x S or D too large), the device has " + std::to_string(limit));
  }
  if (set_attribute && bytes > 48 * 1024) allow_smem(kernel, static_cast<int>(bytes), name);
  return static_cast<int>(bytes);
}

void dw_sum(const AttnResParams& p, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(p.layers) * p.dim;
  attnres_dw_sum_kernel<<<static_cast<unsigned>((n + kAttnResThreads - 1) / kAttnResThreads), kAttnResThreads, 0, stream>>>(
      p, attnres_chunks(p));
  check_launch("attnres dw sum");
}

}  // namespace

int attnres_chunks(const AttnResParams& p) { return attnres_chunk_count(p.batch * p.tokens); }

std::size_t attnres_dw_workspace_floats(const AttnResParams& p) {
  const std::size_t S = p.layers, tokens = static_cast<std::size_t>(p.batch) * p.tokens;
  return static_cast<std::size_t>(attnres_chunks(p)) * S * p.dim + S * tokens * static_cast<std::size_t>(std::max(p.sources, 1));
}

namespace {

bool aligned16(const void* x) { return reinterpret_cast<std::uintptr_t>(x) % 16 == 0; }
// Every row of x starts 16 bytes aligned (the lane kernels' 16-byte loads), and x has no row scales
// unless `scales_ok`.
bool rows_aligned(const AttnResIn& x, bool scales_ok = false) {
  const std::int64_t eb = x.type == Elem::f32 ? 4 : 2;
  return aligned16(x.data) && (x.outer * eb) % 16 == 0 && (x.batch * eb) % 16 == 0 && (x.token * eb) % 16 == 0 &&
         (scales_ok || x.scale == nullptr);
}

struct Layout {
  int warps = 0, chunks = 0;  // W warps per row, K 256-entry chunks per lane; 0: the block kernels
};
// The smallest group W (then K) with W K 256 >= D and `rows` x K <= `capacity` (K a power of two up to
// 8). A function of D and the row count alone, so the forward and backward of a phase agree.
Layout lane_layout(int D, int rows, int capacity) {
  if (D % 8 != 0) return {};
  const int chunks = (D + 255) / 256;
  for (int W = 1; W <= kLaneWarps; W *= 2) {
    int K = 1;
    while (K * W < chunks) K *= 2;
    if (K <= 8 && rows * K <= capacity) return {W, K};
  }
  return {};
}
Layout phase1_layout(const AttnResParams& p) {
  if (p.layers > kLaneMaxS || !rows_aligned(p.values) || !rows_aligned(p.queries)) return {};
  return lane_layout(p.dim, p.sources, kLaneRowChunks);
}
Layout phase2_layout(const AttnResParams& p) {
  if (!rows_aligned(p.partial) || !rows_aligned(p.queries) || !rows_aligned(p.o_in, true)) return {};
  return lane_layout(p.dim, 1, kLaneP2MaxK);
}

// Each phase's lane path (warps 0: the block kernels): the layout, and the rows each phase's own
// outputs and workspaces need aligned.
bool out_aligned(const void* data, Elem type) { return rows_aligned({data, 0, 0, 0, type}); }
Layout phase1_forward_lanes(const AttnResParams& p) { return out_aligned(p.o.data, p.o.type) ? phase1_layout(p) : Layout{}; }
Layout phase1_backward_lanes(const AttnResParams& p) {
  // (the forward's test plus the backward's own rows: d_o and d_values are contiguous allocations, so in
  // practice both phases take the same path, and the backward recomputes the forward's logits bit for bit)
  const bool own = out_aligned(p.d_o, p.d_values.type) && out_aligned(p.d_values.data, p.d_values.type) && p.d_values.scale == nullptr;
  return own ? phase1_layout(p) : Layout{};
}
Layout phase2_forward_lanes(const AttnResParams& p) { return out_aligned(p.h.data, p.h.type) ? phase2_layout(p) : Layout{}; }
Layout phase2_backward_lanes(const AttnResParams& p) {
  const bool own = rows_aligned(p.dh) && out_aligned(p.d_o, p.d_partial.type) && out_aligned(p.d_partial.data, p.d_partial.type);
  return own ? phase2_layout(p) : Layout{};
}

unsigned lane_blocks(std::int64_t rows, const Layout& l) {
  const std::int64_t per_block = kLaneWarps / l.warps;
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

// kernel<E, K> for the values' format and K (phase 1)
template <template <Elem, int> class Pick, class... A>
void phase1_dispatch(const AttnResParams& p, const Layout& l, A&&... a) {
  const auto by_k = [&]<Elem E>() {
    switch (l.chunks) {
      case 1: Pick<E, 1>::run(p, l, a...); return;
      case 2: Pick<E, 2>::run(p, l, a...); return;
      case 4: Pick<E, 4>::run(p, l, a...); return;
      default: Pick<E, 8>::run(p, l, a...); return;
    }
  };
  switch (p.values.type) {
    case Elem::bf16: by_k.template operator()<Elem::bf16>(); return;
    case Elem::f16: by_k.template operator()<Elem::f16>(); return;
    default: by_k.template operator()<Elem::f32>(); return;
  }
}

// Version 6's ring depths (TokenRing): FLASHCHECK_ATTNRES_STAGES="F,B" overrides the forward's (1-3)
// and the backward's (0-3) for measurements; otherwise the forward keeps 1 token ahead (2 slots: 3 were
// slower on the H100, their shared memory leaving less L1) and the backward none (1 slot: a token's
// values and S do rows are 12 KiB per warp at D = 512, S = 8, and 2 slots would leave one block per SM;
// measured 1.5x slower), 0 where even one does not fit.
struct RingDepths {
  int forward = 0, backward = -1;  // 0 / -1: the defaults
};
RingDepths ring_depths_override() {
  static const RingDepths depths = [] {
    RingDepths d;
    if (const char* env = std::getenv("FLASHCHECK_ATTNRES_STAGES")) {
      if (std::sscanf(env, "%d,%d", &d.forward, &d.backward) != 2 || d.forward < 1 || d.forward > 3 || d.backward < 0 || d.backward > 3) {
        throw std::runtime_error("FLASHCHECK_ATTNRES_STAGES: expected \"F,B\" with F in 1..3 and B in 0..3, got \"" + std::string(env) + "\"");
      }
    }
    return d;
  }();
  return depths;
}

// A persistent grid: as many blocks as fit on the device at once (the occupancy calculator with this
// shared memory), at most one per `groups` of rows.
template <class Kernel>
unsigned persistent_blocks(Kernel kernel, int smem, std::int64_t rows, const Layout& l, const char* name) {
  const int per_sm = blocks_per_sm(kernel, smem, name);
  if (per_sm < 1) throw std::runtime_error(std::string(name) + ": no block fits on a multiprocessor");
  return std::min<unsigned>(lane_blocks(rows, l), static_cast<unsigned>(device_limits(name).sms) * per_sm);
}

template <Elem E, int K>
struct Phase1Forward {
  static void run(const AttnResParams& p, const Layout& l, cudaStream_t stream) {
    const char* name = "attnres phase 1 forward (lanes)";
    const auto kernel = attnres_phase1_forward_lane_kernel<E, K>;
    int stages = ring_depths_override().forward;
    if (stages == 0) stages = 2;
    const std::size_t bytes = attnres_phase1_forward_smem<E, K>(p, stages);
    const int smem = smem_for(kernel, (bytes + 3) / 4, name, false);  // (persistent_blocks sets the attribute)
    kernel<<<persistent_blocks(kernel, smem, static_cast<std::int64_t>(p.batch) * p.tokens, l, name), 32 * kLaneWarps, smem, stream>>>(
        p, l.warps, stages);
    check_launch(name);
  }
};
template <Elem E, int K>
struct Phase1Backward {
  static void run(const AttnResParams& p, const Layout& l, cudaStream_t stream) {
    const char* name = "attnres phase 1 backward (lanes)";
    const bool uniform = p.d_values.type == E && p.queries.type == E;
    const auto kernel = uniform ? attnres_phase1_backward_lane_kernel<E, K, true> : attnres_phase1_backward_lane_kernel<E, K, false>;
    const Elem gtype = p.d_values.type;
    int stages = ring_depths_override().backward;
    if (stages < 0) stages = 1;
    const std::size_t limit = static_cast<std::size_t>(device_limits(name).smem_optin);
    while (stages > 0 && attnres_phase1_backward_smem<K>(p, E, gtype, stages, uniform) > limit) --stages;
    const std::size_t bytes = attnres_phase1_backward_smem<K>(p, E, gtype, stages, uniform);
    const int smem = smem_for(kernel, (bytes + 3) / 4, name, false);  // (persistent_blocks sets the attribute)
    kernel<<<persistent_blocks(kernel, smem, static_cast<std::int64_t>(p.batch) * p.tokens, l, name), 32 * kLaneWarps, smem, stream>>>(
        p, l.warps, stages);
    check_launch(name);
  }
};

template <template <int> class Kernel>
void phase2_launch(const AttnResParams& p, const Layout& l, cudaStream_t stream, const char* name) {
  const unsigned blocks = lane_blocks(static_cast<std::int64_t>(p.layers) * p.batch * p.tokens, l);
  const int smem = 5 * kLaneWarps * sizeof(float);
  switch (l.chunks) {
    case 1: Kernel<1>::launch(blocks, smem, stream, p, l.warps); break;
    case 2: Kernel<2>::launch(blocks, smem, stream, p, l.warps); break;
    default: Kernel<4>::launch(blocks, smem, stream, p, l.warps); break;
  }
  check_launch(name);
}
template <int K>
struct Phase2Forward {
  static void launch(unsigned blocks, int smem, cudaStream_t stream, const AttnResParams& p, int W) {
    attnres_phase2_forward_lane_kernel<K><<<blocks, 32 * kLaneWarps, smem, stream>>>(p, W);
  }
};
template <int K>
struct Phase2Backward {
  static void launch(unsigned blocks, int smem, cudaStream_t stream, const AttnResParams& p, int W) {
    attnres_phase2_backward_lane_kernel<K><<<blocks, 32 * kLaneWarps, smem, stream>>>(p, W);
  }
};

}  // namespace

bool attnres_checks_inputs(const AttnResParams& p, AttnResPhase phase) {
  switch (phase) {
    case AttnResPhase::phase1_forward: return phase1_forward_lanes(p).warps > 0;
    case AttnResPhase::phase2_forward: return phase2_forward_lanes(p).warps > 0;
    case AttnResPhase::phase2_backward: return phase2_backward_lanes(p).warps > 0;
    default: return phase1_backward_lanes(p).warps > 0;
  }
}

void attnres_phase1_forward(const AttnResParams& p, cudaStream_t stream) {
  const Layout l = phase1_forward_lanes(p);
  if (l.warps > 0) {
    phase1_dispatch<Phase1Forward>(p, l, stream);
    return;
  }
  const int smem = smem_for(attnres_phase1_forward_kernel, kAttnResWarps + p.sources + static_cast<std::size_t>(p.layers) * p.sources,
                            "attnres phase 1 forward");
  attnres_phase1_forward_kernel<<<p.batch * p.tokens, kAttnResThreads, smem, stream>>>(p);
  check_launch("attnres phase 1 forward");
}

void attnres_phase2_forward(const AttnResParams& p, cudaStream_t stream) {
  const Layout l = phase2_forward_lanes(p);
  if (l.warps > 0) {
    phase2_launch<Phase2Forward>(p, l, stream, "attnres phase 2 forward (lanes)");
    return;
  }
  attnres_phase2_forward_kernel<<<dim3(p.batch * p.tokens, p.layers), kAttnResThreads, 0, stream>>>(p);
  check_launch("attnres phase 2 forward");
}

void attnres_phase2_backward(const AttnResParams& p, cudaStream_t stream) {
  const Layout l = phase2_backward_lanes(p);
  if (l.warps > 0) {
    phase2_launch<Phase2Backward>(p, l, stream, "attnres phase 2 backward (lanes)");
    // the chunks' partials of dw from the coefficients the kernel wrote
    attnres_phase2_dw_kernel<<<dim3(attnres_chunks(p), (p.dim + 2 * kDwThreads - 1) / (2 * kDwThreads), p.layers), kDwThreads, 0, stream>>>(p);
    check_launch("attnres phase 2 dw partials");
  } else {
    const int smem = smem_for(attnres_phase2_backward_kernel, kAttnResWarps + static_cast<std::size_t>(p.dim), "attnres phase 2 backward");
    attnres_phase2_backward_kernel<<<dim3(attnres_chunks(p), p.layers), kAttnResThreads, smem, stream>>>(p);
    check_launch("attnres phase 2 backward");
  }
  if (p.dw_phase1 == nullptr) dw_sum(p, stream);  // (alone: d_queries is phase 2's part)
}

void attnres_phase1_backward(const AttnResParams& p, cudaStream_t stream) {
  const Layout l = phase1_backward_lanes(p);
  if (l.warps > 0) {
    phase1_dispatch<Phase1Backward>(p, l, stream);
    const int smem = smem_for(attnres_phase1_dw_kernel, static_cast<std::size_t>(kAttnResChunk) * p.layers * p.sources, "attnres phase 1 dw partials");
    attnres_phase1_dw_kernel<<<dim3(attnres_chunks(p), (p.dim + 2 * kDwThreads - 1) / (2 * kDwThreads)), kDwThreads, smem, stream>>>(p);
    check_launch("attnres phase 1 dw partials");
  } else {
    const int smem = smem_for(attnres_phase1_backward_kernel, kAttnResWarps + p.sources + 4 * static_cast<std::size_t>(p.layers) * p.sources,
                              "attnres phase 1 backward");
    attnres_phase1_backward_kernel<<<attnres_chunks(p), kAttnResThreads, smem, stream>>>(p);
    check_launch("attnres phase 1 backward");
  }
  dw_sum(p, stream);  // phase 1's part, plus phase 2's when p.dw_phase2 holds it
}

void attnres_forward(AttnResParams p, cudaStream_t stream) {
  attnres_phase1_forward(p, stream);
  // phase 2 reads phase 1's stored o (contiguous [S, B T, D], with its scales) and lse
  const std::int64_t D = p.dim;
  p.o_in.data = p.o.data, p.o_in.type = p.o.type, p.o_in.outer = static_cast<std::int64_t>(p.batch) * p.tokens * D;
  p.o_in.batch = p.tokens * D, p.o_in.token = D;
  p.o_in.scale = p.o.scale, p.o_in.scale_outer = static_cast<std::int64_t>(p.batch) * p.tokens, p.o_in.scale_batch = p.tokens;
  p.o_in.scale_token = 1;
  p.lse_in = p.lse;
  attnres_phase2_forward(p, stream);
}

void attnres_backward(const AttnResParams& p, cudaStream_t stream) {
  attnres_phase2_backward(p, stream);
  attnres_phase1_backward(p, stream);
}

}  // namespace fc::kernels::cuda
