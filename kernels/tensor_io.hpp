// Reading and writing strided, typed tensors (TensorView) from contiguous arrays: what a CPU backend
// or the harness does at the boundary of a call. Element indices for stochastic rounding are linear
// indices of the logical [B, H, N, D] tensor, so the memory layout never changes the random bits.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kernels/attention_call.hpp"
#include "precision/philox.hpp"
#include "precision/rounding.hpp"

namespace fc::kernels {

// Calls fn(logical index, element offset, b, h, n, c) for every element of t in logical [B, H, N, D]
// order (the order of the contiguous arrays below).
template <class Fn>
void for_each_element(const TensorView& t, Fn&& fn) {
  std::int64_t linear = 0;
  for (std::int64_t b = 0; b < t.shape[0]; ++b)
    for (std::int64_t h = 0; h < t.shape[1]; ++h)
      for (std::int64_t n = 0; n < t.shape[2]; ++n)
        for (std::int64_t c = 0; c < t.shape[3]; ++c) fn(linear++, t.offset(b, h, n, c), b, h, n, c);
}

// Contiguous [B, H, N, D] copy. Widening to double is exact for every format; to float it is exact
// for fp32 and narrower, and rounds fp64 to nearest.
std::vector<double> read_as_double(const TensorView& t);
std::vector<float> read_as_float(const TensorView& t);

// Stores contiguous values into t, rounding to t's format with `mode` (words from `stream` for SR).
void write_from(const TensorView& t, std::span<const double> values, Rounding mode, RandomStream stream = {});
void write_from(const TensorView& t, std::span<const float> values, Rounding mode, RandomStream stream = {});

// Rows with per-row scales (precision/row_scale.hpp; AttnRes's fp16 storage): row r of t (its last
// dimension) holds x / scale[r]. With an empty `scale` these are read_as_* and write_from. The write
// picks each row's scale from its largest finite magnitude (fp16_row_scale), stores it in `scale`
// (fp32), and rounds x / scale with the word of the element's logical index.
std::vector<double> read_rows_as_double(const TensorView& t, const TensorView& scale);
std::vector<float> read_rows_as_float(const TensorView& t, const TensorView& scale);
void write_rows_from(const TensorView& t, const TensorView& scale, std::span<const double> values, Rounding mode,
                     RandomStream stream = {});
void write_rows_from(const TensorView& t, const TensorView& scale, std::span<const float> values, Rounding mode,
                     RandomStream stream = {});

// Throws SubjectError("<who>: <what> contains a non-finite value at [b, h, n, c]") if it does.
void require_finite(const TensorView& t, const std::string& who, const std::string& what);

}  // namespace fc::kernels
