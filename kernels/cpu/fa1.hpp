// cpu.fa1: FlashAttention v1 (key/value tiles outer, O rewritten normalised per key tile); fa1.cpp
// documents its rounding points.
#pragma once

#include <memory>

#include "kernels/attention_call.hpp"

namespace fc::kernels::cpu {

std::unique_ptr<Subject> make_cpu_fa1();

}  // namespace fc::kernels::cpu
