// A tensor the harness owns: storage in a format and a memory layout, a view to pass to subjects,
// and its exact values (every format widens exactly to double) for the oracle and the baseline.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "gradcheck/case.hpp"
#include "kernels/attention_call.hpp"

namespace fc::gradcheck {

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled, [B, H, N, D] logical, laid out per `layout`.
  Tensor(Format format, std::array<std::int64_t, 4> shape, Layout layout);
  // The view points into this object's own storage, so copies and moves re-point it.
  Tensor(const Tensor& other) : bytes_(other.bytes_), view_(other.view_) { view_.data = bytes_.data(); }
  Tensor(Tensor&& other) noexcept : bytes_(std::move(other.bytes_)), view_(other.view_) {
    view_.data = bytes_.data();
    other.view_ = {};  // a moved-from tensor views nothing (not the storage it gave away)
  }
  Tensor& operator=(const Tensor& other) {
    bytes_ = other.bytes_;
    view_ = other.view_;
    view_.data = bytes_.data();
    return *this;
  }
  Tensor& operator=(Tensor&& other) noexcept {
    if (this == &other) return *this;
    bytes_ = std::move(other.bytes_);
    view_ = other.view_;
    view_.data = bytes_.data();
    other.view_ = {};
    return *this;
  }

  const kernels::TensorView& view() const { return view_; }
  std::vector<double> values() const;             // contiguous logical order, exact
  void assign(std::span<const double> values);    // rounds each to the format (round to nearest even)
  bool bitwise_equal(const Tensor& other) const;  // same bits in every element
  bool has_nonfinite() const;
  // Every element a quiet NaN: outputs are poisoned before each call, so an entry the subject never
  // writes cannot pass by being left at a plausible value (zero is the right answer surprisingly often).
  void poison();

 private:
  std::vector<std::byte> bytes_;
  kernels::TensorView view_;
};

}  // namespace fc::gradcheck
