// What the GPU tests share: the skip without a device (or without a Hopper GPU), a registered subject by name,
// the count of entries two results differ in, the bit-for-bit tests' cases and two subjects' forwards compared bit for bit, and the harness's case count and seed from the environment (FLASHCHECK_GPU_CASES, default 2000; FLASHCHECK_GPU_SEED, default 2026), so that
// processes with different seeds run disjoint case streams in parallel (one stream per test, serial).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gradcheck/caller.hpp"
#include "gradcheck/inputs.hpp"
#include "kernels/cuda/cuda_subjects.hpp"

#define REQUIRE_GPU()                                                                                                         \
  do {                                                                                                                        \
    if (const std::string why = ::fc::kernels::cuda::device_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;         \
  } while (0)
// (cuda.fa3, cuda.fa4 and the Hopper primitives: wgmma and TMA, sm_90a)
#define REQUIRE_HOPPER()                                                                                                      \
  do {                                                                                                                        \
    if (const std::string why = ::fc::kernels::cuda::hopper_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;         \
  } while (0)

namespace fc::kernels::cuda::testing {

inline int harness_cases() {
  const char* env = std::getenv("FLASHCHECK_GPU_CASES");
  return env ? std::max(1, std::atoi(env)) : 2000;
}
inline std::uint64_t harness_seed() {
  const char* env = std::getenv("FLASHCHECK_GPU_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 2026;
}

// The registered CUDA subject of that name; nullptr when this device has none.
inline std::unique_ptr<Subject> registered_subject(const std::string& name) {
  for (auto& s : make_cuda_subjects()) {
    if (s->info().name == name) return std::move(s);
  }
  return nullptr;
}

// The value of the subject's counter of that name after its last run; -1 when it has none (cuda.fa3 counts nothing).
inline double counter_of(const Subject& s, const std::string& name) {
  for (const Counter& c : s.counters()) {
    if (c.name == name) return c.value;
  }
  return -1;
}

// The entries of `got` that differ from `want` (-inf equals -inf: L of a row that sees no key), and the first.
struct Difference {
  std::size_t count = 0, first = 0;
};
inline Difference differing(const std::vector<double>& got, const std::vector<double>& want) {
  Difference d{0, got.size()};
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) ++d.count, d.first = std::min(d.first, i);
  }
  return d;
}

// A bit-for-bit test's case: `shape` under `mask` with scale 1 / sqrt(d), the policy parsed from its text, and a seed
// from (d, Nq, Nk), so that the suites comparing the same shapes draw the same inputs.
inline gradcheck::Case forward_case(const AttentionShape& shape, Mask mask, const std::string& policy) {
  gradcheck::Case c;
  c.shape = shape;
  c.mask = mask, c.scale = 1 / std::sqrt(static_cast<double>(shape.head_dim));
  c.policy = PrecisionPolicy::parse(policy);
  c.seed = static_cast<std::uint64_t>(shape.head_dim * 1000000 + shape.seq_q * 1000 + shape.seq_k);
  return c;
}

// Expects the same O and L bits in two forwards' outputs already computed (a failure names `got_name`, `want_name`
// and the case): for tests that reuse one reference's outputs over several subjects.
inline void expect_output_bits(const gradcheck::Outputs& got, const gradcheck::Outputs& want, const std::string& got_name, const std::string& want_name,
                               const gradcheck::Case& c) {
  for (const char* t : {"O", "L"}) {
    const Difference d = differing(got.at(t).values(), want.at(t).values());
    EXPECT_EQ(d.count, 0u) << got_name << ": " << t << " differs from " << want_name << "'s in " << d.count << " entries (first at " << d.first << ") for "
                           << c.to_string();
  }
}

// Runs the forward of `got` and of `want` on case c's inputs and expects the same O and L bits (a failure names the
// case and `want_name`); the subjects' other state (counters) is the caller's to compare.
inline void expect_forward_bits(Subject& got, Subject& want, const gradcheck::Case& c, const std::string& want_name) {
  const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
  const gradcheck::Outputs want_out = gradcheck::Caller(want, c).fwd(in.q, in.k, in.v);
  expect_output_bits(gradcheck::Caller(got, c).fwd(in.q, in.k, in.v), want_out, got.info().name, want_name, c);
}

}  // namespace fc::kernels::cuda::testing
