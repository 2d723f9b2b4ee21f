// cpu.hog, cpu.hog.2pass: the attention double backward with Flash Hog's pass structure
// (EQUATIONS.md section 3), no atomics and no [Nq, Nk] buffer.
//
//   query-tiled passes (a task per query tile of a head; tiles of P, dP, ddS recomputed each pass):
//     cpu.hog        pass 1: dd = rowsum(ddS o P);  pass 2: b = rowsum(dP' o P);  pass 3: dQ', ddO
//     cpu.hog.2pass  pass 1: dd, r1 = rowsum(P o dO ddV^T), r3 = rowsum(P o dP o ddS), then
//                    b = r1 + r3 - 2 D dd;  pass 2: dQ', ddO
//   key-tiled pass (a task per key tile of a kv head, summing the group's query rows): dK', dV'
// with D = rowsum(dO o O) from the stored O, and the row statistics D, dd, b (O(Nq)) the only state
// between passes. fwd and bwd are cpu.fa2's.
//
// Rounding points, as the CUDA kernel is planned (sm_90a tensor cores): inputs (Q, K, V, dO, ddQ,
// ddK, ddV) in the storage format; P, dS, dS', ddP rounded to it before the products that consume them;
// fp32 accumulation; row statistics and the elementwise formulas in fp32; softmax scale on dQ', dK'
// at the end. The 2-pass b forms r1 + r3 - 2 D dd from sums that can cancel: a different rounding,
// which the harness judges like any other.
#include "kernels/cpu/hog.hpp"

#include <span>
#include <string>

#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/flash_common.hpp"
#include "kernels/cpu/storage_rounding.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace fc::kernels::cpu {
namespace {

template <class A>
class Hog {
 public:
  Hog(const AttentionCall& c, bool two_pass, int block_q, int block_k) : p_(c), two_pass_(two_pass), bq_(block_q), bk_(block_k) {}

  void double_backward() {
    o_ = read<A>(p_.c.o), dout_ = read<A>(p_.c.dout), lse_ = read<A>(p_.c.lse);
    ddq_ = read<A>(p_.c.ddq), ddk_ = read<A>(p_.c.ddk), ddv_ = read<A>(p_.c.ddv);
    ddkt_.resize(ddk_.size()), ddvt_.resize(ddv_.size());
    for (int h = 0; h < p_.B * p_.Hkv; ++h) {
      transpose(p_.nk, p_.d, &ddk_[static_cast<std::size_t>(h) * p_.nk * p_.d], &ddkt_[static_cast<std::size_t>(h) * p_.nk * p_.d]);
      transpose(p_.nk, p_.dv, &ddv_[static_cast<std::size_t>(h) * p_.nk * p_.dv], &ddvt_[static_cast<std::size_t>(h) * p_.nk * p_.dv]);
    }
    const std::size_t rows_total = lse_.size();
    D_.assign(rows_total, A(0)), dd_.assign(rows_total, A(0)), b_.assign(rows_total, A(0));
    for (std::size_t r = 0; r < rows_total; ++r) {
      for (int x = 0; x < p_.dv; ++x) D_[r] += dout_[r * p_.dv + x] * o_[r * p_.dv + x];  // D = rowsum(dO o O)
    }
    std::vector<A> dq2(p_.q.size(), A(0)), ddo(dout_.size(), A(0)), dk2(p_.k.size(), A(0)), dv2(p_.v.size(), A(0));
    const int tiles_q = (p_.nq + bq_ - 1) / bq_, tiles_k = (p_.nk + bk_ - 1) / bk_;
    const std::size_t query_tasks = static_cast<std::size_t>(p_.B) * p_.Hq * tiles_q;
    const auto query_pass = [&](int pass) {
      parallel_for(query_tasks, [&](std::size_t task) {
        const int qt = static_cast<int>(task % tiles_q), h = static_cast<int>(task / tiles_q % p_.Hq), b = static_cast<int>(task / tiles_q / p_.Hq);
        query_tile(pass, b, h, qt, dq2, ddo);
      });
    };
    if (two_pass_) {
      query_pass(kStatistics2Pass);
    } else {
      query_pass(kStatisticsDd);
      query_pass(kStatisticsB);
    }
    query_pass(kQueryOutputs);
    parallel_for(static_cast<std::size_t>(p_.B) * p_.Hkv * tiles_k, [&](std::size_t task) {
      const int kt = static_cast<int>(task % tiles_k), hk = static_cast<int>(task / tiles_k % p_.Hkv), b = static_cast<int>(task / tiles_k / p_.Hkv);
      key_tile(b, hk, kt, dk2, dv2);
    });
    const PrecisionPolicy& pol = p_.c.policy;
    write_from(p_.c.dq2, std::span<const A>(dq2), pol.rounding, pol.stream(Role::grad));
    write_from(p_.c.dk2, std::span<const A>(dk2), pol.rounding, pol.stream(Role::grad));
    write_from(p_.c.dv2, std::span<const A>(dv2), pol.rounding, pol.stream(Role::grad));
    write_from(p_.c.ddo, std::span<const A>(ddo), pol.rounding, pol.stream(Role::grad));
  }

 private:
  enum Pass { kStatisticsDd, kStatisticsB, kStatistics2Pass, kQueryOutputs };

  // The recomputed tiles of rows [r0, r0 + rows) of head (b, h) against keys [j0, j0 + cols).
  struct Tiles {
    std::vector<A> P, dP, ddS, X;  // X = dO ddV^T
    explicit Tiles(std::size_t n) : P(n), dP(n), ddS(n), X(n) {}
  };
  void recompute(int b, int h, int r0, int rows, int j0, int cols, Tiles& t, bool need_x) const {
    const std::size_t qrow0 = (static_cast<std::size_t>(b) * p_.Hq + h) * p_.nq + r0, kvh = p_.kv_head(b, h);
    const std::size_t kbase = kvh * p_.nk;
    for (auto* v : {&t.P, &t.dP, &t.ddS, &t.X}) std::fill(v->begin(), v->end(), A(0));
    gemm_nn(rows, cols, p_.d, &p_.q[qrow0 * p_.d], p_.d, &p_.kt[kbase * p_.d] + j0, p_.nk, t.P.data(), bk_);        // S
    gemm_nn(rows, cols, p_.dv, &dout_[qrow0 * p_.dv], p_.dv, &p_.vt[kbase * p_.dv] + j0, p_.nk, t.dP.data(), bk_);   // dP = dO V^T
    gemm_nn(rows, cols, p_.d, &ddq_[qrow0 * p_.d], p_.d, &p_.kt[kbase * p_.d] + j0, p_.nk, t.ddS.data(), bk_);      // ddQ K^T
    gemm_nn(rows, cols, p_.d, &p_.q[qrow0 * p_.d], p_.d, &ddkt_[kbase * p_.d] + j0, p_.nk, t.ddS.data(), bk_);      // + Q ddK^T
    if (need_x) gemm_nn(rows, cols, p_.dv, &dout_[qrow0 * p_.dv], p_.dv, &ddvt_[kbase * p_.dv] + j0, p_.nk, t.X.data(), bk_);
    const A scale2 = static_cast<A>(p_.c.scale * kLog2e), s = static_cast<A>(p_.c.scale);
    for (int r = 0; r < rows; ++r) {
      const A l2 = lse_[qrow0 + r] * static_cast<A>(kLog2e);
      for (int j = 0; j < cols; ++j) {
        const std::size_t e = static_cast<std::size_t>(r) * bk_ + j;
        t.P[e] = (l2 == minus_inf<A>() || !p_.visible(r0 + r, j0 + j)) ? A(0) : std::exp2(std::fma(t.P[e], scale2, -l2));
        t.ddS[e] *= s;  // ddS = s (ddQ K^T + Q ddK^T)
      }
    }
  }

  void query_tile(int pass, int b, int h, int qt, std::vector<A>& dq2, std::vector<A>& ddo) {
    const int r0 = qt * bq_, rows = std::min(bq_, p_.nq - r0);
    const std::size_t qrow0 = (static_cast<std::size_t>(b) * p_.Hq + h) * p_.nq + r0, kvh = p_.kv_head(b, h);
    Tiles t(static_cast<std::size_t>(bq_) * bk_);
    std::vector<A> r1(rows, A(0)), r3(rows, A(0)), dS(t.P.size()), dSp(t.P.size()), ddP(t.P.size());
    std::vector<A> acc_q(static_cast<std::size_t>(rows) * p_.d, A(0)), acc_o(static_cast<std::size_t>(rows) * p_.dv, A(0));
    const int key_end = p_.key_end(r0 + rows);
    for (int j0 = 0; j0 < key_end; j0 += bk_) {
      const int cols = std::min(bk_, p_.nk - j0);
      recompute(b, h, r0, rows, j0, cols, t, pass != kStatisticsDd);
      for (int r = 0; r < rows; ++r) {
        const std::size_t row = qrow0 + r;
        for (int j = 0; j < cols; ++j) {
          const std::size_t e = static_cast<std::size_t>(r) * bk_ + j;
          const A p = t.P[e];
          switch (pass) {
            case kStatisticsDd: dd_[row] += t.ddS[e] * p; break;  // dd = rowsum(ddS o P)
            case kStatisticsB: {  // dP' = dO ddV^T - dP dd - ddS D + dP ddS;  b = rowsum(dP' o P)
              const A dPp = t.X[e] - t.dP[e] * dd_[row] - t.ddS[e] * D_[row] + t.dP[e] * t.ddS[e];
              b_[row] += dPp * p;
              break;
            }
            case kStatistics2Pass:
              dd_[row] += t.ddS[e] * p;
              r1[r] += p * t.X[e];                 // r1 = rowsum(P o dO ddV^T)
              r3[r] += p * t.dP[e] * t.ddS[e];     // r3 = rowsum(P o dP o ddS)
              break;
            case kQueryOutputs: {
              const A dPp = t.X[e] - t.dP[e] * dd_[row] - t.ddS[e] * D_[row] + t.dP[e] * t.ddS[e];
              dS[e] = p * (t.dP[e] - D_[row]);     // dS / s
              dSp[e] = p * (dPp - b_[row]);        // dS' / s
              ddP[e] = p * (t.ddS[e] - dd_[row]);  // ddP = P o (ddS - dd)
              break;
            }
          }
        }
      }
      if (pass != kQueryOutputs) continue;
      for (auto* m : {&t.P, &dS, &dSp, &ddP}) round_to_storage(m->data(), m->size(), p_.t);
      const std::size_t kbase = (kvh * p_.nk + j0);
      gemm_nn(rows, p_.d, cols, dS.data(), bk_, &ddk_[kbase * p_.d], p_.d, acc_q.data(), p_.d);      // dQ' = s (dS ddK
      gemm_nn(rows, p_.d, cols, dSp.data(), bk_, &p_.k[kbase * p_.d], p_.d, acc_q.data(), p_.d);     //        + dS' K)
      gemm_nn(rows, p_.dv, cols, t.P.data(), bk_, &ddv_[kbase * p_.dv], p_.dv, acc_o.data(), p_.dv);  // ddO = P ddV
      gemm_nn(rows, p_.dv, cols, ddP.data(), bk_, &p_.v[kbase * p_.dv], p_.dv, acc_o.data(), p_.dv); //       + ddP V
    }
    if (pass == kStatistics2Pass) {
      for (int r = 0; r < rows; ++r) b_[qrow0 + r] = r1[r] + r3[r] - A(2) * D_[qrow0 + r] * dd_[qrow0 + r];  // b = r1 + r3 - 2 D dd
    }
    if (pass != kQueryOutputs) return;
    const A s = static_cast<A>(p_.c.scale);
    for (std::size_t e = 0; e < acc_q.size(); ++e) dq2[qrow0 * p_.d + e] = s * acc_q[e];
    for (std::size_t e = 0; e < acc_o.size(); ++e) ddo[qrow0 * p_.dv + e] = acc_o[e];
  }

  void key_tile(int b, int hk, int kt, std::vector<A>& dk2, std::vector<A>& dv2) const {
    const int j0 = kt * bk_, cols = std::min(bk_, p_.nk - j0);
    const std::size_t kvh = static_cast<std::size_t>(b) * p_.Hkv + hk;
    Tiles t(static_cast<std::size_t>(bq_) * bk_);
    std::vector<A> dS(t.P.size()), dSp(t.P.size()), ddP(t.P.size());
    std::vector<A> acc_k(static_cast<std::size_t>(cols) * p_.d, A(0)), acc_v(static_cast<std::size_t>(cols) * p_.dv, A(0));
    for (int g = 0; g < p_.group; ++g) {
      const int h = hk * p_.group + g;
      const std::size_t qbase = (static_cast<std::size_t>(b) * p_.Hq + h) * p_.nq;
      const int first_row = p_.causal() ? std::max(0, j0 - p_.offset) : 0;
      for (int r0 = first_row - first_row % bq_; r0 < p_.nq; r0 += bq_) {
        const int rows = std::min(bq_, p_.nq - r0);
        recompute(b, h, r0, rows, j0, cols, t, true);
        std::fill(dS.begin(), dS.end(), A(0)), std::fill(dSp.begin(), dSp.end(), A(0)), std::fill(ddP.begin(), ddP.end(), A(0));
        for (int r = 0; r < rows; ++r) {
          const std::size_t row = qbase + r0 + r;
          for (int j = 0; j < cols; ++j) {
            const std::size_t e = static_cast<std::size_t>(r) * bk_ + j;
            const A p = t.P[e];
            const A dPp = t.X[e] - t.dP[e] * dd_[row] - t.ddS[e] * D_[row] + t.dP[e] * t.ddS[e];
            dS[e] = p * (t.dP[e] - D_[row]);
            dSp[e] = p * (dPp - b_[row]);
            ddP[e] = p * (t.ddS[e] - dd_[row]);
          }
        }
        for (auto* m : {&dS, &dSp, &ddP}) round_to_storage(m->data(), m->size(), p_.t);
        gemm_tn(cols, p_.d, rows, dS.data(), bk_, &ddq_[(qbase + r0) * p_.d], p_.d, acc_k.data(), p_.d);      // dK' = s (dS^T ddQ
        gemm_tn(cols, p_.d, rows, dSp.data(), bk_, &p_.q[(qbase + r0) * p_.d], p_.d, acc_k.data(), p_.d);     //        + dS'^T Q)
        gemm_tn(cols, p_.dv, rows, ddP.data(), bk_, &dout_[(qbase + r0) * p_.dv], p_.dv, acc_v.data(), p_.dv); // dV' = ddP^T dO
      }
    }
    const A s = static_cast<A>(p_.c.scale);
    for (int j = 0; j < cols; ++j) {
      for (int x = 0; x < p_.d; ++x) dk2[(kvh * p_.nk + j0 + j) * p_.d + x] = s * acc_k[static_cast<std::size_t>(j) * p_.d + x];
      for (int x = 0; x < p_.dv; ++x) dv2[(kvh * p_.nk + j0 + j) * p_.dv + x] = acc_v[static_cast<std::size_t>(j) * p_.dv + x];
    }
  }

  Problem<A> p_;
  bool two_pass_;
  int bq_, bk_;
  std::vector<A> o_, dout_, lse_, ddq_, ddk_, ddv_, ddkt_, ddvt_, D_, dd_, b_;
};

class HogSubject final : public Subject {
 public:
  explicit HogSubject(bool two_pass) : two_pass_(two_pass), fa2_(make_cpu_fa2()) {
    info_ = fa2_->info();
    info_.name = two_pass ? "cpu.hog.2pass" : "cpu.hog";
    info_.description = two_pass ? "Flash Hog double backward, b accumulated with dd (r1 + r3 - 2 D dd): 2 query passes + 1 key pass; fwd, bwd: cpu.fa2"
                                 : "Flash Hog double backward: 3 query-tiled passes (dd, b, dQ' and ddO) + 1 key-tiled pass (dK', dV'); fwd, bwd: cpu.fa2";
    info_.ops = {Op::fwd, Op::bwd, Op::bwdbwd};
    info_.options = {{"block_q", std::to_string(bq_), "query rows per tile (double backward)"},
                     {"block_k", std::to_string(bk_), "keys per tile (double backward)"}};
  }
  const SubjectInfo& info() const override { return info_; }
  void set_option(const std::string& name, const std::string& value) override {
    if (name != "block_q" && name != "block_k") Subject::set_option(name, value);
    (name == "block_q" ? bq_ : bk_) = parse_tile_size(info_, name, value);
    info_.options = {{"block_q", std::to_string(bq_), "query rows per tile (double backward)"},
                     {"block_k", std::to_string(bk_), "keys per tile (double backward)"}};
  }
  void run(Op op, const AttentionCall& c) override {
    validate_call(info_, op, c);
    if (op != Op::bwdbwd) {  // cpu.fa2's forward and backward
      AttentionCall as_fa2 = c;
      fa2_->run(op, as_fa2);
      return;
    }
    for (auto [t, what] : {std::pair{&c.q, "Q"}, std::pair{&c.k, "K"}, std::pair{&c.v, "V"}, std::pair{&c.dout, "dO"},
                           std::pair{&c.ddq, "ddQ"}, std::pair{&c.ddk, "ddK"}, std::pair{&c.ddv, "ddV"}}) {
      require_finite(*t, info_.name, what);
    }
    if (c.policy.accumulate == Format::fp64) {
      Hog<double>(c, two_pass_, bq_, bk_).double_backward();
    } else if (c.policy.accumulate == Format::fp32) {
      Hog<float>(c, two_pass_, bq_, bk_).double_backward();
    } else {
      throw SubjectError(info_.name + ": accumulation in " + std::string(fc::name(c.policy.accumulate)) + " (fp32 or fp64)");
    }
  }

 private:
  bool two_pass_;
  std::unique_ptr<Subject> fa2_;
  SubjectInfo info_;
  int bq_ = 64, bk_ = 64;
};

}  // namespace

std::unique_ptr<Subject> make_cpu_hog() { return std::make_unique<HogSubject>(false); }
std::unique_ptr<Subject> make_cpu_hog_two_pass() { return std::make_unique<HogSubject>(true); }

}  // namespace fc::kernels::cpu
