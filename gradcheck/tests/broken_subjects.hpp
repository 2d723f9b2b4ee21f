// Deliberately broken subjects, one bug class each, to measure the harness's power (issue 4 item 7).
// Each is a small FA2-style CPU kernel -- forward over key tiles of 16 with an online softmax, backward
// from the saved O and L, double backward by the plain formulas -- in fp32 accumulation, with exactly
// one defect switched on. With Bug::none it is a correct subject (a control).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "kernels/attention_call.hpp"

namespace fc::gradcheck::testing {

enum class Bug {
  none,
  missing_rescale,       // the online softmax keeps the old accumulator when the running max grows
  wrong_scale,           // uses 1/sqrt(d) whatever scale the call gives
  causal_off_by_one,     // a causal row sees j < i instead of j <= i (and the bottom-right analogue)
  wrong_mask_alignment,  // bottom-right causal treated as top-left
  dropped_tail_tile,     // ignores the last key tile when Nk is not a multiple of the tile
  bf16_accumulation,     // the output accumulator is rounded to bf16 after every key tile
  wrong_delta,           // backward with D = rowsum(dO) instead of rowsum(dO o O)
  wrong_gqa_mapping,     // query head h reads kv head h % Hkv instead of h / (Hq / Hkv)
  dd_b_swapped,          // double backward swaps the row statistics dd and b
  nan_for_masked_rows,   // a fully masked row divides 0 by 0
  nondeterministic,      // the key-tile order (forward) and row order (backward) change from call to call
  ignores_strides,       // reads inputs as if contiguous [B, H, N, D], whatever their strides
  lse_without_max,       // returns L = log(sum exp(S - m)), forgetting + m
  dq_missing_scale,      // dQ without the softmax scale
};

std::string_view name(Bug b);
std::vector<Bug> all_bugs();  // every bug class except none

// name "broken.<bug>" ("control" for Bug::none); ops fwd, bwd, bwdbwd; formats bf16, fp16, fp32;
// every mask; GQA; claims determinism.
std::unique_ptr<kernels::Subject> make_broken_subject(Bug bug);

}  // namespace fc::gradcheck::testing
