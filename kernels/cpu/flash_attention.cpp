// cpu.fa2, cpu.fa4 (and cpu.fa4.emulated): FlashAttention-2's algorithm on the CPU, with FA4's
// selective rescaling and exp2 emulation as options. See flash_attention.hpp for what follows the
// CUDA kernels' rounding exactly and what cannot.
#include "kernels/cpu/flash_attention.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numbers>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/flash_common.hpp"
#include "kernels/cpu/storage_rounding.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/cpu/tile_math.hpp"
#include "kernels/tensor_io.hpp"
#include "precision/exp2_emulated.hpp"
#include "precision/fp8.hpp"

namespace fc::kernels::cpu {

namespace {

template <class A>
class Flash {
 public:
  Flash(const AttentionCall& c, const FlashOptions& o) : p_(c), o_(o) {}

  void forward(std::vector<Counter>& counters) {
    const int tiles_q = (p_.nq + o_.block_q - 1) / o_.block_q;
    std::vector<A> out(static_cast<std::size_t>(p_.B) * p_.Hq * p_.nq * p_.dv), lse(static_cast<std::size_t>(p_.B) * p_.Hq * p_.nq);
    std::atomic<long long> rescales{0}, emulated{0}, exponentials{0};
    parallel_for(static_cast<std::size_t>(p_.B) * p_.Hq * tiles_q, [&](std::size_t task) {
      const int qt = static_cast<int>(task % tiles_q), h = static_cast<int>(task / tiles_q % p_.Hq), b = static_cast<int>(task / tiles_q / p_.Hq);
      long long r = 0, e = 0, x = 0;
      forward_tile(b, h, qt, out, lse, r, e, x);
      rescales += r, emulated += e, exponentials += x;
    });
    const PrecisionPolicy& pol = p_.c.policy;
    write_from(p_.c.out_o, std::span<const A>(out), pol.rounding, pol.stream(Role::o));
    if (!p_.c.out_lse.empty()) write_from(p_.c.out_lse, std::span<const A>(lse), pol.rounding, pol.stream(Role::stats));
    counters = {{"rescales", static_cast<double>(rescales)},
                {"exp2_emulated", static_cast<double>(emulated)},
                {"exp2_total", static_cast<double>(exponentials)}};
  }

  void backward() {
    const std::vector<A> o = read<A>(p_.c.o), dout = read<A>(p_.c.dout), lse = read<A>(p_.c.lse);
    // D = rowsum(dO o O) from the stored O, as FA2 does.
    std::vector<A> D(lse.size(), A(0));
    for (std::size_t r = 0; r < D.size(); ++r) {
      for (int x = 0; x < p_.dv; ++x) D[r] += dout[r * p_.dv + x] * o[r * p_.dv + x];
    }
    std::vector<A> dq(p_.q.size(), A(0)), dk(p_.k.size(), A(0)), dv(p_.v.size(), A(0));
    // Pass 1: dK, dV. A task owns one key tile of one kv head and sums over the group's query rows.
    const int tiles_k = (p_.nk + o_.block_k - 1) / o_.block_k;
    parallel_for(static_cast<std::size_t>(p_.B) * p_.Hkv * tiles_k, [&](std::size_t task) {
      const int kt = static_cast<int>(task % tiles_k), hk = static_cast<int>(task / tiles_k % p_.Hkv), b = static_cast<int>(task / tiles_k / p_.Hkv);
      key_tile_gradients(b, hk, kt, dout, lse, D, dk, dv);
    });
    // Pass 2: dQ. A task owns one query tile (deterministic: no atomics, each dQ row summed in order).
    const int tiles_q = (p_.nq + o_.block_q - 1) / o_.block_q;
    parallel_for(static_cast<std::size_t>(p_.B) * p_.Hq * tiles_q, [&](std::size_t task) {
      const int qt = static_cast<int>(task % tiles_q), h = static_cast<int>(task / tiles_q % p_.Hq), b = static_cast<int>(task / tiles_q / p_.Hq);
      query_tile_gradient(b, h, qt, dout, lse, D, dq);
    });
    const PrecisionPolicy& pol = p_.c.policy;
    write_from(p_.c.dq, std::span<const A>(dq), pol.rounding, pol.stream(Role::grad));
    write_from(p_.c.dk, std::span<const A>(dk), pol.rounding, pol.stream(Role::grad));
    write_from(p_.c.dv, std::span<const A>(dv), pol.rounding, pol.stream(Role::grad));
  }

 private:
  A exp2(A x, int column, long long& emulated) const {
    // (`column` within its key tile, in blocks of 8: the first round(8 f) of every 8 blocks, the n8 blocks nb
    // with nb % 8 < 8 f that cuda.fa4 emulates, warp-uniformly)
    if (o_.exp2_fraction > 0 && (column / 8) % 8 < static_cast<int>(o_.exp2_fraction * 8 + 0.5)) {
      ++emulated;
      return static_cast<A>(exp2_emulated(static_cast<float>(x)));
    }
    return std::exp2(x);
  }

  // One query tile of one head over all the key tiles it can see: the online softmax.
  void forward_tile(int b, int h, int qt, std::vector<A>& out, std::vector<A>& lse, long long& rescales, long long& emulated,
                    long long& exponentials) const {
    const int r0 = qt * o_.block_q, r1 = std::min(p_.nq, r0 + o_.block_q), rows = r1 - r0, bk = o_.block_k;
    const std::size_t qrow0 = (static_cast<std::size_t>(b) * p_.Hq + h) * p_.nq + r0, kvh = p_.kv_head(b, h);
    const A* Q = &p_.q[qrow0 * p_.d];
    const A* Kt = &p_.kt[kvh * p_.nk * p_.d];
    const A* V = &p_.v[kvh * p_.nk * p_.dv];
    const A scale2 = static_cast<A>(p_.c.scale * kLog2e);  // logits in log2 units, as the CUDA kernels use
    std::vector<A> S(static_cast<std::size_t>(rows) * bk), acc(static_cast<std::size_t>(rows) * p_.dv, A(0));
    std::vector<A> m(rows, minus_inf<A>()), l(rows, A(0));
    const int key_end = p_.key_end(r1);
    for (int j0 = 0; j0 < key_end; j0 += bk) {
      const int cols = std::min(bk, p_.nk - j0);
      std::fill(S.begin(), S.end(), A(0));
      gemm_nn(rows, cols, p_.d, Q, p_.d, Kt + j0, p_.nk, S.data(), bk);  // S = Q K^T (unscaled)
      for (int r = 0; r < rows; ++r) {
        A* s = &S[static_cast<std::size_t>(r) * bk];
        A tile_max = minus_inf<A>();
        for (int j = 0; j < cols; ++j) {
          if (!p_.visible(r0 + r, j0 + j)) {
            s[j] = minus_inf<A>();
          } else {
            tile_max = std::max(tile_max, s[j] * scale2);
          }
        }
        A alpha = 1;
        if (tile_max != minus_inf<A>()) {
          if (m[r] == minus_inf<A>()) {
            m[r] = tile_max;  // the first visible tile sets the reference max
          } else if (tile_max > m[r] && tile_max - m[r] >= static_cast<A>(o_.rescale_threshold)) {
            alpha = std::exp2(m[r] - tile_max);  // rescale the accumulator to the new max
            m[r] = tile_max;
            ++rescales;
          }  // otherwise (FA4) keep the old max: the new exponentials stay below 2^threshold
        }
        A row_sum = 0;
        for (int j = 0; j < cols; ++j) {
          if (s[j] == minus_inf<A>()) {
            s[j] = 0;
            continue;
          }
          s[j] = exp2(std::fma(s[j], scale2, -m[r]), j, emulated);  // P, unnormalised
          ++exponentials;
          row_sum += s[j];
        }
        l[r] = l[r] * alpha + row_sum;
        if (alpha != A(1)) {
          for (int x = 0; x < p_.dv; ++x) acc[static_cast<std::size_t>(r) * p_.dv + x] *= alpha;
        }
      }
      round_to_storage(S.data(), S.size(), o_.fp8 ? Format::e4m3 : p_.t);  // P enters P V in the storage format (FP8: e4m3)
      gemm_nn(rows, p_.dv, cols, S.data(), bk, V + static_cast<std::size_t>(j0) * p_.dv, p_.dv, acc.data(), p_.dv);
    }
    for (int r = 0; r < rows; ++r) {
      const std::size_t row = qrow0 + r;
      if (l[r] == A(0)) {  // no visible key: O = 0, L = -inf
        for (int x = 0; x < p_.dv; ++x) out[row * p_.dv + x] = 0;
        lse[row] = minus_inf<A>();
        continue;
      }
      const A inv = A(1) / l[r];
      for (int x = 0; x < p_.dv; ++x) out[row * p_.dv + x] = acc[static_cast<std::size_t>(r) * p_.dv + x] * inv;
      lse[row] = static_cast<A>((m[r] + std::log2(l[r])) * kLn2);
    }
  }

  // P, dP and dS of rows [r0, r0 + rows) of head (b, h) against keys [j0, j0 + cols): dS (unscaled,
  // rounded to the storage format) into dS, P (rounded likewise) into P.
  void tile_probabilities(int b, int h, int r0, int rows, int j0, int cols, const std::vector<A>& dout, const std::vector<A>& lse,
                          const std::vector<A>& D, std::vector<A>& P, std::vector<A>& dS) const {
    const int bk = o_.block_k;
    const std::size_t qrow0 = (static_cast<std::size_t>(b) * p_.Hq + h) * p_.nq + r0, kvh = p_.kv_head(b, h);
    const A scale2 = static_cast<A>(p_.c.scale * kLog2e);
    std::fill(P.begin(), P.end(), A(0));
    std::fill(dS.begin(), dS.end(), A(0));
    gemm_nn(rows, cols, p_.d, &p_.q[qrow0 * p_.d], p_.d, &p_.kt[kvh * p_.nk * p_.d] + j0, p_.nk, P.data(), bk);  // S
    gemm_nn(rows, cols, p_.dv, &dout[qrow0 * p_.dv], p_.dv, &p_.vt[kvh * p_.nk * p_.dv] + j0, p_.nk, dS.data(), bk);  // dP
    for (int r = 0; r < rows; ++r) {
      const A l2 = lse[qrow0 + r] * static_cast<A>(kLog2e);  // the saved log-sum-exp, in log2 units
      for (int j = 0; j < cols; ++j) {
        A& pj = P[static_cast<std::size_t>(r) * bk + j];
        A& dsj = dS[static_cast<std::size_t>(r) * bk + j];
        if (l2 == minus_inf<A>() || !p_.visible(r0 + r, j0 + j)) {
          pj = 0, dsj = 0;
          continue;
        }
        pj = std::exp2(std::fma(pj, scale2, -l2));  // P = exp(s S - L)
        dsj = pj * (dsj - D[qrow0 + r]);           // dS = P o (dP - D), the scale applied at the end
      }
    }
    round_to_storage(P.data(), P.size(), p_.t);
    round_to_storage(dS.data(), dS.size(), p_.t);
  }

  void key_tile_gradients(int b, int hk, int kt, const std::vector<A>& dout, const std::vector<A>& lse, const std::vector<A>& D,
                          std::vector<A>& dk, std::vector<A>& dv) const {
    const int j0 = kt * o_.block_k, cols = std::min(o_.block_k, p_.nk - j0), bq = o_.block_q, bk = o_.block_k;
    const std::size_t kvh = static_cast<std::size_t>(b) * p_.Hkv + hk;
    std::vector<A> P(static_cast<std::size_t>(bq) * bk), dS(P.size());
    std::vector<A> dk_acc(static_cast<std::size_t>(cols) * p_.d, A(0)), dv_acc(static_cast<std::size_t>(cols) * p_.dv, A(0));
    for (int g = 0; g < p_.group; ++g) {
      const int h = hk * p_.group + g;
      const std::size_t qrow0 = (static_cast<std::size_t>(b) * p_.Hq + h) * p_.nq;
      // rows that see this key tile at all: from the diagonal of its first column on
      const int first_row = p_.causal() ? std::max(0, j0 - p_.offset) : 0;
      for (int r0 = first_row - first_row % bq; r0 < p_.nq; r0 += bq) {
        const int rows = std::min(bq, p_.nq - r0);
        tile_probabilities(b, h, r0, rows, j0, cols, dout, lse, D, P, dS);
        gemm_tn(cols, p_.dv, rows, P.data(), bk, &dout[(qrow0 + r0) * p_.dv], p_.dv, dv_acc.data(), p_.dv);  // dV += P^T dO
        gemm_tn(cols, p_.d, rows, dS.data(), bk, &p_.q[(qrow0 + r0) * p_.d], p_.d, dk_acc.data(), p_.d);  // dK += dS^T Q
      }
    }
    const A s = static_cast<A>(p_.c.scale);
    for (int j = 0; j < cols; ++j) {
      for (int x = 0; x < p_.d; ++x) dk[(kvh * p_.nk + j0 + j) * p_.d + x] = s * dk_acc[static_cast<std::size_t>(j) * p_.d + x];
      for (int x = 0; x < p_.dv; ++x) dv[(kvh * p_.nk + j0 + j) * p_.dv + x] = dv_acc[static_cast<std::size_t>(j) * p_.dv + x];
    }
  }

  void query_tile_gradient(int b, int h, int qt, const std::vector<A>& dout, const std::vector<A>& lse, const std::vector<A>& D,
                           std::vector<A>& dq) const {
    const int r0 = qt * o_.block_q, rows = std::min(o_.block_q, p_.nq - r0), bq = o_.block_q, bk = o_.block_k;
    const std::size_t qrow0 = (static_cast<std::size_t>(b) * p_.Hq + h) * p_.nq + r0, kvh = p_.kv_head(b, h);
    std::vector<A> P(static_cast<std::size_t>(bq) * bk), dS(P.size()), acc(static_cast<std::size_t>(rows) * p_.d, A(0));
    const int key_end = p_.key_end(r0 + rows);
    for (int j0 = 0; j0 < key_end; j0 += bk) {
      const int cols = std::min(bk, p_.nk - j0);
      tile_probabilities(b, h, r0, rows, j0, cols, dout, lse, D, P, dS);
      gemm_nn(rows, p_.d, cols, dS.data(), bk, &p_.k[(kvh * p_.nk + j0) * p_.d], p_.d, acc.data(), p_.d);  // dQ += dS K
    }
    const A s = static_cast<A>(p_.c.scale);
    for (int r = 0; r < rows; ++r)
      for (int x = 0; x < p_.d; ++x) dq[(qrow0 + r) * p_.d + x] = s * acc[static_cast<std::size_t>(r) * p_.d + x];
  }

  Problem<A> p_;
  FlashOptions o_;
};

class FlashSubject final : public Subject {
 public:
  FlashSubject(std::string name, std::string description, FlashOptions defaults, std::vector<Format> formats)
      : o_(defaults) {
    info_.name = std::move(name);
    info_.description = std::move(description);
    info_.family = Family::attention;
    info_.ops = defaults.fp8 ? std::vector<Op>{Op::fwd} : std::vector<Op>{Op::fwd, Op::bwd};  // (FA3's FP8 path is a forward)
    info_.formats = std::move(formats);
    info_.max_head_dim = 256;
    info_.masks = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};
    info_.stochastic_rounding = true;
    refresh_options();
  }
  const SubjectInfo& info() const override { return info_; }
  std::vector<Counter> counters() const override { return counters_; }

  void set_option(const std::string& name, const std::string& value) override {
    try {
      if (name == "block_q" || name == "block_k") {
        const int v = std::stoi(value);
        if (v < 1 || v > 1024) throw std::invalid_argument("a tile size in 1..1024");
        (name == "block_q" ? o_.block_q : o_.block_k) = v;
      } else if (name == "block_k_large_d") {
        const int v = std::stoi(value);
        if (v < 0 || v > 1024) throw std::invalid_argument("a tile size in 1..1024, or 0 (block_k)");
        o_.block_k_large_d = v;
      } else if (name == "tau") {
        const double v = std::stod(value);
        if (!(v >= 0 && v <= 30)) throw std::invalid_argument("a threshold in [0, 30] (log2 units)");
        o_.rescale_threshold = v;
      } else if (name == "operands" && o_.fp8) {
        if (value != "e4m3" && value != "scaled") throw std::invalid_argument("e4m3 or scaled");
        o_.fp8_scaled = value == "scaled";
      } else if (name == "exp2_fraction") {
        const double v = std::stod(value);
        if (!(v >= 0 && v <= 1)) throw std::invalid_argument("a fraction in [0, 1]");
        o_.exp2_fraction = v;
      } else {
        Subject::set_option(name, value);
      }
    } catch (const std::logic_error& e) {  // stoi/stod failures and range errors
      throw SubjectError(info_.name + ": option " + name + "=" + value + ": " + e.what());
    }
    refresh_options();
  }

  void run(Op op, const AttentionCall& c) override {
    // (FP8: P enters P V in e4m3 whatever the operands' format, so 2^tau must fit e4m3, not V's format)
    validate_rescale_threshold(info_, o_.rescale_threshold, o_.fp8 ? PrecisionPolicy::uniform(Format::e4m3) : c.policy);
    validate_call(info_, op, c);
    for (auto [t, what] : {std::pair{&c.q, "Q"}, std::pair{&c.k, "K"}, std::pair{&c.v, "V"}}) require_finite(*t, info_.name, what);
    if (o_.fp8_scaled) {
      require_scaled_e4m3(c.q, o_.block_q, "Q");
      require_scaled_e4m3(c.k, options_at(c.shape.head_dim).block_k, "K");
      require_scaled_e4m3(c.v, options_at(c.shape.head_dim).block_k, "V");
    }
    if (op == Op::bwd) require_finite(c.dout, info_.name, "dO");
    counters_.clear();
    if (c.policy.accumulate == Format::fp64) {
      dispatch<double>(op, c);
    } else if (c.policy.accumulate == Format::fp32) {
      dispatch<float>(op, c);
    } else {
      throw SubjectError(info_.name + ": accumulation in " + std::string(fc::name(c.policy.accumulate)) + " (fp32 or fp64)");
    }
  }

 private:
  // The options a call at head dim d runs with: block_k_large_d's tile above d = 128.
  FlashOptions options_at(int head_dim) const {
    FlashOptions o = o_;
    if (head_dim > 128 && o.block_k_large_d > 0) o.block_k = o.block_k_large_d;
    return o;
  }
  template <class A>
  void dispatch(Op op, const AttentionCall& c) {
    Flash<A> f(c, options_at(c.shape.head_dim));
    if (op == Op::fwd) {
      f.forward(counters_);
    } else {
      f.backward();
    }
  }
  // operands=scaled: each block of `block` rows of a head holds e4m3 values times one power of two, the
  // scale e4m3_block_exponent gives for the block's largest magnitude (the quantizer's rule).
  void require_scaled_e4m3(const TensorView& t, int block, const char* what) const {
    const std::vector<double> x = read_as_double(t);
    const std::int64_t heads = t.shape[0] * t.shape[1], rows = t.shape[2], cols = t.shape[3];
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t r0 = 0; r0 < rows; r0 += block) {
        const std::size_t first = static_cast<std::size_t>((h * rows + r0) * cols);
        const std::size_t n = static_cast<std::size_t>(std::min<std::int64_t>(block, rows - r0) * cols);
        double amax = 0;
        for (std::size_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[first + i]));
        const int e = e4m3_block_exponent(amax);
        for (std::size_t i = 0; i < n; ++i) {
          if (static_cast<double>(to_float(round_to_e4m3(std::ldexp(x[first + i], -e), Rounding::nearest_even))) != std::ldexp(x[first + i], -e)) {
            std::ostringstream m;
            m << info_.name << ": operands=scaled, but " << what << " (head " << h << ", rows " << r0 << ".." << r0 + n / cols - 1
              << ") holds " << x[first + i] << ", not an e4m3 value times the block's scale 2^" << e;
            throw SubjectError(m.str());
          }
        }
      }
    }
  }

  void refresh_options() {
    // (the emulated exp2 is a float polynomial: an fp64 accumulation would not be what it claims)
    info_.accumulate_formats = o_.exp2_fraction > 0 ? std::vector<Format>{Format::fp32} : std::vector<Format>{Format::fp32, Format::fp64};
    if (o_.fp8) info_.formats = o_.fp8_scaled ? std::vector<Format>{Format::fp32, Format::bf16, Format::fp16} : std::vector<Format>{Format::e4m3};
    info_.options = {{"block_q", std::to_string(o_.block_q), "query rows per tile"},
                     {"block_k", std::to_string(o_.block_k), "keys per tile"},
                     {"block_k_large_d", std::to_string(o_.block_k_large_d), "keys per tile at head dims above 128 (0: block_k)"},
                     {"tau", std::to_string(o_.rescale_threshold), "rescale only when the running max grows by at least this (log2 units); 0: always (FA2)"},
                     {"exp2_fraction", std::to_string(o_.exp2_fraction), "share of exponentials computed by the cubic emulation"}};
    if (o_.fp8) {
      info_.options.push_back({"operands", o_.fp8_scaled ? "scaled" : "e4m3",
                               "e4m3: e4m3 tensors; scaled: wider tensors holding e4m3 values times a power-of-two scale per block of "
                               "block_q (Q) or block_k (K, V) rows"});
    }
  }

  SubjectInfo info_;
  FlashOptions o_;
  std::vector<Counter> counters_;
};

}  // namespace

std::unique_ptr<Subject> make_cpu_fa2() {
  return std::make_unique<FlashSubject>(
      "cpu.fa2", "FlashAttention-2: query tiles own their rows, online softmax over key tiles, one normalisation, L saved; backward from D = rowsum(dO o O)",
      FlashOptions{}, std::vector<Format>{Format::bf16, Format::fp16, Format::fp32, Format::fp64});
}

std::unique_ptr<Subject> make_cpu_fa3() {
  FlashOptions o;
  o.block_q = 128, o.block_k = 128;
  return std::make_unique<FlashSubject>("cpu.fa3", "FA3's arithmetic (FA2's online softmax, one normalisation, L saved) with its Hopper forward tiles, 128 x 128",
                                        o, std::vector<Format>{Format::bf16, Format::fp16, Format::fp32, Format::fp64});
}

std::unique_ptr<Subject> make_cpu_fa3_fp8() {
  FlashOptions o;
  o.block_q = 128, o.block_k = 128, o.fp8 = true;
  return std::make_unique<FlashSubject>("cpu.fa3.fp8",
                                        "FA3's FP8 forward: e4m3 Q, K, V (or scaled: per-block power-of-two scales), S in fp32, P in e4m3 before P V, "
                                        "O in bf16",
                                        o, std::vector<Format>{Format::e4m3});
}

std::unique_ptr<Subject> make_cpu_fa4() {
  FlashOptions o;
  o.block_q = 128, o.block_k = 128, o.rescale_threshold = 8, o.block_k_large_d = 64;  // (cuda.fa4's tiles: 64 keys at d = 256)
  return std::make_unique<FlashSubject>("cpu.fa4", "FA2 with FA4's selective rescaling (tau = 8): rescale only when the max grows by >= tau; counts rescales",
                                        o, std::vector<Format>{Format::bf16, Format::fp16, Format::fp32, Format::fp64});
}

std::unique_ptr<Subject> make_cpu_fa4_emulated() {
  FlashOptions o;
  o.block_q = 128, o.block_k = 128, o.rescale_threshold = 8, o.exp2_fraction = 0.5, o.block_k_large_d = 64;
  // The cubic's 7.5e-5 relative error is 0.15 u of fp16 but 2^10 u of fp32: 16-bit formats only.
  return std::make_unique<FlashSubject>("cpu.fa4.emulated", "cpu.fa4 with half the exponentials by FA4's cubic exp2 emulation (bf16, fp16)", o,
                                        std::vector<Format>{Format::bf16, Format::fp16});
}

}  // namespace fc::kernels::cpu
