#include "gradcheck/generators.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fc::gradcheck {
rc::Gen<int> sequence_lengths(int max_len, int min_len) {
  std::vector<int> stress;
  for (int n : {1, 2, 3, 5, 7, 13, 17, 31, 33, 47, 63, 65, 97, 127, 129, 131, 191, 255, 257}) {
    if (n >= min_len && n <= max_len) stress.push_back(n);
  }
  const int low = std::min(min_len, max_len);
  if (stress.empty()) stress.push_back(low);
  return rc::gen::oneOf(rc::gen::inRange(low, std::max(low, std::min(max_len, 20)) + 1), rc::gen::elementOf(stress));
}

rc::Gen<Case> case_generator(const kernels::SubjectInfo& info, const PrecisionPolicy& policy, const GeneratorLimits& limits) {
  const int max_seq = info.max_seq > 0 ? std::min(info.max_seq, limits.max_seq) : limits.max_seq;
  std::vector<int> dims = info.head_dims;
  if (dims.empty()) {
    for (int d = 1; d <= std::min(info.max_head_dim, limits.max_head_dim); ++d) {
      if (d <= 16 || d == 32 || d == 64 || d == 96 || d == 128 || d == 256) dims.push_back(d);
    }
  } else {
    dims.erase(std::remove_if(dims.begin(), dims.end(), [&](int d) { return d > limits.max_head_dim; }), dims.end());
    if (dims.empty()) dims = {*std::min_element(info.head_dims.begin(), info.head_dims.end())};
  }
  std::vector<kernels::Mask> masks = info.masks;
  std::sort(masks.begin(), masks.end());  // none first: shrinks to no mask
  const bool gqa = info.gqa, separate_dv = info.separate_dv, causal_equal_lengths = info.causal_equal_lengths;
  const int min_seq = info.min_seq;
  return rc::gen::exec([=] {
    Case c;
    c.policy = policy;
    c.shape.batch = *rc::gen::inRange(1, 3);
    c.shape.heads_kv = *rc::gen::inRange(1, 3);
    c.shape.heads_q = c.shape.heads_kv * (gqa ? *rc::gen::inRange(1, 4) : 1);
    c.mask = *rc::gen::elementOf(masks);
    c.shape.seq_q = *sequence_lengths(max_seq, min_seq);
    c.shape.seq_k = c.mask != kernels::Mask::none && causal_equal_lengths ? c.shape.seq_q : *sequence_lengths(max_seq, min_seq);
    c.shape.head_dim = *rc::gen::elementOf(dims);
    c.shape.head_dim_v = separate_dv && *rc::gen::inRange(0, 4) == 3 ? *rc::gen::elementOf(dims) : c.shape.head_dim;
    c.scale = *rc::gen::element(1.0, 0.5, 2.0, 0.125) / std::sqrt(static_cast<double>(c.shape.head_dim));
    c.inputs = *rc::gen::weightedElement<InputDistribution>({{6, {Distribution::normal, 1.0}},
                                                               {1, {Distribution::outliers, 1.0}},
                                                               {1, {Distribution::onehot, 1.0}},
                                                               {1, {Distribution::uniform, 1.0}},
                                                               {1, {Distribution::normal, 100.0}}});
    c.layout = *rc::gen::element(Layout::bhnd, Layout::bnhd);
    c.seed = *rc::gen::arbitrary<std::uint64_t>();
    return c;
  });
}

rc::Gen<AttnResCase> attnres_case_generator(const kernels::SubjectInfo& info, const PrecisionPolicy& policy,
                                            const GeneratorLimits& limits) {
  const int max_tokens = info.max_seq > 0 ? std::min(info.max_seq, limits.max_seq) : limits.max_seq;
  std::vector<int> dims;
  for (int d : {1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 40, 64, 72, 128, 256, 512}) {
    if (d <= std::min(info.max_head_dim, std::max(limits.max_head_dim, 8)) && info.supports_head_dim(d)) dims.push_back(d);
  }
  if (dims.empty()) dims = {info.head_dims.empty() ? 1 : info.head_dims.front()};
  // rows beyond fp16's range only where the values' format holds them (bf16, fp32, fp64)
  const bool wide_values = policy.format(Role::v) != Format::fp16;
  return rc::gen::exec([=] {
    AttnResCase c;
    c.policy = policy;
    c.shape.sources = *rc::gen::inRange(1, 9);
    c.shape.batch = *rc::gen::inRange(1, 3);
    c.shape.tokens = *sequence_lengths(max_tokens);
    c.shape.dim = *rc::gen::elementOf(dims);
    c.shape.layers = *rc::gen::inRange(1, 5);
    c.shape.eps = *rc::gen::weightedElement<double>({{6, 1e-6}, {1, 1e-5}, {1, 1e-3}});
    c.inputs = *rc::gen::weightedElement<InputDistribution>({{6, {Distribution::normal, 1.0}},
                                                               {1, {Distribution::outliers, 1.0}},
                                                               {1, {Distribution::onehot, 1.0}},
                                                               {1, {Distribution::uniform, 1.0}},
                                                               {1, {Distribution::normal, wide_values ? 1048576.0 : 256.0}},
                                                               {1, {Distribution::normal, 0.0009765625}}});
    c.seed = *rc::gen::arbitrary<std::uint64_t>();
    return c;
  });
}

int case_size(int index, int cases) {
  const int ramp = std::max(1, cases / 5);
  return std::min(100, index * 100 / ramp);
}

}  // namespace fc::gradcheck
