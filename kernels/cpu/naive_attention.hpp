// cpu.naive: plain (non-flash) attention following a precision policy, so the harness has a subject
// before the flash backends exist. Inputs are read in their storage formats, every intermediate (S,
// P, dP, dS, ...) is kept in the policy's accumulation format (fp32, or fp64), and outputs are rounded
// to their roles' formats with the policy's rounding (stochastic rounding draws the shared Philox
// words of each output's stream). It materialises the [Nq, Nk] matrices: O(N^2) memory by design.
#pragma once

#include <memory>

#include "kernels/attention_call.hpp"

namespace fc::kernels {

std::unique_ptr<Subject> make_cpu_naive();

}  // namespace fc::kernels
