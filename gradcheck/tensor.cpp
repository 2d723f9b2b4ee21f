#include "gradcheck/tensor.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/tensor_io.hpp"

namespace fc::gradcheck {

Tensor::Tensor(Format format, std::array<std::int64_t, 4> shape, Layout layout) {
  const std::int64_t elements = shape[0] * shape[1] * shape[2] * shape[3];
  bytes_.assign(static_cast<std::size_t>(elements) * static_cast<std::size_t>(format_info(format).bits / 8), std::byte{0});
  view_.data = bytes_.data();
  view_.format = format;
  view_.shape = shape;
  const std::int64_t H = shape[1], N = shape[2], D = shape[3];
  if (layout == Layout::bhnd) {
    view_.strides = {H * N * D, N * D, D, 1};
  } else {  // memory order B, N, H, D
    view_.strides = {N * H * D, D, H * D, 1};
  }
}

std::vector<double> Tensor::values() const { return kernels::read_as_double(view_); }

void Tensor::assign(std::span<const double> values) { kernels::write_from(view_, values, Rounding::nearest_even); }

bool Tensor::bitwise_equal(const Tensor& other) const {
  return view_.format == other.view_.format && view_.shape == other.view_.shape && bytes_.size() == other.bytes_.size() &&
         std::memcmp(bytes_.data(), other.bytes_.data(), bytes_.size()) == 0;
}

void Tensor::poison() {
  const std::size_t n = static_cast<std::size_t>(view_.shape[0] * view_.shape[1] * view_.shape[2] * view_.shape[3]);
  const std::vector<double> nan(n, std::numeric_limits<double>::quiet_NaN());
  kernels::write_from(view_, nan, Rounding::nearest_even);
}

bool Tensor::has_nonfinite() const {
  for (double x : values()) {
    if (!std::isfinite(x)) return true;
  }
  return false;
}

}  // namespace fc::gradcheck
