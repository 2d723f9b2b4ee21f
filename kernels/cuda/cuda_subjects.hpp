// The CUDA kernels as harness subjects (builtin_subjects.cpp lists them when flashcheck is built with
// CUDA and a device is present):
//   cuda.fa1   FlashAttention v1, fwd and bwd (fa1_forward.cuh; its bwd is fa2_backward.cuh's dk_dv in sequential mode)
//   cuda.fa2   FlashAttention-2, fwd and bwd (fa2_forward.cuh, fa2_backward.cuh), deterministic bwd
//   cuda.fa2.fast  the same with FA2's fast bwd (dQ by atomics)
//   cuda.hog, cuda.hog.2pass  Flash Hog's double backward (hog_kernels.cuh); fwd, bwd: cuda.fa2's
//   cuda.attnres  Attention Residuals, phase 1 and 2, fwd and bwd (attnres_kernels.cuh, attnres_subject.cpp)
//   cuda.fa3, cuda.fa4  FlashAttention-3's forward and its FA4-style variant on Hopper only (fa3_kernels.cu)
//   cuda.fa3.fp8  FA3's FP8 forward on Hopper only (fa3_fp8_kernels.cu, fa3_fp8_subject.cpp)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention_call.hpp"

namespace fc::kernels::cuda {

// Empty when no CUDA device is usable (device_unavailable_reason() says why).
std::vector<std::unique_ptr<Subject>> make_cuda_subjects();
std::unique_ptr<Subject> make_cuda_attnres();  // (one of them)
std::unique_ptr<Subject> make_cuda_fa3_fp8();   // (Hopper only)
std::string device_unavailable_reason();
// Empty on a Hopper GPU (compute capability 9.x), where cuda.fa3, cuda.fa4 and cuda.fa3.fp8 are registered; else why not.
std::string hopper_unavailable_reason();
// The option `epilogue` of cuda.fa3, cuda.fa4 and cuda.fa3.fp8 (fa3_kernels.hpp's Fa3Epilogue): "automatic" or
// "stores"; SubjectError naming `who` otherwise.
enum class Fa3Epilogue : std::uint8_t;
Fa3Epilogue parse_fa3_epilogue(const std::string& who, const std::string& value);
// The option `tau` of cuda.fa4 and cuda.fa3.fp8 (the selective rule's threshold, log2 units): a number in [0, max_tau];
// SubjectError naming `who`, the range and `why` (the reason for the upper bound) otherwise.
float parse_tau(const std::string& who, const std::string& value, double max_tau, const std::string& why);
// The counter `rescales` from the device word a selective forward added its rescales to (nullptr before any run: none;
// a failed copy clears the CUDA error and gives none).
std::vector<Counter> rescale_counter(const void* device_word);

// "cuda: <the current device's name>".
std::string device_name();
// The SubjectInfo fields every CUDA attention family shares (fwd and bwd, bf16 and fp16, fp32 accumulation, d 64
// and 128, every mask, SR, deterministic, device memory); a family overrides what differs.
SubjectInfo cuda_attention_info(const std::string& name, const std::string& description);

}  // namespace fc::kernels::cuda
