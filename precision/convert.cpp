#include "precision/convert.hpp"

#include <stdexcept>
#include <string>

namespace fc {
namespace {

void check_lengths(const char* what, std::size_t in, std::size_t out) {
  if (in != out) {
    throw std::invalid_argument(std::string(what) + ": input has " + std::to_string(in) +
                                " elements, output has " + std::to_string(out));
  }
}

template <class To, class From>
void round_array_impl(std::span<const From> in, std::span<To> out, Rounding mode,
                      RandomStream stream, std::uint64_t first_index) {
  check_lengths("round_array", in.size(), out.size());
  const std::size_t n = in.size();
  if (mode != Rounding::stochastic) {
    // A separate loop per mode keeps the hot loop branch-free so the compiler can vectorise it.
    if (mode == Rounding::nearest_even) {
      for (std::size_t i = 0; i < n; ++i) out[i] = round_to<To>(in[i], Rounding::nearest_even);
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = round_to<To>(in[i], Rounding::toward_zero);
    }
    return;
  }
  // One Philox call yields the words of four consecutive elements (an aligned group of the tensor).
  std::size_t i = 0;
  while (i < n) {
    const std::uint64_t element = first_index + i;
    const Words4 words = stream.group(element >> 2);
    for (unsigned lane = static_cast<unsigned>(element & 3); lane < 4 && i < n; ++lane, ++i) {
      out[i] = round_to<To>(in[i], Rounding::stochastic, words.w[lane]);
    }
  }
}

template <class From>
void widen_impl(std::span<const From> in, std::span<float> out) {
  check_lengths("widen_array", in.size(), out.size());
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = to_float(in[i]);
}

}  // namespace

void round_array(std::span<const float> in, std::span<bf16> out, Rounding mode, RandomStream stream,
                 std::uint64_t first_index) {
  round_array_impl(in, out, mode, stream, first_index);
}
void round_array(std::span<const float> in, std::span<fp16> out, Rounding mode, RandomStream stream,
                 std::uint64_t first_index) {
  round_array_impl(in, out, mode, stream, first_index);
}
void round_array(std::span<const double> in, std::span<bf16> out, Rounding mode, RandomStream stream,
                 std::uint64_t first_index) {
  round_array_impl(in, out, mode, stream, first_index);
}
void round_array(std::span<const double> in, std::span<fp16> out, Rounding mode, RandomStream stream,
                 std::uint64_t first_index) {
  round_array_impl(in, out, mode, stream, first_index);
}
void round_array(std::span<const double> in, std::span<float> out, Rounding mode,
                 RandomStream stream, std::uint64_t first_index) {
  round_array_impl(in, out, mode, stream, first_index);
}

void widen_array(std::span<const bf16> in, std::span<float> out) { widen_impl(in, out); }
void widen_array(std::span<const fp16> in, std::span<float> out) { widen_impl(in, out); }

}  // namespace fc
