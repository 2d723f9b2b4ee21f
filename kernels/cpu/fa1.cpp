// cpu.fa1: FlashAttention (v1) as its paper's Algorithms 1 and 4 describe it.
//
// Forward: for each key/value tile (outer) and each query tile (inner), the tile's softmax statistics
// (m~, l~) merge into the running (m, l) and O is rewritten normalised,
//     O <- (l e^(m - m') O + e^(m~ - m') P~ V) / l',
// with O held between key tiles in the storage format (FA1 keeps it in HBM in the output dtype): one
// rounding of O per key tile, a real accuracy cost in bf16 that the harness and the experiments see.
// m and l stay in fp32, as FA1 keeps them. Backward: the same loop order; dV, dK of a key tile
// accumulate in fp32 over every query tile of the kv head's group; dQ accumulates in fp32 across key
// tiles (FA1's fp32 dQ accumulator); D = rowsum(dO o O) is computed per query tile from the stored O.
//
// Against CUDA: as flash_attention.hpp says for FA2 (P and dS rounded to the storage format before
// their products, fp32 accumulation), with natural exp (FA1's __expf) rather than exp2, and the
// intermediate O rewrites rounded to nearest (the final one with the policy's rounding).
#include "kernels/cpu/fa1.hpp"

#include <span>
#include <stdexcept>
#include <string>

#include "kernels/cpu/flash_common.hpp"
#include "kernels/cpu/storage_rounding.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace fc::kernels::cpu {
namespace {

template <class A>
class Fa1 {
 public:
  Fa1(const AttentionCall& c, int block_q, int block_k) : p_(c), bq_(block_q), bk_(block_k) {}

  void forward() {
    std::vector<A> out(static_cast<std::size_t>(p_.B) * p_.Hq * p_.nq * p_.dv, A(0)), lse(static_cast<std::size_t>(p_.B) * p_.Hq * p_.nq);
    // FA1 parallelises over (batch, head): each head walks its key tiles in order.
    parallel_for(static_cast<std::size_t>(p_.B) * p_.Hq, [&](std::size_t task) {
      forward_head(static_cast<int>(task / p_.Hq), static_cast<int>(task % p_.Hq), out, lse);
    });
    const PrecisionPolicy& pol = p_.c.policy;
    write_from(p_.c.out_o, std::span<const A>(out), pol.rounding, pol.stream(Role::o));
    if (!p_.c.out_lse.empty()) write_from(p_.c.out_lse, std::span<const A>(lse), pol.rounding, pol.stream(Role::stats));
  }

  void backward() {
    const std::vector<A> o = read<A>(p_.c.o), dout = read<A>(p_.c.dout), lse = read<A>(p_.c.lse);
    std::vector<A> dq(p_.q.size(), A(0)), dk(p_.k.size(), A(0)), dv(p_.v.size(), A(0));
    parallel_for(static_cast<std::size_t>(p_.B) * p_.Hkv, [&](std::size_t task) {
      backward_kv_head(static_cast<int>(task / p_.Hkv), static_cast<int>(task % p_.Hkv), o, dout, lse, dq, dk, dv);
    });
    const PrecisionPolicy& pol = p_.c.policy;
    write_from(p_.c.dq, std::span<const A>(dq), pol.rounding, pol.stream(Role::grad));
    write_from(p_.c.dk, std::span<const A>(dk), pol.rounding, pol.stream(Role::grad));
    write_from(p_.c.dv, std::span<const A>(dv), pol.rounding, pol.stream(Role::grad));
  }

 private:
  // S = s Q_i K_j^T for rows [r0, r0 + rows) against keys [j0, j0 + cols), masked entries -inf.
  void scores(std::size_t qrow0, std::size_t kvh, int r0, int rows, int j0, int cols, std::vector<A>& S) const {
    std::fill(S.begin(), S.end(), A(0));
    gemm_nn(rows, cols, p_.d, &p_.q[(qrow0 + r0) * p_.d], p_.d, &p_.kt[kvh * p_.nk * p_.d] + j0, p_.nk, S.data(), bk_);
    const A s = static_cast<A>(p_.c.scale);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) {
        A& x = S[static_cast<std::size_t>(r) * bk_ + j];
        x = p_.visible(r0 + r, j0 + j) ? s * x : minus_inf<A>();
      }
  }

  void forward_head(int b, int h, std::vector<A>& out, std::vector<A>& lse) const {
    using std::exp;
    const std::size_t qrow0 = (static_cast<std::size_t>(b) * p_.Hq + h) * p_.nq, kvh = p_.kv_head(b, h);
    std::vector<A> m(p_.nq, minus_inf<A>()), l(p_.nq, A(0));
    std::vector<A> S(static_cast<std::size_t>(bq_) * bk_), pv(static_cast<std::size_t>(bq_) * p_.dv);
    A* O = &out[qrow0 * p_.dv];
    const int last_tile = (p_.nk - 1) / bk_;
    for (int j0 = 0; j0 < p_.nk; j0 += bk_) {
      const int cols = std::min(bk_, p_.nk - j0);
      const int first_row = p_.causal() ? std::max(0, j0 - p_.offset) : 0;  // rows that see this key tile
      for (int r0 = first_row - first_row % bq_; r0 < p_.nq; r0 += bq_) {
        const int rows = std::min(bq_, p_.nq - r0);
        scores(qrow0, kvh, r0, rows, j0, cols, S);
        std::vector<A> m_tile(rows, minus_inf<A>()), l_tile(rows, A(0));
        for (int r = 0; r < rows; ++r) {  // P~ = exp(S - m~), l~ = rowsum(P~)
          A* srow = &S[static_cast<std::size_t>(r) * bk_];
          for (int j = 0; j < cols; ++j) m_tile[r] = std::max(m_tile[r], srow[j]);
          for (int j = 0; j < cols; ++j) {
            srow[j] = m_tile[r] == minus_inf<A>() ? A(0) : exp(srow[j] - m_tile[r]);
            l_tile[r] += srow[j];
          }
        }
        round_to_storage(S.data(), S.size(), p_.t);
        std::fill(pv.begin(), pv.end(), A(0));
        gemm_nn(rows, p_.dv, cols, S.data(), bk_, &p_.v[(kvh * p_.nk + j0) * p_.dv], p_.dv, pv.data(), p_.dv);  // P~ V_j
        for (int r = 0; r < rows; ++r) {
          const int i = r0 + r;
          if (m_tile[r] == minus_inf<A>()) continue;  // no visible key in this tile: nothing changes
          const A m_new = std::max(m[i], m_tile[r]);
          const A old_w = m[i] == minus_inf<A>() ? A(0) : exp(m[i] - m_new), new_w = exp(m_tile[r] - m_new);
          const A l_new = old_w * l[i] + new_w * l_tile[r];
          A* orow = &O[static_cast<std::size_t>(i) * p_.dv];
          for (int x = 0; x < p_.dv; ++x) orow[x] = (l[i] * old_w * orow[x] + new_w * pv[static_cast<std::size_t>(r) * p_.dv + x]) / l_new;
          // O lives in the storage format between key tiles; the last rewrite is rounded on output
          if (j0 / bk_ != last_tile) round_to_storage(orow, static_cast<std::size_t>(p_.dv), p_.c.policy.format(Role::o));
          m[i] = m_new, l[i] = l_new;
        }
      }
    }
    for (int i = 0; i < p_.nq; ++i) lse[qrow0 + i] = l[i] == A(0) ? minus_inf<A>() : m[i] + std::log(l[i]);
  }

  void backward_kv_head(int b, int hk, const std::vector<A>& o, const std::vector<A>& dout, const std::vector<A>& lse,
                        std::vector<A>& dq, std::vector<A>& dk, std::vector<A>& dv) const {
    using std::exp;
    const std::size_t kvh = static_cast<std::size_t>(b) * p_.Hkv + hk;
    std::vector<A> P(static_cast<std::size_t>(bq_) * bk_), dS(P.size()), D(bq_);
    std::vector<A> dk_acc(static_cast<std::size_t>(bk_) * p_.d), dv_acc(static_cast<std::size_t>(bk_) * p_.dv), dq_tile;
    const A s = static_cast<A>(p_.c.scale);
    for (int j0 = 0; j0 < p_.nk; j0 += bk_) {
      const int cols = std::min(bk_, p_.nk - j0);
      std::fill(dk_acc.begin(), dk_acc.end(), A(0));
      std::fill(dv_acc.begin(), dv_acc.end(), A(0));
      for (int g = 0; g < p_.group; ++g) {
        const std::size_t qrow0 = (static_cast<std::size_t>(b) * p_.Hq + hk * p_.group + g) * p_.nq;
        const int first_row = p_.causal() ? std::max(0, j0 - p_.offset) : 0;
        for (int r0 = first_row - first_row % bq_; r0 < p_.nq; r0 += bq_) {
          const int rows = std::min(bq_, p_.nq - r0);
          scores(qrow0, kvh, r0, rows, j0, cols, P);
          std::fill(dS.begin(), dS.end(), A(0));
          gemm_nn(rows, cols, p_.dv, &dout[(qrow0 + r0) * p_.dv], p_.dv, &p_.vt[kvh * p_.nk * p_.dv] + j0, p_.nk, dS.data(), bk_);  // dP
          for (int r = 0; r < rows; ++r) {
            const std::size_t row = qrow0 + r0 + r;
            D[r] = 0;
            for (int x = 0; x < p_.dv; ++x) D[r] += dout[row * p_.dv + x] * o[row * p_.dv + x];  // D = rowsum(dO o O)
            for (int j = 0; j < cols; ++j) {
              A& pj = P[static_cast<std::size_t>(r) * bk_ + j];
              A& dsj = dS[static_cast<std::size_t>(r) * bk_ + j];
              pj = (pj == minus_inf<A>() || lse[row] == minus_inf<A>()) ? A(0) : exp(pj - lse[row]);  // P = exp(S - L)
              dsj = pj * (dsj - D[r]);                                                                  // dS = P o (dP - D)
            }
          }
          round_to_storage(P.data(), P.size(), p_.t);
          round_to_storage(dS.data(), dS.size(), p_.t);
          gemm_tn(cols, p_.dv, rows, P.data(), bk_, &dout[(qrow0 + r0) * p_.dv], p_.dv, dv_acc.data(), p_.dv);  // dV_j += P^T dO_i
          gemm_tn(cols, p_.d, rows, dS.data(), bk_, &p_.q[(qrow0 + r0) * p_.d], p_.d, dk_acc.data(), p_.d);      // dK_j += dS^T Q_i
          dq_tile.assign(static_cast<std::size_t>(rows) * p_.d, A(0));
          gemm_nn(rows, p_.d, cols, dS.data(), bk_, &p_.k[(kvh * p_.nk + j0) * p_.d], p_.d, dq_tile.data(), p_.d);  // dS K_j
          for (std::size_t e = 0; e < dq_tile.size(); ++e) dq[(qrow0 + r0) * p_.d + e] += s * dq_tile[e];       // dQ_i += s dS K_j
        }
      }
      for (int j = 0; j < cols; ++j) {
        for (int x = 0; x < p_.d; ++x) dk[(kvh * p_.nk + j0 + j) * p_.d + x] = s * dk_acc[static_cast<std::size_t>(j) * p_.d + x];
        for (int x = 0; x < p_.dv; ++x) dv[(kvh * p_.nk + j0 + j) * p_.dv + x] = dv_acc[static_cast<std::size_t>(j) * p_.dv + x];
      }
    }
  }

  Problem<A> p_;
  int bq_, bk_;
};

class Fa1Subject final : public Subject {
 public:
  Fa1Subject() {
    info_.name = "cpu.fa1";
    info_.description = "FlashAttention v1: key/value tiles outer, query tiles inner, O kept normalised in the storage format and "
                        "rewritten per key tile";
    info_.ops = {Op::fwd, Op::bwd};
    info_.formats = {Format::bf16, Format::fp16, Format::fp32, Format::fp64};
    info_.max_head_dim = 256;
    info_.masks = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};
    info_.stochastic_rounding = true;
    refresh();
  }
  const SubjectInfo& info() const override { return info_; }
  void set_option(const std::string& name, const std::string& value) override {
    if (name != "block_q" && name != "block_k") Subject::set_option(name, value);
    (name == "block_q" ? bq_ : bk_) = parse_tile_size(info_, name, value);
    refresh();
  }
  void run(Op op, const AttentionCall& c) override {
    validate_call(info_, op, c);
    for (auto [t, what] : {std::pair{&c.q, "Q"}, std::pair{&c.k, "K"}, std::pair{&c.v, "V"}}) require_finite(*t, info_.name, what);
    if (op == Op::bwd) require_finite(c.dout, info_.name, "dO");
    if (c.policy.accumulate == Format::fp64) {
      Fa1<double> f(c, bq_, bk_);
      op == Op::fwd ? f.forward() : f.backward();
    } else if (c.policy.accumulate == Format::fp32) {
      Fa1<float> f(c, bq_, bk_);
      op == Op::fwd ? f.forward() : f.backward();
    } else {
      throw SubjectError(info_.name + ": accumulation in " + std::string(fc::name(c.policy.accumulate)) + " (fp32 or fp64)");
    }
  }

 private:
  void refresh() {
    info_.options = {{"block_q", std::to_string(bq_), "query rows per tile"}, {"block_k", std::to_string(bk_), "keys per tile"}};
  }
  SubjectInfo info_;
  int bq_ = 64, bk_ = 64;  // FA1's rule Bc = ceil(M / 4d), Br = min(Bc, d) at d = 64 with 64 KB of SRAM
};

}  // namespace

std::unique_ptr<Subject> make_cpu_fa1() { return std::make_unique<Fa1Subject>(); }

}  // namespace fc::kernels::cpu
