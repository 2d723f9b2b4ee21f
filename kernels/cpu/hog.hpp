// cpu.hog and cpu.hog.2pass: the Flash Hog double backward (hog.cpp documents the passes and rounding
// points); their fwd and bwd are cpu.fa2's, so a whole Hessian-vector product runs on them.
#pragma once

#include <memory>

#include "kernels/attention_call.hpp"

namespace fc::kernels::cpu {

std::unique_ptr<Subject> make_cpu_hog();
std::unique_ptr<Subject> make_cpu_hog_two_pass();

}  // namespace fc::kernels::cpu
