#include "gradcheck/tests/broken_subjects.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/tensor_io.hpp"
#include "precision/half.hpp"
#include "precision/rounding.hpp"

namespace fc::gradcheck::testing {

std::string_view name(Bug b) {
  switch (b) {
    case Bug::none: return "none";
    case Bug::missing_rescale: return "missing_rescale";
    case Bug::wrong_scale: return "wrong_scale";
    case Bug::causal_off_by_one: return "causal_off_by_one";
    case Bug::wrong_mask_alignment: return "wrong_mask_alignment";
    case Bug::dropped_tail_tile: return "dropped_tail_tile";
    case Bug::bf16_accumulation: return "bf16_accumulation";
    case Bug::wrong_delta: return "wrong_delta";
    case Bug::wrong_gqa_mapping: return "wrong_gqa_mapping";
    case Bug::dd_b_swapped: return "dd_b_swapped";
    case Bug::nan_for_masked_rows: return "nan_for_masked_rows";
    case Bug::nondeterministic: return "nondeterministic";
    case Bug::ignores_strides: return "ignores_strides";
    case Bug::lse_without_max: return "lse_without_max";
    case Bug::dq_missing_scale: return "dq_missing_scale";
  }
  return "?";
}

std::vector<Bug> all_bugs() {
  return {Bug::missing_rescale,    Bug::wrong_scale,      Bug::causal_off_by_one, Bug::wrong_mask_alignment, Bug::dropped_tail_tile,
          Bug::bf16_accumulation,  Bug::wrong_delta,      Bug::wrong_gqa_mapping, Bug::dd_b_swapped,         Bug::nan_for_masked_rows,
          Bug::nondeterministic,   Bug::ignores_strides,  Bug::lse_without_max,   Bug::dq_missing_scale};
}

namespace {

using kernels::AttentionCall;
using kernels::Op;
using kernels::TensorView;
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
constexpr int kTile = 16;

class Broken final : public kernels::Subject {
 public:
  explicit Broken(Bug bug) : bug_(bug) {
    info_.name = bug == Bug::none ? "control" : "broken." + std::string(name(bug));
    info_.description = "a tiled FA2-style CPU kernel with one deliberate bug";
    info_.ops = {Op::fwd, Op::bwd, Op::bwdbwd};
    info_.formats = {Format::bf16, Format::fp16, Format::fp32};
    info_.masks = {kernels::Mask::none, kernels::Mask::causal_top_left, kernels::Mask::causal_bottom_right};
  }
  const kernels::SubjectInfo& info() const override { return info_; }

  void run(Op op, const AttentionCall& c) override {
    kernels::validate_call(info_, op, c);
    ++calls_;
    if (op == Op::fwd) forward(c);
    if (op == Op::bwd) backward(c, false);
    if (op == Op::bwdbwd) backward(c, true);
  }

 private:
  // Inputs as contiguous floats; the ignores_strides bug reads memory as if it were contiguous.
  std::vector<float> input(const TensorView& t) const {
    if (bug_ != Bug::ignores_strides) return kernels::read_as_float(t);
    TensorView flat = kernels::contiguous_view(t.data, t.format, t.shape);
    return kernels::read_as_float(flat);
  }
  bool visible(const AttentionCall& c, int i, int j) const {
    const int nq = c.shape.seq_q, nk = c.shape.seq_k;
    kernels::Mask m = c.mask;
    if (bug_ == Bug::wrong_mask_alignment && m == kernels::Mask::causal_bottom_right) m = kernels::Mask::causal_top_left;
    if (bug_ == Bug::causal_off_by_one && m != kernels::Mask::none) {
      return m == kernels::Mask::causal_top_left ? j < i : j < i + (nk - nq);
    }
    return kernels::visible(m, i, j, nq, nk);
  }
  int kv_head(const AttentionCall& c, int h) const {
    return bug_ == Bug::wrong_gqa_mapping ? h % c.shape.heads_kv : h / (c.shape.heads_q / c.shape.heads_kv);
  }
  float scale(const AttentionCall& c) const {
    return bug_ == Bug::wrong_scale ? 1.0f / std::sqrt(static_cast<float>(c.shape.head_dim)) : static_cast<float>(c.scale);
  }
  void store(const TensorView& t, const std::vector<float>& x, const AttentionCall& c, Role role) const {
    kernels::write_from(t, std::span<const float>(x), c.policy.rounding, c.policy.stream(role));
  }

  void forward(const AttentionCall& c) const {
    const auto& s = c.shape;
    const int nq = s.seq_q, nk = s.seq_k, d = s.head_dim, dv = s.head_dim_v, tiles = (nk + kTile - 1) / kTile;
    const std::vector<float> q = input(c.q), k = input(c.k), v = input(c.v);
    std::vector<float> o(static_cast<std::size_t>(s.batch) * s.heads_q * nq * dv), lse(static_cast<std::size_t>(s.batch) * s.heads_q * nq);
    const float sc = scale(c);
    std::vector<float> acc(dv);
    for (int b = 0; b < s.batch; ++b) {
      for (int h = 0; h < s.heads_q; ++h) {
        const std::size_t kh = static_cast<std::size_t>(b) * s.heads_kv + kv_head(c, h);
        for (int i = 0; i < nq; ++i) {
          const std::size_t row = (static_cast<std::size_t>(b) * s.heads_q + h) * nq + i;
          float m = kMinusInf, l = 0;
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int step = 0; step < tiles; ++step) {
            const int t = bug_ == Bug::nondeterministic ? (step + static_cast<int>(calls_)) % tiles : step;
            const int j0 = t * kTile, j1 = std::min(nk, j0 + kTile);
            if (bug_ == Bug::dropped_tail_tile && j1 - j0 < kTile && tiles > 1) continue;
            float tile_max = kMinusInf;
            std::vector<float> sj(static_cast<std::size_t>(j1 - j0), kMinusInf);
            for (int j = j0; j < j1; ++j) {
              if (!visible(c, i, j)) continue;
              float dot = 0;
              for (int x = 0; x < d; ++x) dot += q[row * d + x] * k[(kh * nk + j) * d + x];
              sj[j - j0] = sc * dot;
              tile_max = std::max(tile_max, sj[j - j0]);
            }
            if (tile_max == kMinusInf) continue;
            const float m_new = std::max(m, tile_max);
            float factor = m == kMinusInf ? 0.0f : std::exp(m - m_new);
            if (bug_ == Bug::missing_rescale && m != kMinusInf) factor = 1.0f;
            l *= factor;
            for (float& a : acc) a *= factor;
            for (int j = j0; j < j1; ++j) {
              if (sj[j - j0] == kMinusInf) continue;
              const float e = std::exp(sj[j - j0] - m_new);
              l += e;
              for (int x = 0; x < dv; ++x) acc[x] += e * v[(kh * nk + j) * dv + x];
            }
            if (bug_ == Bug::bf16_accumulation) {
              for (float& a : acc) a = to_float(round_to<bf16>(a, Rounding::nearest_even));
            }
            m = m_new;
          }
          if (l == 0 && bug_ != Bug::nan_for_masked_rows) {  // no visible key
            for (int x = 0; x < dv; ++x) o[row * dv + x] = 0;
            lse[row] = kMinusInf;
            continue;
          }
          for (int x = 0; x < dv; ++x) o[row * dv + x] = acc[x] / l;  // 0 / 0 for a masked row under the bug
          lse[row] = bug_ == Bug::lse_without_max ? std::log(l) : m + std::log(l);
        }
      }
    }
    store(c.out_o, o, c, Role::o);
    store(c.out_lse, lse, c, Role::stats);
  }

  // First and (if `second`) second order, recomputing P from the saved L, D from the saved O.
  void backward(const AttentionCall& c, bool second) const {
    const auto& s = c.shape;
    const std::size_t nq = s.seq_q, nk = s.seq_k, d = s.head_dim, dv = s.head_dim_v;
    const std::vector<float> q = input(c.q), k = input(c.k), v = input(c.v), o = input(c.o), lse = input(c.lse), dout = input(c.dout);
    std::vector<float> ddq, ddk, ddv;
    if (second) ddq = input(c.ddq), ddk = input(c.ddk), ddv = input(c.ddv);
    std::vector<float> dq(q.size()), dk(k.size()), dvv(v.size()), dq2(q.size()), dk2(k.size()), dv2(v.size()), ddo(dout.size());
    const float sc = scale(c);
    std::vector<float> P(nq * nk), dP(nq * nk), dS(nq * nk), D(nq);
    for (int b = 0; b < s.batch; ++b) {
      for (int h = 0; h < s.heads_q; ++h) {
        const std::size_t q0 = (static_cast<std::size_t>(b) * s.heads_q + h) * nq;
        const std::size_t k0 = (static_cast<std::size_t>(b) * s.heads_kv + kv_head(c, h)) * nk;
        for (std::size_t i = 0; i < nq; ++i) {
          D[i] = 0;
          for (std::size_t x = 0; x < dv; ++x) D[i] += bug_ == Bug::wrong_delta ? dout[(q0 + i) * dv + x] : dout[(q0 + i) * dv + x] * o[(q0 + i) * dv + x];
          for (std::size_t j = 0; j < nk; ++j) {
            P[i * nk + j] = 0, dP[i * nk + j] = 0;
            if (!visible(c, static_cast<int>(i), static_cast<int>(j))) continue;
            float dot = 0, dp = 0;
            for (std::size_t x = 0; x < d; ++x) dot += q[(q0 + i) * d + x] * k[(k0 + j) * d + x];
            for (std::size_t x = 0; x < dv; ++x) dp += dout[(q0 + i) * dv + x] * v[(k0 + j) * dv + x];
            P[i * nk + j] = std::exp(sc * dot - lse[q0 + i]);
            dP[i * nk + j] = dp;
          }
        }
        const std::size_t offset = bug_ == Bug::nondeterministic ? calls_ % nq : 0;
        for (std::size_t step = 0; step < nq; ++step) {
          const std::size_t i = (step + offset) % nq;
          for (std::size_t j = 0; j < nk; ++j) {
            const float ds = P[i * nk + j] * (dP[i * nk + j] - D[i]);
            dS[i * nk + j] = sc * ds;
            const float ds_q = bug_ == Bug::dq_missing_scale ? ds : sc * ds;
            for (std::size_t x = 0; x < d; ++x) {
              dq[(q0 + i) * d + x] += ds_q * k[(k0 + j) * d + x];
              dk[(k0 + j) * d + x] += sc * ds * q[(q0 + i) * d + x];
            }
            for (std::size_t x = 0; x < dv; ++x) dvv[(k0 + j) * dv + x] += P[i * nk + j] * dout[(q0 + i) * dv + x];
          }
        }
        if (!second) continue;
        // EQUATIONS.md section 3, with dd and b swapped under the bug
        for (std::size_t i = 0; i < nq; ++i) {
          std::vector<float> ddS(nk), dPp(nk);
          float dd = 0, bb = 0;
          for (std::size_t j = 0; j < nk; ++j) {
            float x1 = 0, x2 = 0;
            for (std::size_t x = 0; x < d; ++x) x1 += ddq[(q0 + i) * d + x] * k[(k0 + j) * d + x], x2 += q[(q0 + i) * d + x] * ddk[(k0 + j) * d + x];
            ddS[j] = sc * (x1 + x2);
            dd += ddS[j] * P[i * nk + j];
          }
          for (std::size_t j = 0; j < nk; ++j) {
            float x1 = 0;
            for (std::size_t x = 0; x < dv; ++x) x1 += dout[(q0 + i) * dv + x] * ddv[(k0 + j) * dv + x];
            dPp[j] = x1 - dP[i * nk + j] * dd - ddS[j] * D[i] + dP[i * nk + j] * ddS[j];
            bb += dPp[j] * P[i * nk + j];
          }
          const float dd_used = bug_ == Bug::dd_b_swapped ? bb : dd, b_used = bug_ == Bug::dd_b_swapped ? dd : bb;
          for (std::size_t j = 0; j < nk; ++j) {
            const float p = P[i * nk + j];
            const float dsp = sc * p * (dPp[j] - b_used), ddp = p * (ddS[j] - dd_used), ds = dS[i * nk + j];
            for (std::size_t x = 0; x < d; ++x) {
              dq2[(q0 + i) * d + x] += ds * ddk[(k0 + j) * d + x] + dsp * k[(k0 + j) * d + x];
              dk2[(k0 + j) * d + x] += ds * ddq[(q0 + i) * d + x] + dsp * q[(q0 + i) * d + x];
            }
            for (std::size_t x = 0; x < dv; ++x) {
              dv2[(k0 + j) * dv + x] += ddp * dout[(q0 + i) * dv + x];
              ddo[(q0 + i) * dv + x] += p * ddv[(k0 + j) * dv + x] + ddp * v[(k0 + j) * dv + x];
            }
          }
        }
      }
    }
    if (!second) {
      store(c.dq, dq, c, Role::grad), store(c.dk, dk, c, Role::grad), store(c.dv, dvv, c, Role::grad);
    } else {
      store(c.dq2, dq2, c, Role::grad), store(c.dk2, dk2, c, Role::grad), store(c.dv2, dv2, c, Role::grad), store(c.ddo, ddo, c, Role::grad);
    }
  }

  Bug bug_;
  kernels::SubjectInfo info_;
  unsigned calls_ = 0;
};

}  // namespace

std::unique_ptr<kernels::Subject> make_broken_subject(Bug bug) { return std::make_unique<Broken>(bug); }

}  // namespace fc::gradcheck::testing
