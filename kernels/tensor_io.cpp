#include "kernels/tensor_io.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "precision/fp8.hpp"
#include "precision/half.hpp"
#include "precision/row_scale.hpp"

namespace fc::kernels {
namespace {

double load(const TensorView& t, std::int64_t offset) {
  switch (t.format) {
    case Format::fp64: return static_cast<const double*>(t.data)[offset];
    case Format::fp32: return static_cast<const float*>(t.data)[offset];
    case Format::fp16: return to_double(static_cast<const fp16*>(t.data)[offset]);
    case Format::bf16: return to_double(static_cast<const bf16*>(t.data)[offset]);
    case Format::e4m3: return to_double(static_cast<const e4m3*>(t.data)[offset]);
  }
  return 0;
}

template <class X>
void store(const TensorView& t, std::int64_t offset, X x, Rounding mode, std::uint32_t word) {
  switch (t.format) {
    case Format::fp64: static_cast<double*>(t.data)[offset] = static_cast<double>(x); return;
    case Format::fp32:
      if constexpr (std::is_same_v<X, double>) {
        static_cast<float*>(t.data)[offset] = round_to<float>(x, mode, word);
      } else {
        static_cast<float*>(t.data)[offset] = x;
      }
      return;
    case Format::fp16: static_cast<fp16*>(t.data)[offset] = round_to<fp16>(x, mode, word); return;
    case Format::bf16: static_cast<bf16*>(t.data)[offset] = round_to<bf16>(x, mode, word); return;
    case Format::e4m3: static_cast<e4m3*>(t.data)[offset] = round_to_e4m3(x, mode, word); return;
  }
}

template <class X>
void write_impl(const TensorView& t, std::span<const X> values, Rounding mode, RandomStream stream) {
  if (static_cast<std::int64_t>(values.size()) != t.elements()) {
    throw std::invalid_argument("write_from: " + std::to_string(values.size()) + " values for a tensor of " +
                                std::to_string(t.elements()));
  }
  const bool stochastic = mode == Rounding::stochastic;
  for_each_element(t, [&](std::int64_t i, std::int64_t off, auto...) {
    store(t, off, values[static_cast<std::size_t>(i)], mode, stochastic ? stream.word(static_cast<std::uint64_t>(i)) : 0u);
  });
}

template <class X>
std::vector<X> read_rows_impl(const TensorView& t, const TensorView& scale) {
  std::vector<X> out(static_cast<std::size_t>(t.elements()));
  for_each_element(t, [&](std::int64_t i, std::int64_t off, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t) {
    const double x = load(t, off);
    // x * scale is exact: the scale is a power of two and the product within the wider format's range
    out[static_cast<std::size_t>(i)] = static_cast<X>(scale.empty() ? x : x * load(scale, scale.offset(b, h, n, 0)));
  });
  return out;
}

template <class X>
void write_rows_impl(const TensorView& t, const TensorView& scale, std::span<const X> values, Rounding mode, RandomStream stream) {
  if (scale.empty()) return write_impl(t, values, mode, stream);
  if (static_cast<std::int64_t>(values.size()) != t.elements() || scale.shape[3] != 1 || scale.elements() * t.shape[3] != t.elements()) {
    throw std::invalid_argument("write_rows_from: values, tensor and row scales do not match");
  }
  const std::size_t width = static_cast<std::size_t>(t.shape[3]);
  std::vector<X> scaled(values.size());
  std::vector<double> scales(values.size() / std::max<std::size_t>(width, 1));
  for (std::size_t r = 0; r < scales.size(); ++r) {
    scales[r] = fc::fp16_row_scale_of(&values[r * width], width);
    for (std::size_t c = 0; c < width; ++c) scaled[r * width + c] = static_cast<X>(values[r * width + c] / scales[r]);  // exact
  }
  write_impl(scale, std::span<const double>(scales), Rounding::nearest_even, {});
  write_impl(t, std::span<const X>(scaled), mode, stream);
}

}  // namespace

std::vector<double> read_rows_as_double(const TensorView& t, const TensorView& scale) { return read_rows_impl<double>(t, scale); }
std::vector<float> read_rows_as_float(const TensorView& t, const TensorView& scale) { return read_rows_impl<float>(t, scale); }
void write_rows_from(const TensorView& t, const TensorView& scale, std::span<const double> values, Rounding mode, RandomStream stream) {
  write_rows_impl(t, scale, values, mode, stream);
}
void write_rows_from(const TensorView& t, const TensorView& scale, std::span<const float> values, Rounding mode, RandomStream stream) {
  write_rows_impl(t, scale, values, mode, stream);
}

std::vector<double> read_as_double(const TensorView& t) {
  std::vector<double> out(static_cast<std::size_t>(t.elements()));
  for_each_element(t, [&](std::int64_t i, std::int64_t off, auto...) { out[static_cast<std::size_t>(i)] = load(t, off); });
  return out;
}

std::vector<float> read_as_float(const TensorView& t) {
  std::vector<float> out(static_cast<std::size_t>(t.elements()));
  for_each_element(t, [&](std::int64_t i, std::int64_t off, auto...) {
    out[static_cast<std::size_t>(i)] = static_cast<float>(load(t, off));
  });
  return out;
}

void write_from(const TensorView& t, std::span<const double> values, Rounding mode, RandomStream stream) {
  write_impl(t, values, mode, stream);
}
void write_from(const TensorView& t, std::span<const float> values, Rounding mode, RandomStream stream) {
  write_impl(t, values, mode, stream);
}

void require_finite(const TensorView& t, const std::string& who, const std::string& what) {
  for_each_element(t, [&](std::int64_t, std::int64_t off, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t c) {
    if (!std::isfinite(load(t, off))) {
      throw SubjectError(who + ": " + what + " contains a non-finite value at [" + std::to_string(b) + ", " + std::to_string(h) +
                         ", " + std::to_string(n) + ", " + std::to_string(c) + "]");
    }
  });
}

}  // namespace fc::kernels
