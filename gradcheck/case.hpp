// A Case: one attention problem the harness puts to a subject. Everything needed to reproduce it is
// here: shapes, mask, softmax scale, precision policy, how inputs are drawn, the memory layout the
// tensors are passed in, and the seed. Its text form (to_string / parse) is what failure reports,
// reproduce commands and the regression corpus carry.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/attention_call.hpp"
#include "precision/policy.hpp"

namespace fc::gradcheck {

// How the inputs Q, K, V are drawn (dO and the double backward's cotangents are always N(0, 1)):
//   normal:  N(0, sigma^2)
//   outliers: N(0, 1) + N(0, 100) x Bernoulli(0.001)   (a rare component of standard deviation 10)
//   onehot:  Q, K scaled so the logits s q.k have standard deviation 16: the softmax is nearly one-hot
//   uniform: Q, K scaled so the logits have standard deviation 0.01: the softmax is nearly uniform
//   logits:T  Q, K scaled so the logits have standard deviation T (onehot is logits:16, uniform
//             logits:0.01; the flatness experiment sweeps T)
//   outliers:RATE:SIGMA  N(0, 1) + N(0, SIGMA^2) x Bernoulli(RATE) (the outliers experiment sweeps RATE)
enum class Distribution { normal, outliers, onehot, uniform, logits };
struct InputDistribution {
  Distribution kind = Distribution::normal;
  double sigma = 1.0;  // normal: the standard deviation; logits: the logits' standard deviation
  double outlier_rate = 0.001;  // outliers: the chance of the rare component
  double outlier_sigma = 10.0;  // outliers: its standard deviation
  // "normal:1", "outliers" (the default mix) or "outliers:0.01:10", "onehot", "uniform", "logits:4"
  std::string to_string() const;
  static InputDistribution parse(const std::string& text);  // throws std::invalid_argument
  // The logits' standard deviation this distribution asks for, or 0 when Q and K are drawn as they are.
  double logit_sigma() const;
};

// Memory order of every [B, H, N, D] tensor passed to the subject: contiguous B, H, N, D, or
// PyTorch's usual B, N, H, D (so a subject that ignores strides is caught).
enum class Layout { bhnd, bnhd };
std::string_view name(Layout l);

struct Case {
  kernels::AttentionShape shape;
  kernels::Mask mask = kernels::Mask::none;
  double scale = 1.0;
  PrecisionPolicy policy;
  InputDistribution inputs;
  Layout layout = Layout::bhnd;
  std::uint64_t seed = 0;

  // "B=1 Hq=2 Hkv=1 Nq=3 Nk=5 d=4 dv=4 mask=causal_br scale=0.5 inputs=normal:1 layout=bhnd policy=bf16 seed=7"
  std::string to_string() const;
  // Throws std::invalid_argument naming the field at fault.
  static Case parse(std::string_view text);
};

// Field parsers shared by the case texts (throw std::invalid_argument saying what was wrong).
int positive_int_field(const std::string& v);
double finite_field(const std::string& v);      // the whole token, finite
std::uint64_t unsigned_field(const std::string& v);  // digits only

}  // namespace fc::gradcheck
