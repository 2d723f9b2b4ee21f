// The kernels' shape parameters from flashcheck's description of a call (host side): one conversion
// for the harness subject (cuda_subjects.cpp) and the PyTorch ops (kernels/torch/ops/attention_cuda.cpp).
#pragma once

#include "kernels/attention_call.hpp"
#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

inline AttentionShapeParams shape_params(const AttentionShape& shape, Mask mask, double scale) {
  AttentionShapeParams s;
  s.batch = shape.batch, s.heads_q = shape.heads_q, s.heads_kv = shape.heads_kv;
  s.seq_q = shape.seq_q, s.seq_k = shape.seq_k, s.head_dim = shape.head_dim;
  s.mask = mask == Mask::none ? CausalMask::none : mask == Mask::causal_top_left ? CausalMask::top_left : CausalMask::bottom_right;
  s.scale = static_cast<float>(scale);
  return s;
}

}  // namespace fc::kernels::cuda
