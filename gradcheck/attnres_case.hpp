// An AttnResCase: one Attention Residuals problem the harness puts to an attnres subject (the
// counterpart of case.hpp's attention Case). Text form: "N=3 B=1 T=5 D=16 S=2 eps=1e-06
// inputs=normal:1 policy=bf16,o=fp16 seed=7". Tensors are passed contiguous.
//
// Inputs (inputs.hpp): values and partial sums from the distribution (normal:SIGMA scales them;
// outliers adds N(0, 100) x Bernoulli(0.001)); pseudo-queries w with standard deviation g / sqrt(D),
// so the logits r_i (w . v_i) (keys RMS-normalised to norm sqrt(D)) have standard deviation about g:
// g = 1, except onehot (16: the softmax over sources nearly one-hot) and uniform (0.01).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gradcheck/case.hpp"
#include "kernels/attnres_call.hpp"

namespace fc::gradcheck {

struct AttnResCase {
  kernels::AttnResShape shape;
  PrecisionPolicy policy;
  InputDistribution inputs;
  std::uint64_t seed = 0;

  std::string to_string() const;
  static AttnResCase parse(std::string_view text);  // throws std::invalid_argument naming the field
};

}  // namespace fc::gradcheck
