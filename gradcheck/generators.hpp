// rapidcheck generators of Cases within a subject's declared limits (SubjectInfo), for a fixed
// precision policy. Every choice shrinks toward the small and simple: lengths and head dims toward 1
// (or the first entry of a list), one batch and head, no mask, the default scale, normal inputs,
// the contiguous layout, seed 0.
#pragma once

#include <rapidcheck.h>

#include "gradcheck/case.hpp"
#include "kernels/attention_call.hpp"

namespace fc::gradcheck {

struct GeneratorLimits {
  int max_seq = 160;  // longest Nq, Nk drawn (and no more than the subject's own limit)
  int max_head_dim = 128;
};

// Sequence lengths: 1..20, or values that stress tails and tiles: primes and neighbours of 16, 32,
// 64 and 128 multiples (bounded by `max_len`).
rc::Gen<int> sequence_lengths(int max_len);

rc::Gen<Case> case_generator(const kernels::SubjectInfo& info, const PrecisionPolicy& policy, const GeneratorLimits& limits = {});

// rapidcheck scales ranges by a size from 0 to 100. Runs ramp it over the first fifth of their cases
// (small, fast cases first), then draw at full size; shrinking takes a failure back to small cases.
int case_size(int index, int cases);

}  // namespace fc::gradcheck
