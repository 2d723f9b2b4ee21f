// Host memory accounting of a subject's calls (the memory-scaling experiment, the kernels' memory
// test): the library flashcheck_memory_counter replaces the global operator new and delete
// (memory_counter.cpp) with versions that count live bytes and their peak. Only the programs that
// link it (the flashcheck binary, those tests) count; the rest keep the standard allocator.
#pragma once

namespace fc::kernels::memory {

long long live_bytes();  // allocated through operator new and not yet freed
long long peak_bytes();  // the largest live_bytes() since the last reset_peak()
void reset_peak();       // peak := live

}  // namespace fc::kernels::memory
