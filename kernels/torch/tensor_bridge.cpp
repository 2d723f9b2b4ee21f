#include "kernels/torch/tensor_bridge.hpp"

#include <c10/util/Exception.h>
#include <torch/version.h>

namespace fc::kernels::pt {

at::ScalarType dtype_of(Format f) {
  switch (f) {
    case Format::fp64: return at::kDouble;
    case Format::fp32: return at::kFloat;
    case Format::fp16: return at::kHalf;
    case Format::bf16: return at::kBFloat16;
    case Format::e4m3:
#if TORCH_VERSION_MAJOR >= 2
      return at::ScalarType::Float8_e4m3fn;
#else
      break;  // (libtorch 1.x has no FP8 dtype)
#endif
  }
  TORCH_CHECK(false, "flashcheck: unknown format");
}

std::optional<Format> format_of(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return Format::fp64;
    case at::kFloat: return Format::fp32;
    case at::kHalf: return Format::fp16;
    case at::kBFloat16: return Format::bf16;
#if TORCH_VERSION_MAJOR >= 2
    case at::ScalarType::Float8_e4m3fn: return Format::e4m3;
#endif
    default: return std::nullopt;
  }
}

namespace {

Format required_format(const at::Tensor& t) {
  const std::optional<Format> f = format_of(t.scalar_type());
  TORCH_CHECK(f, "flashcheck: tensors of dtype ", t.scalar_type(), " are not supported (float64, float32, float16, bfloat16)");
  return *f;
}

}  // namespace

TensorView view_of(const at::Tensor& t) {
  TORCH_CHECK(t.dim() >= 1 && t.dim() <= 4, "flashcheck: expected a tensor of 1 to 4 dimensions, got ", t.dim());
  TensorView v;
  v.data = t.data_ptr();
  v.format = required_format(t);
  const int pad = 4 - static_cast<int>(t.dim());
  for (int i = 0; i < 4; ++i) {
    v.shape[i] = i < pad ? 1 : t.size(i - pad);
    v.strides[i] = i < pad ? 0 : t.stride(i - pad);
  }
  return v;
}

TensorView view_with_trailing_unit(const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 3, "flashcheck: expected a 3-dimensional statistic, got ", t.dim(), " dimensions");
  TensorView v;
  v.data = t.data_ptr();
  v.format = required_format(t);
  for (int i = 0; i < 3; ++i) v.shape[i] = t.size(i), v.strides[i] = t.stride(i);
  v.shape[3] = 1, v.strides[3] = 1;
  return v;
}

at::Tensor tensor_of(const TensorView& v) {
  return at::from_blob(v.data, at::IntArrayRef(v.shape.data(), 4), at::IntArrayRef(v.strides.data(), 4),
                       at::TensorOptions().dtype(dtype_of(v.format)).device(at::kCPU));
}

void store(const TensorView& out, const at::Tensor& value) {
  at::Tensor target = tensor_of(out);
  if (value.defined()) {
    target.copy_(value.detach().reshape(target.sizes()));
  } else {
    target.zero_();
  }
}

}  // namespace fc::kernels::pt

namespace fc::kernels::pt {

void require_uniform_policy(const SubjectInfo& info, const PrecisionPolicy& policy) {
  const PrecisionPolicy uniform = PrecisionPolicy::uniform(policy.format(Role::q));
  if (!(policy == uniform)) {
    throw SubjectError(info.name + ": PyTorch computes in one dtype; policy " + policy.to_string() +
                       " is not the uniform policy " + uniform.to_string());
  }
}

void rethrow_as_subject_error(const SubjectInfo& info, const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  throw SubjectError(info.name + ": PyTorch: " + (torch_error ? torch_error->what_without_backtrace() : e.what()));
}

}  // namespace fc::kernels::pt
