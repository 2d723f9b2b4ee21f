// A process-wide pool of worker threads for the CPU backends. parallel_for runs task(i) for each i
// in [0, n) exactly once and returns when all are done. Backends give each task outputs of its own
// (a query tile, a key tile, a head), so results never depend on the number of threads.
// Threads: FLASHCHECK_THREADS if set, else the hardware's.
#pragma once

#include <cstddef>
#include <functional>

namespace fc::kernels::cpu {

unsigned pool_threads();
void parallel_for(std::size_t n, const std::function<void(std::size_t)>& task);

}  // namespace fc::kernels::cpu
