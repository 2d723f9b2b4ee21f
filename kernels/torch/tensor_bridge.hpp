// Between libtorch tensors and flashcheck's call descriptions (attention_call.hpp): dtypes and
// formats, strided views both ways. Shared by the torch subjects (which run PyTorch on the harness's
// buffers) and the PyTorch ops (which run flashcheck's kernels on PyTorch's tensors).
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "kernels/attention_call.hpp"

namespace fc::kernels::pt {

at::ScalarType dtype_of(Format f);
std::optional<Format> format_of(at::ScalarType t);  // none for dtypes flashcheck has no format for

// A TensorView of a CPU tensor of up to 4 dimensions, no copy: missing leading dimensions get size 1
// (a [S, B, T] statistic is seen as [S, B, T, 1] by putting the 1 last: see `trailing_unit`).
// The tensor must outlive the view. Throws c10::Error for an unsupported dtype.
TensorView view_of(const at::Tensor& t);
// The view of a 3-dimensional tensor as [d0, d1, d2, 1] (row statistics).
TensorView view_with_trailing_unit(const at::Tensor& t);

// A tensor over a view's memory (no copy; on the CPU). The view's memory must outlive it.
at::Tensor tensor_of(const TensorView& v);
// Writes a result (on any device, in the view's element count) into a caller's host output, converted
// to its dtype; an undefined result (autograd found no dependence) writes zeros.
void store(const TensorView& out, const at::Tensor& value);

}  // namespace fc::kernels::pt

namespace fc::kernels::pt {

// PyTorch computes in the dtype of its tensors: a torch subject accepts only the uniform policy of its
// storage format (accumulation fp32, fp64 for fp64; round to nearest). Throws SubjectError otherwise.
void require_uniform_policy(const SubjectInfo& info, const PrecisionPolicy& policy);

// A PyTorch error (c10::Error) as the SubjectError the harness reports: "<subject>: PyTorch: <message>".
[[noreturn]] void rethrow_as_subject_error(const SubjectInfo& info, const std::exception& e);

}  // namespace fc::kernels::pt
