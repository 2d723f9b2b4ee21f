// Shared by the CPU flash backends (flash_attention.cpp, fa1.cpp, hog.cpp): the problem read once
// into contiguous arrays in the accumulation type, with K and V also transposed per kv head so tile
// products run as row axpys (tile_math.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/attention_call.hpp"
#include "kernels/cpu/tile_math.hpp"
#include "kernels/tensor_io.hpp"

namespace fc::kernels::cpu {

constexpr double kLog2e = std::numbers::log2e;
constexpr double kLn2 = std::numbers::ln2;

template <class A>
constexpr A minus_inf() {
  return -std::numeric_limits<A>::infinity();
}

template <class A>
std::vector<A> read(const TensorView& t) {
  if constexpr (std::is_same_v<A, double>) {
    return read_as_double(t);
  } else {
    return read_as_float(t);
  }
}

// The whole problem, read once: contiguous inputs, K and V transposed per kv head (d x Nk), shapes.
template <class A>
struct Problem {
  const AttentionCall& c;
  int B, Hq, Hkv, group, nq, nk, d, dv, offset;  // offset: the causal diagonal, Nk - Nq for bottom-right
  std::vector<A> q, k, v, kt, vt;
  Format t;  // the storage format intermediates are rounded to before products

  explicit Problem(const AttentionCall& call) : c(call) {
    const AttentionShape& s = call.shape;
    B = s.batch, Hq = s.heads_q, Hkv = s.heads_kv, group = Hq / Hkv, nq = s.seq_q, nk = s.seq_k, d = s.head_dim, dv = s.head_dim_v;
    offset = call.mask == Mask::causal_bottom_right ? nk - nq : 0;
    q = read<A>(call.q), k = read<A>(call.k), v = read<A>(call.v);
    kt.resize(k.size()), vt.resize(v.size());
    for (int h = 0; h < B * Hkv; ++h) {
      transpose(nk, d, &k[static_cast<std::size_t>(h) * nk * d], &kt[static_cast<std::size_t>(h) * nk * d]);
      transpose(nk, dv, &v[static_cast<std::size_t>(h) * nk * dv], &vt[static_cast<std::size_t>(h) * nk * dv]);
    }
    t = call.policy.format(Role::v);
  }
  bool causal() const { return c.mask != Mask::none; }
  bool visible(int i, int j) const { return !causal() || j <= i + offset; }
  // Key tiles [j0, j1) that rows [r0, r1) can see at all: up to the last row's diagonal.
  int key_end(int r1) const { return causal() ? std::clamp(r1 - 1 + offset + 1, 0, nk) : nk; }
  std::size_t kv_head(int b, int h) const { return static_cast<std::size_t>(b) * Hkv + h / group; }
};

// A tile-size option's value: an integer in 1..1024, else SubjectError naming the option.
inline int parse_tile_size(const SubjectInfo& info, const std::string& name, const std::string& value) {
  int v = 0;
  try {
    std::size_t used = 0;
    v = std::stoi(value, &used);
    if (used != value.size()) v = 0;
  } catch (const std::logic_error&) {
    v = 0;
  }
  if (v < 1 || v > 1024) throw SubjectError(info.name + ": option " + name + "=" + value + ": a tile size in 1..1024");
  return v;
}

}  // namespace fc::kernels::cpu
