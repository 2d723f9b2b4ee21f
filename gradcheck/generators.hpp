// rapidcheck generators of Cases within a subject's declared limits (SubjectInfo), for a fixed
// precision policy. Every choice shrinks toward the small and simple: lengths and head dims toward 1
// (or the first entry of a list), one batch and head, no mask, the default scale, normal inputs,
// the contiguous layout, seed 0.
#pragma once

#include <rapidcheck.h>

#include "gradcheck/attnres_case.hpp"
#include "gradcheck/case.hpp"
#include "kernels/attention_call.hpp"

namespace fc::gradcheck {

struct GeneratorLimits {
  int max_seq = 160;  // longest Nq, Nk drawn (and no more than the subject's own limit)
  int max_head_dim = 128;
};

// Sequence lengths: min_len..20, or values that stress tails and tiles: primes and neighbours of 16,
// 32, 64 and 128 multiples (within [min_len, max_len]).
rc::Gen<int> sequence_lengths(int max_len, int min_len = 1);

rc::Gen<Case> case_generator(const kernels::SubjectInfo& info, const PrecisionPolicy& policy, const GeneratorLimits& limits = {});

// AttnRes cases: N 1..8 sources, B 1..2, T from sequence_lengths (tails of the 64-token tasks
// included), D from 1..16 and multiples of 8 up to the limit (powers of two and not), S 1..4, eps
// 1e-6 (or 1e-5, 1e-3), inputs as for attention plus rows beyond fp16's range (sigma 2^20) when the
// values' format holds them and small ones (sigma 2^-10, where eps matters). Shrinks toward one source,
// one token, D = 1.
rc::Gen<AttnResCase> attnres_case_generator(const kernels::SubjectInfo& info, const PrecisionPolicy& policy,
                                            const GeneratorLimits& limits = {});

// rapidcheck scales ranges by a size from 0 to 100. Runs ramp it over the first fifth of their cases
// (small, fast cases first), then draw at full size; shrinking takes a failure back to small cases.
int case_size(int index, int cases);

}  // namespace fc::gradcheck
