// What the oracle is asked to compute for attention: shapes, mask and softmax scale, with the
// validation every entry point applies (clear errors, never a wrong answer).
//
// Layouts (row-major, contiguous): Q [B, Hq, Nq, d], K [B, Hkv, Nk, d], V [B, Hkv, Nk, dv],
// O and dO [B, Hq, Nq, dv], L and D [B, Hq, Nq]. Query head h reads kv head h / (Hq / Hkv).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "oracle/scalar.hpp"

namespace fc::oracle {

// Causal masks in both conventions (EQUATIONS.md section 1); they differ when Nq != Nk.
//   causal_top_left:     (i, j) visible iff j <= i
//   causal_bottom_right: (i, j) visible iff j <= i + (Nk - Nq)   (FlashAttention >= 2.1)
// A row with no visible key has O_i = 0 and L_i = -inf, and contributes no gradient.
enum class Mask { none, causal_top_left, causal_bottom_right };
std::string_view name(Mask m);  // "none", "causal_tl", "causal_br"
std::optional<Mask> parse_mask(std::string_view text);

struct AttentionShape {
  int batch = 1;
  int heads_q = 1;
  int heads_kv = 1;
  int seq_q = 1;
  int seq_k = 1;
  int head_dim = 1;    // d
  int head_dim_v = 1;  // dv

  std::size_t q_size() const { return n(batch) * n(heads_q) * n(seq_q) * n(head_dim); }
  std::size_t k_size() const { return n(batch) * n(heads_kv) * n(seq_k) * n(head_dim); }
  std::size_t v_size() const { return n(batch) * n(heads_kv) * n(seq_k) * n(head_dim_v); }
  std::size_t o_size() const { return n(batch) * n(heads_q) * n(seq_q) * n(head_dim_v); }
  std::size_t row_size() const { return n(batch) * n(heads_q) * n(seq_q); }  // L, D
  int group() const { return heads_q / heads_kv; }

 private:
  static std::size_t n(int v) { return static_cast<std::size_t>(v); }
};

struct AttentionProblem {
  AttentionShape shape;
  Mask mask = Mask::none;
  double scale = 1.0;  // softmax scale s; the caller passes the exact value its subject uses

  // Throws std::invalid_argument: a dimension below 1 (an empty sequence included), Hq not a
  // multiple of Hkv, a non-finite scale.
  void validate() const;
  bool visible(int i, int j) const {
    switch (mask) {
      case Mask::none: return true;
      case Mask::causal_top_left: return j <= i;
      case Mask::causal_bottom_right: return j <= i + (shape.seq_k - shape.seq_q);
    }
    return false;
  }
  std::string to_string() const;  // "B=1 Hq=2 Hkv=1 Nq=3 Nk=5 d=4 dv=2 mask=causal_br scale=0.5"
};

double default_scale(int head_dim);  // 1 / sqrt(d)

// Throws std::invalid_argument naming the array when its size is not `expected` or it holds a
// NaN or an infinity (the oracle has no reference for those).
template <class T>
void check_array(std::string_view what, std::span<const T> a, std::size_t expected) {
  if (a.size() != expected) {
    throw std::invalid_argument(std::string(what) + " has " + std::to_string(a.size()) + " elements, the shape needs " +
                                std::to_string(expected));
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!is_finite(a[i])) {
      throw std::invalid_argument(std::string(what) + "[" + std::to_string(i) + "] is not finite");
    }
  }
}

}  // namespace fc::oracle
