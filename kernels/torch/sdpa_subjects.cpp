// torch.sdpa.flash, torch.sdpa.efficient, torch.sdpa.cudnn: at::scaled_dot_product_attention with
// exactly one CUDA backend enabled, so a case that backend cannot run fails with PyTorch's reason
// instead of silently falling back to another backend.
//
// The harness's buffers live on the host: inputs are copied to the GPU in their dtype (exact), outputs
// copied back. Backward is autograd through the fused op (PyTorch's own backward kernel of that
// backend). GQA: key and value heads are repeated to the query heads before the call (what users of
// PyTorch < 2.5 do; enable_gqa is not implemented by every backend), so dK and dV are summed over a
// group by autograd in the storage dtype. Causal: SDPA's is_causal is the top-left alignment
// (PyTorch issue 108108); bottom-right needs an explicit mask, which the fused backends decline.
#include "kernels/torch/subjects.hpp"

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2

#include <ATen/Context.h>
#include <c10/core/Event.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>

#include "kernels/tensor_io.hpp"
#if FLASHCHECK_HAVE_CUDA
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/run_timer.hpp"
#endif
#include "kernels/torch/attention_graph.hpp"
#include "kernels/torch/tensor_bridge.hpp"

namespace fc::kernels::pt {
namespace {

enum class Backend { flash, efficient, cudnn };

// The backend switches are process-wide flags: one SDPA call at a time changes them, and restores them.
std::mutex& backend_switch_mutex() {
  static std::mutex m;
  return m;
}

class OnlyBackend {
 public:
  explicit OnlyBackend(Backend b) : lock_(backend_switch_mutex()) {
    at::Context& ctx = at::globalContext();
    flash_ = ctx.userEnabledFlashSDP(), efficient_ = ctx.userEnabledMemEfficientSDP(), math_ = ctx.userEnabledMathSDP();
    cudnn_ = ctx.userEnabledCuDNNSDP();
    set(b == Backend::flash, b == Backend::efficient, false, b == Backend::cudnn);
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5
    overrideable_ = ctx.userEnabledOverrideableSDP();
    ctx.setSDPUseOverrideable(false);
#endif
  }
  ~OnlyBackend() {
    set(flash_, efficient_, math_, cudnn_);
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5
    at::globalContext().setSDPUseOverrideable(overrideable_);
#endif
  }
  OnlyBackend(const OnlyBackend&) = delete;
  OnlyBackend& operator=(const OnlyBackend&) = delete;

 private:
  static void set(bool flash, bool efficient, bool math, bool cudnn) {
    at::Context& ctx = at::globalContext();
    ctx.setSDPUseFlash(flash), ctx.setSDPUseMemEfficient(efficient), ctx.setSDPUseMath(math), ctx.setSDPUseCuDNN(cudnn);
  }
  std::lock_guard<std::mutex> lock_;
  bool flash_ = true, efficient_ = true, math_ = true, cudnn_ = true, overrideable_ = true;
};

at::Tensor to_device(const TensorView& t, bool requires_grad) {
  return tensor_of(t).to(at::kCUDA).contiguous().requires_grad_(requires_grad);
}

class SdpaSubject final : public Subject {
 public:
  SdpaSubject(Backend backend, std::string name, std::string description) : backend_(backend) {
    info_.name = std::move(name);
    info_.description = std::move(description);
    info_.family = Family::attention;
    info_.ops = {Op::fwd, Op::bwd};
    info_.formats = {Format::bf16, Format::fp16};
    info_.accumulate_formats = {Format::fp32};
    // What all three fused backends accept on sm_90 (multiples of 8; cuDNN's limit was 128 for bwd in older releases), and
    // 256 for flash (FA2's largest) and cuDNN, which ran d = 256's forward and backward in the bench on an H200 with
    // libtorch 2.11 (kernels/cuda/NOTES.md "Head dim 256"); the efficient backend's 256 is not measured here.
    info_.head_dims = backend == Backend::efficient ? std::vector<int>{32, 64, 96, 128} : std::vector<int>{32, 64, 96, 128, 256};
    info_.max_head_dim = info_.head_dims.back();
    info_.masks = {Mask::none, Mask::causal_top_left};
    info_.separate_dv = false;
    info_.returns_lse = false;
    info_.deterministic = false;  // PyTorch documents the fused backwards as nondeterministic (atomics in dQ or dK, dV)
    // What SDPA's backend selection refuses (seen on libtorch 2.11, H100): the flash backend takes
    // is_causal only for square problems ("Flash attention does not support the is_causal flag when
    // seqlen_q != seqlen_k"); cuDNN refuses a key/value sequence of length 1.
    info_.causal_equal_lengths = backend == Backend::flash;
    info_.min_seq = backend == Backend::cudnn ? 2 : 1;
    info_.host_allocations_counted = false;
#if FLASHCHECK_HAVE_CUDA
    info_.device = cuda::device_name();
#else
    info_.device = "cuda (PyTorch)";
#endif
  }
  const SubjectInfo& info() const override { return info_; }

  void run(Op op, const AttentionCall& c) override {
    validate_call(info_, op, c);
    require_uniform_policy(info_, c.policy);
    for (auto [t, what] : {std::pair{&c.q, "Q"}, std::pair{&c.k, "K"}, std::pair{&c.v, "V"}}) require_finite(*t, info_.name, what);
    if (op == Op::bwd) require_finite(c.dout, info_.name, "dO");
    try {
      compute(op, c);
    } catch (const c10::Error& e) {
      rethrow_as_subject_error(info_, e);
    }
  }

  // CUDA-event times of the fused op (fwd), or of its backward alone (bwd: autograd through the
  // forward's graph, kept between repeats), on N(0, 1) inputs made on the device.
  std::optional<Timing> time(const TimingRequest& r) override {
    validate_problem(info_, r.op, r.shape, r.mask, r.scale);
    validate_policy(info_, PrecisionPolicy::uniform(r.format));
    try {
      const AttentionShape& sh = r.shape;
      const auto options = at::TensorOptions().device(at::kCUDA).dtype(dtype_of(r.format));
      at::manual_seed(r.seed);
      const bool backward = r.op == Op::bwd;
      const at::Tensor q = at::randn({sh.batch, sh.heads_q, sh.seq_q, sh.head_dim}, options).requires_grad_(backward);
      const at::Tensor k = at::randn({sh.batch, sh.heads_kv, sh.seq_k, sh.head_dim}, options).requires_grad_(backward);
      const at::Tensor v = at::randn({sh.batch, sh.heads_kv, sh.seq_k, sh.head_dim}, options).requires_grad_(backward);
      const c10::AutoGradMode grad_mode(backward);
      const OnlyBackend only(backend_);
      const auto forward = [&] {
        return at::scaled_dot_product_attention(q, repeat_kv_heads(k, q.size(1)), repeat_kv_heads(v, q.size(1)), {}, 0.0,
                                                r.mask == Mask::causal_top_left, r.scale);
      };
      Timing timing;
      if (!backward) {
        timing = timed(info_.name, r, [&] { (void)forward(); });
      } else {
        const at::Tensor o = forward(), dout = at::randn_like(o);
        timing = timed(info_.name, r, [&] { (void)torch::autograd::grad({o}, {q, k, v}, {dout}, /*retain_graph=*/true); });
      }
      timing.device_bytes = static_cast<double>((q.numel() * 2 + k.numel() * 2 + v.numel() * 2) * q.element_size());
      return timing;
    } catch (const c10::Error& e) {
      rethrow_as_subject_error(info_, e);
    }
  }

 private:
  template <class F>
  static Timing timed([[maybe_unused]] const std::string& who, const TimingRequest& r, F&& run) {
    const c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    const c10::Stream stream = guard.getStream(c10::Device(c10::DeviceType::CUDA, 0));
    // Warm-up: r.warmup runs (at least one: the first launches load modules, run_timer.hpp), and more until
    // r.warmup_seconds have passed, each waited for, as the CUDA subjects' (time_runs) and as the timed runs below are:
    // at the card's power limit the clock settles to the load's duty cycle, and runs queued back to back would leave
    // this subject timed at a clock the others' warm-up did not bring theirs to.
#if FLASHCHECK_HAVE_CUDA
    // (the stream held while the host enqueues each run, as for the CUDA subjects: autograd's and the allocator's host
    // work stays out of the device time; kernels/cuda/run_timer.hpp. Made before the warm-up, as time_runs makes its
    // own, so that its set-up leaves no idle gap before the timed runs; with the device's clock and power, as theirs.)
    cuda::RunTimer timer(who, static_cast<cudaStream_t>(stream.native_handle()));
#endif
    const auto warmup_start = std::chrono::steady_clock::now();
    const auto warm_enough = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - warmup_start).count() >= r.warmup_seconds; };
    for (int i = 0; i < std::max(1, r.warmup) || !warm_enough(); ++i) {
      run();
      stream.synchronize();
    }
#if FLASHCHECK_HAVE_CUDA
    return timer.time_each(r.repeats, run);
#else
    Timing t;
    t.device_state_note = "no clock or power readings: flashcheck was built without CUDA (kernels/cuda/device_monitor.hpp)";
    for (int i = 0; i < r.repeats; ++i) {
      c10::Event start(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT), stop(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
      start.record(stream);
      run();
      stop.record(stream);
      stop.synchronize();
      t.milliseconds.push_back(start.elapsedTime(stop));
    }
    return t;
#endif
  }

  void compute(Op op, const AttentionCall& c) const {
    const bool differentiate = op == Op::bwd;
    const c10::AutoGradMode grad_mode(differentiate);
    const at::Tensor q = to_device(c.q, differentiate), k = to_device(c.k, differentiate), v = to_device(c.v, differentiate);
    at::Tensor o;
    {
      const OnlyBackend only(backend_);
      o = at::scaled_dot_product_attention(q, repeat_kv_heads(k, q.size(1)), repeat_kv_heads(v, q.size(1)), /*attn_mask=*/{},
                                           /*dropout_p=*/0.0, /*is_causal=*/c.mask == Mask::causal_top_left, c.scale);
      if (op == Op::fwd) {
        store(c.out_o, o);
        return;
      }
      const std::vector<at::Tensor> g = torch::autograd::grad({o}, {q, k, v}, {to_device(c.dout, false)});
      store(c.dq, g[0]), store(c.dk, g[1]), store(c.dv, g[2]);
    }
  }

  Backend backend_;
  SubjectInfo info_;
};

}  // namespace

std::vector<std::unique_ptr<Subject>> make_torch_sdpa_subjects() {
  std::vector<std::unique_ptr<Subject>> subjects;
  if (!torch::cuda::is_available()) return subjects;
  subjects.push_back(std::make_unique<SdpaSubject>(Backend::flash, "torch.sdpa.flash",
                                                   "PyTorch SDPA, FlashAttention-2 backend only (CUDA), fwd and bwd"));
  subjects.push_back(std::make_unique<SdpaSubject>(Backend::efficient, "torch.sdpa.efficient",
                                                   "PyTorch SDPA, memory-efficient (xFormers) backend only (CUDA), fwd and bwd"));
  subjects.push_back(std::make_unique<SdpaSubject>(Backend::cudnn, "torch.sdpa.cudnn",
                                                   "PyTorch SDPA, cuDNN backend only (CUDA), fwd and bwd"));
  return subjects;
}

}  // namespace fc::kernels::pt

#else  // libtorch 1.x: no per-backend switches worth grading (and no CUDA in Debian's build)

namespace fc::kernels::pt {
std::vector<std::unique_ptr<Subject>> make_torch_sdpa_subjects() { return {}; }
}  // namespace fc::kernels::pt

#endif
