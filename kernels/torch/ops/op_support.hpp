// What every flashcheck PyTorch op does at its boundary: argument parsing, TORCH_CHECK validation with
// messages that name the argument, the mapping from dtypes to a precision policy, and running a
// flashcheck subject with its errors turned into PyTorch errors (RuntimeError in Python).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>

#include "kernels/attention_call.hpp"

namespace fc::kernels::pt::ops {

// "none", "causal_tl" (or "top_left"), "causal_br" (or "bottom_right").
Mask parse_mask(c10::string_view text);
// The policy's text if given (its storage formats must be the tensors' dtypes), else the uniform
// policy of q's dtype.
PrecisionPolicy policy_for(const at::Tensor& q, const c10::optional<c10::string_view>& text);
// 1 / sqrt(d) when not given.
double scale_for(const at::Tensor& q, const c10::optional<double>& scale);

// TORCH_CHECKs: defined, `dims`-dimensional, of this dtype, on `device`, all values finite.
void check_tensor(const char* op, const char* what, const at::Tensor& t, int64_t dims, at::ScalarType dtype, const at::Device& device);
void check_finite(const char* op, const char* what, const at::Tensor& t);
// The same for several tensors with one device-to-host transfer (a CUDA op would otherwise wait for the
// device once per tensor); the error names the first tensor that is not finite.
void check_all_finite(const char* op, std::initializer_list<std::pair<const at::Tensor*, const char*>> tensors);
// The CUDA ops' NaN/Inf checks of their inputs (on by default), process-wide. They make each op wait
// for the device once (one 4-byte or few-byte transfer); off, an op never waits and NaN or Inf in an
// input flows into the outputs unreported, as with PyTorch's own ops. set_input_checks returns the
// previous setting (the op flashcheck::set_input_checks; flashcheck.input_checks in Python).
bool input_checks_enabled();
bool set_input_checks(bool enabled);
void check_same_shape(const char* op, const char* what, const at::Tensor& t, at::IntArrayRef shape);

// Runs `body` with the subject serialised (subjects keep counters and options) and every flashcheck
// error (SubjectError, std::invalid_argument) raised as a c10::Error naming the op.
void run_subject(const char* op, const std::string& subject_name, const std::function<void(Subject&)>& body);

// The CUDA dispatch before a CUDA kernel exists: a clear error, never a silent CPU round trip.
[[noreturn]] void no_cuda_kernel(const char* op, const std::string& subject_name);

}  // namespace fc::kernels::pt::ops
