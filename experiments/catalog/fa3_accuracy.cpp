// fa3-accuracy: the FA3 paper's accuracy experiment (issue 11, item 5). Q, K, V from the outlier mix
// N(0, 1) + N(0, 100) x Bernoulli(0.001) (the harness's `outliers` distribution, the paper's), drawn in
// fp64; the RMSE of O against fp64 attention on those same fp64 inputs (cpu.naive with an fp64 policy:
// 10^11 times finer than any row here), per row:
//   fp16   every attention subject named (default: cpu.naive, the plain attention of a framework in
//          fp16; cpu.fa2; cpu.fa3; and cuda.fa2 / cuda.fa3 where registered), inputs rounded to fp16
//   FP8    every subject with an `operands` option (cpu.fa3.fp8 and its GPU twin), operands=scaled:
//          Q, K, V quantized to e4m3 with a power-of-two scale per head ("tensor") or per block of
//          block_q rows of Q and block_k rows of K and V ("block", FA3's block quantization), each with
//          and without incoherent processing (Q and K times M = D H / sqrt(d), D a random +-1 diagonal
//          and H the Walsh-Hadamard matrix: M is orthogonal, so Q M (K M)^T = Q K^T, and it spreads an
//          outlier over a whole row before quantization). O in bf16, as FA3's FP8 forward writes it.
// Recorded per row: the RMSE, the largest error, and the RMSE over the reference's RMS.
#include <cmath>
#include <random>
#include <span>

#include "experiments/catalog/catalog.hpp"
#include "experiments/records.hpp"
#include "gradcheck/inputs.hpp"
#include "kernels/tensor_io.hpp"
#include "precision/fp8.hpp"

namespace fc::experiments {
namespace {

bool is_fp8(const kernels::SubjectInfo& info) { return info.family == kernels::Family::attention && !info.option_value("operands").empty(); }
bool is_fp16_default(const kernels::SubjectInfo& info) {
  for (const char* n : {"cpu.naive", "cpu.fa2", "cpu.fa3", "cuda.fa2", "cuda.fa3"}) {
    if (info.name == n) return true;
  }
  return false;
}

// O of a forward call on contiguous [B, H, N, d] inputs (one head group: Hq = Hkv) in the policy's formats.
std::vector<double> forward_o(kernels::Subject& s, const PrecisionPolicy& policy, const kernels::AttentionShape& sh, double scale,
                              const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v) {
  const std::array<std::int64_t, 4> shape{sh.batch, sh.heads_q, sh.seq_q, sh.head_dim};
  gradcheck::Tensor tq(policy.format(Role::q), shape, gradcheck::Layout::bhnd), tk(policy.format(Role::k), shape, gradcheck::Layout::bhnd);
  gradcheck::Tensor tv(policy.format(Role::v), shape, gradcheck::Layout::bhnd), to(policy.format(Role::o), shape, gradcheck::Layout::bhnd);
  gradcheck::Tensor tl(policy.format(Role::stats), {sh.batch, sh.heads_q, sh.seq_q, 1}, gradcheck::Layout::bhnd);
  tq.assign(q), tk.assign(k), tv.assign(v);
  kernels::AttentionCall c;
  c.shape = sh, c.scale = scale, c.policy = policy;
  c.q = tq.view(), c.k = tk.view(), c.v = tv.view(), c.out_o = to.view(), c.out_lse = tl.view();
  s.run(kernels::Op::fwd, c);
  return to.values();
}

// Each row of [rows, d] times D H / sqrt(d) (an orthonormal Walsh-Hadamard transform after random signs).
void hadamard_rows(std::vector<double>& x, int d, const std::vector<double>& signs) {
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    double* row = &x[r * d];
    for (int c = 0; c < d; ++c) row[c] *= signs[c];
    for (int h = 1; h < d; h *= 2) {
      for (int i = 0; i < d; i += 2 * h) {
        for (int j = i; j < i + h; ++j) {
          const double a = row[j], b = row[j + h];
          row[j] = a + b, row[j + h] = a - b;
        }
      }
    }
    for (int c = 0; c < d; ++c) row[c] /= std::sqrt(static_cast<double>(d));
  }
}

// x ([heads, n, d]) quantized to e4m3 with a power-of-two scale per block of `block` rows of a head
// (block >= n: one per head), returned as the scaled values e4m3 x 2^e (exact in fp32).
std::vector<double> quantize(std::vector<double> x, int heads, int n, int d, int block) {
  for (int h = 0; h < heads; ++h) {
    for (int r0 = 0; r0 < n; r0 += block) {
      double* p = &x[(static_cast<std::size_t>(h) * n + r0) * d];
      const std::size_t count = static_cast<std::size_t>(std::min(block, n - r0)) * d;
      double amax = 0;
      for (std::size_t i = 0; i < count; ++i) amax = std::max(amax, std::fabs(p[i]));
      const int e = e4m3_block_exponent(amax);
      for (std::size_t i = 0; i < count; ++i) p[i] = std::ldexp(to_double(round_to_e4m3(std::ldexp(p[i], -e), Rounding::nearest_even)), e);
    }
  }
  return x;
}

struct Errors {
  double rmse = 0, max_abs = 0, rel_rmse = 0;
};
Errors errors(const std::vector<double>& o, const std::vector<double>& ref) {
  double se = 0, sr = 0;
  Errors e;
  for (std::size_t i = 0; i < o.size(); ++i) {
    const double d = o[i] - ref[i];
    se += d * d, sr += ref[i] * ref[i], e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.rmse = std::sqrt(se / static_cast<double>(o.size()));
  e.rel_rmse = sr > 0 ? e.rmse / std::sqrt(sr / static_cast<double>(o.size())) : e.rmse;
  return e;
}

}  // namespace

Experiment fa3_accuracy_experiment() {
  return {"fa3-accuracy",
          "the FA3 paper's accuracy experiment: RMSE of O against fp64 for outlier inputs; fp16 plain, FA2, FA3; FP8 with per-tensor or "
          "per-block scales, with and without incoherent processing",
          [](const ExperimentContext& ctx) {
            const gradcheck::Registry& reg = *ctx.registry;
            kernels::Subject* reference = reg.find("cpu.naive");
            if (reference == nullptr) throw std::invalid_argument("fa3-accuracy: needs cpu.naive for the fp64 reference");
            std::vector<kernels::Subject*> fp16, fp8;
            for (kernels::Subject* s : select_subjects(ctx, [&](const kernels::SubjectInfo& i) {
                   return i.family == kernels::Family::attention && (is_fp8(i) || (ctx.subjects.empty() ? is_fp16_default(i) : i.supports(Format::fp16)));
                 })) {
              (is_fp8(s->info()) ? fp8 : fp16).push_back(s);
            }
            const int n = ctx.scale == Scale::test ? 192 : ctx.scale == Scale::quick ? 1024 : 4096;
            const int heads = ctx.scale == Scale::full ? 4 : ctx.scale == Scale::quick ? 2 : 1, d = 64;
            const std::uint64_t seed = ctx.seed;
            std::vector<WorkItem> items;
            WorkItem item;
            item.label = "fa3-accuracy: " + std::to_string(fp16.size()) + " fp16 and " + std::to_string(fp8.size()) + " FP8 subjects, N=" +
                         std::to_string(n);
            item.cost = static_cast<double>(fp16.size() + 4 * fp8.size() + 1) * n * n * heads * d / 1e6;
            item.run = [=] {
              gradcheck::Case c;
              c.shape = {1, heads, heads, n, n, d, d};
              c.scale = 1 / std::sqrt(static_cast<double>(d));
              c.policy = PrecisionPolicy::uniform(Format::fp64);
              c.inputs = {gradcheck::Distribution::outliers, 1.0};
              c.inputs.outlier_rate = 1e-3;
              c.seed = seed;
              const gradcheck::CaseInputs in = gradcheck::make_inputs(c);
              const std::vector<double> q = in.q.values(), k = in.k.values(), v = in.v.values();
              const std::vector<double> ref = forward_o(*reference, PrecisionPolicy::uniform(Format::fp64), c.shape, c.scale, q, k, v);
              std::vector<nlohmann::json> out;
              const auto record = [&](const kernels::Subject& s, const std::string& format, const std::string& scaling, bool incoherent,
                                      const std::vector<double>& o) {
                const Errors e = errors(o, ref);
                nlohmann::json j = record_header("experiment", device_of(s.info()));
                j["experiment"] = "fa3-accuracy";
                j["subject"] = s.info().name;
                j["format"] = format, j["scaling"] = scaling, j["incoherent"] = incoherent;
                j["shape"] = {{"B", 1}, {"H", heads}, {"N", n}, {"d", d}};
                j["inputs"] = "outliers: N(0,1) + N(0,100) x Bernoulli(0.001)";
                j["reference"] = "cpu.naive fp64";
                j["metrics"] = {{"rmse", number(e.rmse)}, {"max_abs", number(e.max_abs)}, {"rel_rmse", number(e.rel_rmse)}};
                j["verdict"] = "measured";
                out.push_back(std::move(j));
              };
              for (kernels::Subject* s : fp16) record(*s, "fp16", "none", false, forward_o(*s, PrecisionPolicy::uniform(Format::fp16), c.shape, c.scale, q, k, v));
              std::vector<double> signs(d);
              std::mt19937_64 gen(seed ^ 0x9e3779b97f4a7c15ull);
              for (double& x : signs) x = (gen() & 1u) ? 1.0 : -1.0;
              for (kernels::Subject* s : fp8) {
                const std::string was = s->info().option_value("operands");
                const int block_q = std::stoi(s->info().option_value("block_q")), block_k = std::stoi(s->info().option_value("block_k"));
                s->set_option("operands", "scaled");
                try {
                  for (bool incoherent : {false, true}) {
                    std::vector<double> qi = q, ki = k;
                    if (incoherent) hadamard_rows(qi, d, signs), hadamard_rows(ki, d, signs);
                    for (const std::string scaling : {"tensor", "block"}) {
                      const bool per_block = scaling == "block";
                      const auto qq = quantize(qi, heads, n, d, per_block ? block_q : n), kq = quantize(ki, heads, n, d, per_block ? block_k : n);
                      const auto vq = quantize(v, heads, n, d, per_block ? block_k : n);
                      record(*s, "e4m3", scaling, incoherent, forward_o(*s, PrecisionPolicy::parse("fp32,o=bf16"), c.shape, c.scale, qq, kq, vq));
                    }
                  }
                } catch (...) {
                  s->set_option("operands", was);
                  throw;
                }
                s->set_option("operands", was);
              }
              return out;
            };
            items.push_back(std::move(item));
            return items;
          }};
}

}  // namespace fc::experiments
