// A minimal parallel loop for the oracle: independent tasks over std::threads, exceptions carried
// back to the caller. Thread count: FLASHCHECK_THREADS if set, else the hardware's.
#pragma once

#include <cstddef>
#include <functional>

namespace fc::oracle {

unsigned oracle_threads();
// Runs task(i) for i in [0, n); each i runs on exactly one thread. Rethrows the first exception.
void parallel_for(std::size_t n, const std::function<void(std::size_t)>& task);

}  // namespace fc::oracle
