// cudnn-fp8-reference: what NVIDIA's own library gets from FP8 attention on this GPU, beside ours, in one process
// (a tool, not a test; kernels/cuda/NOTES.md, "cuDNN's FP8 forward as a reference").
//
// Issue 11 asks cuda.fa3.fp8's forward for 1.5x our bf16 forward. This tool times, at each point (d, N, mask; B = 16384
// / N, H = 2048 / d as the bench), four forwards on the same card and in the same rounds:
//   cudnn.bf16   cuDNN's SDPA forward (cudnn-frontend's graph API), bf16 Q, K, V, O, the softmax statistics written;
//   cudnn.e4m3   cuDNN's FP8 SDPA forward, e4m3 Q, K, V with per-tensor descales (kInputExponent), P scaled by 1 into e4m3
//                (our kernel's P <= 1), statistics written; O in bf16 where cuDNN takes it, else in e4m3 and the
//                tool says so (cuDNN 9.19 on Hopper: "sdpa fp8 forward with HALF/BFLOAT16 output is only supported on
//                Blackwell"), so there it stores half of our O's bytes (32 MiB against 64 at every point);
//   cuda.fa3 (bf16) and cuda.fa3.fp8 (e4m3): our subjects, through Subject::time as `flashcheck bench` times them
//                (cuda.fa3.fp8's time includes its V^T pass).
// Every one is timed by kernels/cuda/run_timer.hpp's time_runs (the stream held until a run is enqueued, a warm-up of
// --warmup-s seconds before each round's timed runs, the SM clock sampled as each run starts), the four in turn and
// the order reversed every other round, the bench's way; a forward's time is the median of its rounds' medians.
// Inputs: cudnn.bf16 times the bf16 N(0, 1) values our subjects draw for themselves (fill_normal, seed 1, streams 1-3:
// the same numbers), cudnn.e4m3 those values times 2^6 rounded to e4m3 (kInputExponent below).
// The data matter: at the power limit the clock follows the tensor pipes' switching, and a first run that timed
// cudnn.bf16 on the e4m3 values widened (their low mantissa bits zero) read 6-8 % faster than on full bf16 values, at
// a clock 105-165 MHz higher (NOTES). The check: before timing, the bf16 graph runs once on the e4m3 values widened,
// and its O must agree with cudnn.e4m3's to e4m3's P and O (each about 2^-4 relative); the tool prints the largest
// difference of O against max |O| and refuses to time an FP8 graph whose difference exceeds 2^-2 (not attention).
// FLOP counts are the bench's: 4 N^2 d B H, halved under the causal mask.
//
// Needs cudnn-frontend's headers (header-only; the nvidia-cudnn-frontend wheel's include/, or the GitHub repository's)
// and cuDNN 9 (libcudnn.so.9): CMake builds this target only when FLASHCHECK_CUDNN_FRONTEND_INCLUDE names them
// (kernels/cuda/CMakeLists.txt).
//
// Usage: cudnn-fp8-reference [--d 64|128] [--n N[,N...]] [--mask none|causal[,...]] [--rounds R] [--repeats K]
//                            [--warmup-s S] [--out FILE.jsonl]
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

#include "kernels/attention_call.hpp"
#include "kernels/cuda/attention_params.hpp"
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/device_fill.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/run_timer.hpp"
#include "kernels/cuda/tools/hopper_device.hpp"

namespace {

namespace fe = cudnn_frontend;
using fc::kernels::AttentionShape;
using fc::kernels::Mask;
using fc::kernels::Timing;
using fc::kernels::cuda::DeviceBuffer;

struct Config {
  int d = 128;
  std::vector<int> ns = {4096, 8192, 16384};
  std::vector<bool> causal = {false, true};
  int rounds = 5, repeats = 20;
  double warmup_s = 0.5;
  std::string out;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "cudnn-fp8-reference: %s\nusage: cudnn-fp8-reference [--d 64|128] [--n N[,N...]] [--mask none|causal[,...]] [--rounds R] "
               "[--repeats K] [--warmup-s S] [--out FILE.jsonl]\n",
               what.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, ',');) parts.push_back(p);
  return parts;
}

long positive(const std::string& flag, const std::string& v, long most) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x <= 0 || x > most) usage_error(flag + " " + v + ": an integer from 1 to " + std::to_string(most));
  return x;
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: cudnn-fp8-reference [--d 64|128] [--n N[,N...]] [--mask none|causal[,...]] [--rounds R] [--repeats K] [--warmup-s S] [--out FILE.jsonl]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) usage_error(a + (a.rfind("--", 0) == 0 ? " needs a value" : ": unknown argument"));
    const std::string v = argv[++i];
    if (a == "--d") {
      c.d = static_cast<int>(positive(a, v, 256));
      if (c.d != 64 && c.d != 128) usage_error("--d " + v + ": 64 or 128 (cuda.fa3's head dims, the bf16 side of the comparison)");
    } else if (a == "--n") {
      c.ns.clear();
      for (const std::string& n : split(v)) c.ns.push_back(static_cast<int>(positive(a, n, 16384)));
      if (c.ns.empty()) usage_error("--n needs at least one length");
    } else if (a == "--mask") {
      c.causal.clear();
      for (const std::string& m : split(v)) {
        if (m != "none" && m != "causal") usage_error("--mask " + m + ": none or causal");
        c.causal.push_back(m == "causal");
      }
      if (c.causal.empty()) usage_error("--mask needs at least one mask");
    } else if (a == "--rounds") {
      c.rounds = static_cast<int>(positive(a, v, 100));
    } else if (a == "--repeats") {
      c.repeats = static_cast<int>(positive(a, v, 10000));
    } else if (a == "--warmup-s") {
      char* end = nullptr;
      c.warmup_s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(c.warmup_s >= 0) || c.warmup_s > 60) usage_error("--warmup-s " + v + ": seconds from 0 to 60");
    } else if (a == "--out") {
      c.out = v;
    } else {
      usage_error("unknown argument " + a);
    }
  }
  return c;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void check_fe(fe::error_object e, const std::string& what) {
  if (e.is_bad()) throw std::runtime_error(what + ": " + e.get_message());
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// cudnn.e4m3's operands are x 2^kInputExponent in e4m3, with descales 2^-kInputExponent: a per-tensor power of two
// that puts N(0, 1)'s largest values (about 6 in 2^25 draws) near e4m3's 448, as a per-tensor recipe would, and keeps
// subnormals rare. cuda.fa3.fp8's quantizer picks a power of two per block of 128 rows by that rule
// (e4m3_block_exponent: 2^6 or 2^7 for these values), so both kernels multiply numbers of the same kind.
constexpr int kInputExponent = 6;

// x (bf16 N(0, 1) values) times 2^kInputExponent rounded to e4m3 (to nearest, saturating: only |x| > 7 would
// saturate) into e4m3, and that value times 2^-kInputExponent widened back to bf16 (exact) into widened, for the check.
__global__ void round_to_e4m3(const __nv_bfloat16* x, __nv_fp8_e4m3* e4m3, __nv_bfloat16* widened, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const __nv_fp8_e4m3 r(ldexpf(__bfloat162float(x[i]), kInputExponent));
    e4m3[i] = r;
    widened[i] = __float2bfloat16(ldexpf(static_cast<float>(r), -kInputExponent));
  }
}

// One cuDNN SDPA forward graph, built once and executed on the legacy default stream.
class CudnnForward {
 public:
  CudnnForward(cudnnHandle_t handle, const AttentionShape& sh, bool causal, bool e4m3, void* q, void* k, void* v, const std::string& name)
      : handle_(handle), name_(name) {
    const std::vector<std::int64_t> dims = {sh.batch, sh.heads_q, sh.seq_q, sh.head_dim};
    const std::vector<std::int64_t> strides = {static_cast<std::int64_t>(sh.heads_q) * sh.seq_q * sh.head_dim,
                                               static_cast<std::int64_t>(sh.seq_q) * sh.head_dim, sh.head_dim, 1};
    const std::size_t elements = static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.seq_q * sh.head_dim;
    const float scale = 1.f / std::sqrt(static_cast<float>(sh.head_dim));
    o_ = DeviceBuffer(elements * 2, name, "O");
    stats_ = DeviceBuffer(static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.seq_q * 4, name, "statistics");
    // O in bf16 first (our FP8 forward's O); cuDNN versions without a 16-bit O for FP8 inputs get O in e4m3.
    for (const bool o_in_bf16 : {true, false}) {
      if (!e4m3 && !o_in_bf16) break;
      graph_ = std::make_unique<fe::graph::Graph>();
      graph_->set_io_data_type(e4m3 ? fe::DataType_t::FP8_E4M3 : fe::DataType_t::BFLOAT16)
          .set_intermediate_data_type(fe::DataType_t::FLOAT)
          .set_compute_data_type(fe::DataType_t::FLOAT);
      const auto tensor = [&](const char* n) { return graph_->tensor(fe::graph::Tensor_attributes().set_name(n).set_dim(dims).set_stride(strides)); };
      const auto Q = tensor("Q"), K = tensor("K"), V = tensor("V");
      std::shared_ptr<fe::graph::Tensor_attributes> O, stats;
      pack_ = {{Q, q}, {K, k}, {V, v}};
      q_ = Q, k_ = K, v_ = V;
      if (e4m3) {
        const auto scalar = [&](const char* n) {
          return graph_->tensor(fe::graph::Tensor_attributes().set_name(n).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
        };
        std::shared_ptr<fe::graph::Tensor_attributes> scalars[6] = {scalar("Descale_Q"), scalar("Descale_K"), scalar("Descale_V"),
                                                                   scalar("Descale_S"), scalar("Scale_S"),   scalar("Scale_O")};
        const auto options = fe::graph::SDPA_fp8_attributes().set_name("sdpa_fp8").set_generate_stats(true).set_causal_mask(causal).set_attn_scale(scale);
        auto [o, st, amax_s, amax_o] = graph_->sdpa_fp8(Q, K, V, scalars[0], scalars[1], scalars[2], scalars[3], scalars[4], scalars[5], options);
        O = o, stats = st;
        amax_s->set_output(true).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
        amax_o->set_output(true).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
        // Q, K and V descaled by 2^-kInputExponent; S's descale, P's and O's scales 1 (P <= 1 into e4m3, as ours);
        // [6], [7]: the amaxes cuDNN writes.
        const float input_descale = std::ldexp(1.f, -kInputExponent);
        const float scales[8] = {input_descale, input_descale, input_descale, 1.f, 1.f, 1.f, 0.f, 0.f};
        scalars_ = DeviceBuffer(sizeof scales, name, "scales");
        check_cuda(cudaMemcpy(scalars_.get(), scales, sizeof scales, cudaMemcpyHostToDevice), "the scales");
        for (int i = 0; i < 6; ++i) pack_[scalars[i]] = static_cast<float*>(scalars_.get()) + i;
        pack_[amax_s] = static_cast<float*>(scalars_.get()) + 6, pack_[amax_o] = static_cast<float*>(scalars_.get()) + 7;
      } else {
        const auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_causal_mask(causal).set_attn_scale(scale);
        auto [o, st] = graph_->sdpa(Q, K, V, options);
        O = o, stats = st;
      }
      O->set_output(true).set_dim(dims).set_stride(strides);
      if (o_in_bf16) O->set_data_type(fe::DataType_t::BFLOAT16);
      stats->set_output(true).set_data_type(fe::DataType_t::FLOAT);
      pack_[O] = o_.get(), pack_[stats] = stats_.get();
      fe::error_object built = build();
      if (built.is_good()) {
        o_bf16_ = o_in_bf16;
        break;
      }
      if (!e4m3 || !o_in_bf16) throw std::runtime_error(name + ": cuDNN refused the graph: " + built.get_message());
      refusal_ = built.get_message();
    }
    std::int64_t workspace_bytes = 0;
    check_fe(graph_->get_workspace_size(workspace_bytes), name + ": workspace size");
    if (workspace_bytes > 0) workspace_ = DeviceBuffer(static_cast<std::size_t>(workspace_bytes), name, "workspace");
    check_cuda(cudaDeviceSynchronize(), "set-up");
  }

  void run() {
    fe::error_object e = graph_->execute(handle_, pack_, workspace_.get());
    if (e.is_bad()) throw std::runtime_error(name_ + ": execute: " + e.get_message());
  }
  // Points the graph at other inputs of the same shape and type.
  void set_inputs(void* q, void* k, void* v) { pack_[q_] = q, pack_[k_] = k, pack_[v_] = v; }
  bool o_in_bf16() const { return o_bf16_; }
  const std::string& bf16_o_refusal() const { return refusal_; }
  const DeviceBuffer& o() const { return o_; }

 private:
  fe::error_object build() {
    if (fe::error_object e = graph_->validate(); e.is_bad()) return e;
    if (fe::error_object e = graph_->build_operation_graph(handle_); e.is_bad()) return e;
    if (fe::error_object e = graph_->create_execution_plans({fe::HeurMode_t::A}); e.is_bad()) return e;
    if (fe::error_object e = graph_->check_support(handle_); e.is_bad()) return e;
    return graph_->build_plans(handle_);
  }

  cudnnHandle_t handle_;
  std::string name_;
  std::unique_ptr<fe::graph::Graph> graph_;
  std::unordered_map<std::shared_ptr<fe::graph::Tensor_attributes>, void*> pack_;
  std::shared_ptr<fe::graph::Tensor_attributes> q_, k_, v_;
  DeviceBuffer o_, stats_, scalars_, workspace_;
  bool o_bf16_ = false;
  std::string refusal_;
};

// The largest |a - b| over max |b|: a the FP8 graph's O (bf16, or e4m3 where a_e4m3), b the bf16 graph's.
double relative_difference(const DeviceBuffer& a, bool a_e4m3, const DeviceBuffer& b, std::size_t elements) {
  std::vector<__nv_bfloat16> ha(elements), hb(elements);
  std::vector<__nv_fp8_e4m3> ha8(a_e4m3 ? elements : 0);
  if (a_e4m3) {
    check_cuda(cudaMemcpy(ha8.data(), a.get(), elements, cudaMemcpyDeviceToHost), "copy O");
  } else {
    check_cuda(cudaMemcpy(ha.data(), a.get(), elements * 2, cudaMemcpyDeviceToHost), "copy O");
  }
  check_cuda(cudaMemcpy(hb.data(), b.get(), elements * 2, cudaMemcpyDeviceToHost), "copy O");
  double diff = 0, largest = 0;
  for (std::size_t i = 0; i < elements; ++i) {
    const double x = a_e4m3 ? static_cast<float>(ha8[i]) : __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    diff = std::max(diff, std::fabs(x - y)), largest = std::max(largest, std::fabs(y));
  }
  return largest > 0 ? diff / largest : INFINITY;
}

struct Candidate {
  std::string name;                  // cudnn.bf16, cudnn.e4m3, cuda.fa3, cuda.fa3.fp8
  std::function<Timing()> time;      // one round's timed runs
  std::vector<double> round_ms, clocks;
};

}  // namespace

int main(int argc, char** argv) {
  const Config c = parse(argc, argv);
  fc::kernels::cuda::tools::hopper_device_or_exit("cudnn-fp8-reference");  // (cuda.fa3 and cuda.fa3.fp8 run on Hopper only)
  try {
    cudnnHandle_t handle = nullptr;
    if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) throw std::runtime_error("cudnnCreate failed");
    std::printf("cudnn-fp8-reference: %s, cuDNN %zu (headers %d), cudnn-frontend %d; %d rounds of %g s warm-up + %d timed runs, B = 16384 / N, H = 2048 / d\n",
                fc::kernels::cuda::device_name().c_str(), cudnnGetVersion(), CUDNN_VERSION, CUDNN_FRONTEND_VERSION, c.rounds, c.warmup_s, c.repeats);
    auto subjects = fc::kernels::cuda::make_cuda_subjects();
    const auto subject = [&](const std::string& name) -> fc::kernels::Subject& {
      for (auto& s : subjects)
        if (s->info().name == name) return *s;
      throw std::runtime_error(name + " is not registered on this device");
    };
    std::ofstream out;
    if (!c.out.empty()) {
      out.open(c.out);
      if (!out) throw std::runtime_error("cannot write " + c.out);
    }
    std::printf("| d | N | mask | cudnn.bf16 | cudnn.e4m3 | cuda.fa3 | cuda.fa3.fp8 | cuDNN e4m3 / bf16 | ours e4m3 / bf16 | cuda.fa3.fp8 / cudnn.e4m3 | cuda.fa3.fp8 / cudnn.bf16 |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    const int tokens = 16384, head_chars = 2048;
    for (const int n : c.ns) {
      for (const bool causal : c.causal) {
        AttentionShape sh;
        sh.batch = std::max(1, tokens / n), sh.heads_q = sh.heads_kv = std::max(1, head_chars / c.d), sh.seq_q = sh.seq_k = n, sh.head_dim = sh.head_dim_v = c.d;
        const std::size_t elements = static_cast<std::size_t>(sh.batch) * sh.heads_q * n * c.d;
        DeviceBuffer wide[3], narrow[3], widened[3];
        for (int t = 0; t < 3; ++t) {
          wide[t] = DeviceBuffer(elements * 2, "cudnn-fp8-reference", "inputs");
          narrow[t] = DeviceBuffer(elements, "cudnn-fp8-reference", "e4m3 inputs");
          widened[t] = DeviceBuffer(elements * 2, "cudnn-fp8-reference", "the check's inputs");
          fc::kernels::cuda::fill_normal(wide[t].get(), elements, fc::kernels::cuda::StorageType::bf16, 1, static_cast<std::uint32_t>(t + 1));
          round_to_e4m3<<<1024, 256>>>(static_cast<const __nv_bfloat16*>(wide[t].get()), static_cast<__nv_fp8_e4m3*>(narrow[t].get()),
                                       static_cast<__nv_bfloat16*>(widened[t].get()), elements);
          check_cuda(cudaGetLastError(), "round_to_e4m3");
        }
        check_cuda(cudaDeviceSynchronize(), "inputs");
        CudnnForward bf16(handle, sh, causal, false, widened[0].get(), widened[1].get(), widened[2].get(), "cudnn.bf16");
        CudnnForward e4m3(handle, sh, causal, true, narrow[0].get(), narrow[1].get(), narrow[2].get(), "cudnn.e4m3");
        if (!e4m3.o_in_bf16()) std::printf("(cudnn.e4m3 writes O in e4m3: cuDNN refused a bf16 O: %s)\n", e4m3.bf16_o_refusal().c_str());
        // The check: both graphs once, O against O.
        bf16.run(), e4m3.run();
        check_cuda(cudaDeviceSynchronize(), "the check's runs");
        const double rel = relative_difference(e4m3.o(), !e4m3.o_in_bf16(), bf16.o(), elements);
        std::printf("(check: max |O_e4m3 - O_bf16| / max |O_bf16| = %.3g at N = %d%s)\n", rel, n, causal ? ", causal" : "");
        if (!(rel <= 0.25)) throw std::runtime_error("cudnn.e4m3's O differs from cudnn.bf16's by more than 2^-2 of max |O|: not attention; not timed");
        bf16.set_inputs(wide[0].get(), wide[1].get(), wide[2].get());  // (timed on the full bf16 values)
        for (DeviceBuffer& w : widened) w = DeviceBuffer();
        fc::kernels::TimingRequest req;
        req.shape = sh, req.mask = causal ? Mask::causal_top_left : Mask::none, req.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
        req.warmup = 1, req.warmup_seconds = c.warmup_s, req.repeats = c.repeats;
        const auto ours = [&](const std::string& name, fc::Format f) {
          return [&, name, f] {
            fc::kernels::TimingRequest r = req;
            r.format = f;
            std::optional<Timing> t = subject(name).time(r);
            if (!t) throw std::runtime_error(name + " gave no timing");
            return *t;
          };
        };
        std::vector<Candidate> cs;
        cs.push_back({"cudnn.bf16", [&] { return fc::kernels::cuda::time_runs("cudnn.bf16", 1, c.warmup_s, c.repeats, [&] { bf16.run(); }); }, {}, {}});
        cs.push_back({"cudnn.e4m3", [&] { return fc::kernels::cuda::time_runs("cudnn.e4m3", 1, c.warmup_s, c.repeats, [&] { e4m3.run(); }); }, {}, {}});
        cs.push_back({"cuda.fa3", ours("cuda.fa3", fc::Format::bf16), {}, {}});
        cs.push_back({"cuda.fa3.fp8", ours("cuda.fa3.fp8", fc::Format::e4m3), {}, {}});
        for (int round = 0; round < c.rounds; ++round) {
          for (std::size_t i = 0; i < cs.size(); ++i) {
            Candidate& cand = cs[round % 2 ? cs.size() - 1 - i : i];
            const Timing t = cand.time();
            cand.round_ms.push_back(median(t.milliseconds));
            cand.clocks.insert(cand.clocks.end(), t.sm_clock_mhz.begin(), t.sm_clock_mhz.end());
          }
        }
        const double flops = 4.0 * n * static_cast<double>(n) * c.d * sh.batch * sh.heads_q * (causal ? 0.5 : 1.0);
        double tf[4];
        for (int i = 0; i < 4; ++i) tf[i] = flops / (median(cs[i].round_ms) * 1e-3) / 1e12;
        const auto cell = [&](int i) {
          char s[64];
          std::snprintf(s, sizeof s, "%.1f @ %.0f", tf[i], median(cs[i].clocks));
          return std::string(s);
        };
        std::printf("| %d | %dk | %s | %s | %s | %s | %s | %.3f | %.3f | %.3f | %.3f |\n", c.d, n / 1024, causal ? "causal" : "none", cell(0).c_str(), cell(1).c_str(),
                    cell(2).c_str(), cell(3).c_str(), tf[1] / tf[0], tf[3] / tf[2], tf[3] / tf[1], tf[3] / tf[0]);
        std::fflush(stdout);
        if (out) {
          out << "{\"d\": " << c.d << ", \"n\": " << n << ", \"mask\": \"" << (causal ? "causal" : "none") << "\", \"cudnn_e4m3_o\": \""
              << (e4m3.o_in_bf16() ? "bf16" : "e4m3") << "\"";
          for (const Candidate& cand : cs) {
            out << ", \"" << cand.name << "\": {\"round_ms\": [";
            for (std::size_t r = 0; r < cand.round_ms.size(); ++r) out << (r ? ", " : "") << cand.round_ms[r];
            out << "], \"sm_clock_mhz\": " << median(cand.clocks) << "}";
          }
          out << "}\n";
        }
      }
    }
    cudnnDestroy(handle);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cudnn-fp8-reference: %s\n", e.what());
    return 1;
  }
}
