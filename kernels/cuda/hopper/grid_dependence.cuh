// Kernels that overlap in one stream (sm_90): programmatic dependent launch (PTX griddepcontrol) and the per-item
// counts through which a dependent grid learns which of its prerequisite's results are complete, before that grid
// has finished. cuda.fa3's fused backward uses them to convert each head's dQ during the key-tiled pass's last wave.
//
// The protocol: the prerequisite grid calls grid_launch_dependents() early (the dependent grid may then be scheduled
// on SMs the prerequisite leaves idle); a producer thread whose results are written calls
// count_release_after_async_writes(); a dependent block calls wait_count_at_least() before reading them. The counts
// carry the ordering (release and acquire at gpu scope), not the launch: without the launch attribute the dependent
// grid simply runs after.
#pragma once

#include <cstdint>

namespace fc::kernels::cuda::hopper {

// Lets the dependent grid (launched with cudaLaunchAttributeProgrammaticStreamSerialization) be scheduled once every
// CTA of this grid has called it or exited. Repeated calls by a CTA's threads have no further effect.
__device__ inline void grid_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Waits until the prerequisite grids have completed and their memory operations are visible.
__device__ inline void grid_wait_prerequisites() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// count += 1 with release semantics at gpu scope, after this thread's TMA (async-proxy) writes to global memory:
// the caller has waited for them (cp.async.bulk.wait_group 0); the proxy fence orders them before the release.
__device__ inline void count_release_after_async_writes(std::uint32_t* count) {
  asm volatile("fence.proxy.async.global;" ::: "memory");
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
}

__device__ inline std::uint32_t load_acquire(const std::uint32_t* count) {
  std::uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
  return v;
}

// Spins (with back-off) until *count >= target; an acquire, so the writes released before the count's increments
// are visible to this thread afterwards (and to its block after a __syncthreads).
__device__ inline void wait_count_at_least(const std::uint32_t* count, std::uint32_t target) {
  while (load_acquire(count) < target) __nanosleep(256);
}

// Holds the calling thread for at least `ns` nanoseconds of the GPU's global timer (__nanosleep alone may return
// early: its duration is anywhere in [0, 2 t]).
__device__ inline std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ inline void sleep_ns(std::uint32_t ns) {
  const std::uint64_t end = global_timer_ns() + ns;
  while (global_timer_ns() < end) __nanosleep(1000);
}

}  // namespace fc::kernels::cuda::hopper
