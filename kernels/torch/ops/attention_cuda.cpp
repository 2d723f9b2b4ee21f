// The attention ops on CUDA tensors: cuda.fa2's or cuda.fa3's forward and backward (fa2_kernels.hpp, fa3_kernels.hpp) and
// Flash Hog's double backward, cuda.hog and cuda.hog.2pass (kernels/cuda/hog_kernels.hpp), run on
// PyTorch's tensors in place, on the current stream of the tensors' device; their workspaces (D, dd, b:
// O(N) floats) are PyTorch allocations, so torch.cuda's memory statistics count them. Inputs the kernels
// cannot read in place (a base or stride that is not 16-byte aligned, D not contiguous, a broadcast dimension
// of stride 0) are copied to fresh contiguous tensors first (kernel_ready). The policy must be the uniform one of q's dtype (bf16 or fp16), optionally with
// stochastic rounding; fp32/fp64, other head dims and kernels with no CUDA version raise a clear error
// naming what is missing.
#include <c10/core/DeviceGuard.h>
#include <torch/version.h>

#include <string>

#include "kernels/torch/ops/attention_ops.hpp"
#include "kernels/torch/ops/op_support.hpp"
#include "kernels/torch/tensor_bridge.hpp"

#if FLASHCHECK_HAVE_CUDA && TORCH_VERSION_MAJOR >= 2
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/fa2_kernels.hpp"
#include "kernels/cuda/fa3_kernels.hpp"
#include "kernels/cuda/hog_kernels.hpp"
#include "kernels/cuda/nonfinite_scan.hpp"
#include "kernels/cuda/shape_params.hpp"
#include "kernels/torch/ops/cuda_launch.hpp"
#define FLASHCHECK_TORCH_CUDA_KERNELS 1
#else
#define FLASHCHECK_TORCH_CUDA_KERNELS 0
#endif

namespace fc::kernels::pt::ops {

#if FLASHCHECK_TORCH_CUDA_KERNELS
namespace {

// The problem restricted to what the CUDA kernels implement (one 16-bit storage format, head dims 64
// and 128, v's head dim equal to q's), or a TORCH_CHECK naming the limit. `kernel` must be one of
// `have` (the op's CUDA kernels); `argument` names the Python argument that picks it.
cuda::StorageType require_cuda_kernel(const char* op, const Problem& p, c10::string_view kernel, std::initializer_list<const char*> have,
                                      const char* argument) {
  const std::string name = "cuda." + std::string(kernel.data(), kernel.size());
  bool known = false;
  std::string listed;
  for (const char* h : have) known = known || kernel == h, listed += std::string(listed.empty() ? "" : ", ") + "'" + h + "'";
  TORCH_CHECK(known, "flashcheck.", op, ": no CUDA kernel ", name, " yet (CUDA tensors: ", argument, " ", listed,
              "); CPU tensors run every CPU backend");
  const Format t = p.policy.format(Role::q);
  TORCH_CHECK(t == Format::bf16 || t == Format::fp16, "flashcheck.", op, ": ", name, " computes in bfloat16 or float16, got ",
              std::string(fc::name(t)), " (CPU tensors take every format)");
  PrecisionPolicy uniform = PrecisionPolicy::uniform(t);
  uniform.rounding = p.policy.rounding, uniform.seed = p.policy.seed;
  TORCH_CHECK(p.policy == uniform, "flashcheck.", op, ": ", name, " stores every tensor in one format; policy ", p.policy.to_string(),
              " mixes formats");
  TORCH_CHECK(cuda::fa2_supports_head_dim(p.shape.head_dim), "flashcheck.", op, ": ", name, " has head dims 64 and 128, got ",
              p.shape.head_dim);
  TORCH_CHECK(p.shape.head_dim_v == p.shape.head_dim, "flashcheck.", op, ": ", name, " needs v's head dim equal to q's (",
              p.shape.head_dim_v, " != ", p.shape.head_dim, ")");
  return t == Format::bf16 ? cuda::StorageType::bf16 : cuda::StorageType::fp16;
}
// The first-order kernels: cuda.fa2, or cuda.fa3 (wgmma and TMA; this library's device code is sm_90a, so every GPU
// that runs it runs cuda.fa3) with its deterministic two-pass backward ("fa3") or its fused one ("fa3.fused": dQ's
// partials summed by fp32 reductions into a [B, Hq, Nq, D] float workspace, so not the same bits from run to run).
cuda::StorageType require_first_order(const char* op, const Problem& p, c10::string_view kernel) {
  return require_cuda_kernel(op, p, kernel, {"fa2", "fa3", "fa3.fused"}, "kernel=");
}
bool is_fa3(c10::string_view kernel) { return kernel == "fa3" || kernel == "fa3.fused"; }

// t itself when every kernel can read it in place (unit stride along D, a 16-byte aligned base, strides that are
// multiples of 8 elements, none 0 where the dimension has more than one entry: TMA's tensor maps, cuda.fa3 and the
// wgmma Hog passes, need positive strides), else a fresh contiguous copy. (clone, not contiguous(): contiguous()
// returns t itself when PyTorch calls it contiguous, whatever its base's alignment or its size-1 dimensions' strides.)
at::Tensor kernel_ready(const at::Tensor& t) {
  bool ok = t.stride(3) == 1 && reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
  for (int i = 0; i < 3; ++i) ok = ok && t.stride(i) % 8 == 0 && (t.stride(i) > 0 || t.size(i) == 1);
  return ok ? t : t.clone(at::MemoryFormat::Contiguous);
}
cuda::Strided strided(const at::Tensor& t) { return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)}; }

// The inputs' NaN/Inf check on the device: one pass over every tensor (kernel_ready ones, all of `type`;
// cuda/nonfinite_scan.hpp; op_support's check_all_finite took 5 PyTorch kernels a tensor) that writes its flags
// straight into pinned host memory (mapped: no memset, no copy in the stream). The op launches its kernel before it
// waits for them (finish): the GPU then has that kernel to run while the host wakes, reads the flags and returns,
// where a wait before the launch left it idle for the round trip and for the host's work up to the next launch
// (H200, same-run comparisons: 4.46-4.57 -> 4.19-4.32 ms an HVP, three ops). A kernel launched on a NaN input writes
// NaNs into fresh outputs that the error then drops: no kernel's control flow or addressing depends on a value.
// Nothing while flashcheck.input_checks(False).
class PendingFiniteCheck {
 public:
  PendingFiniteCheck(const char* op, cuda::StorageType type, std::initializer_list<std::pair<const at::Tensor*, const char*>> tensors)
      : op_(op) {
    if (!input_checks_enabled()) return;
    std::vector<cuda::ScanTensor> list;
    for (const auto& [t, what] : tensors) {
      list.push_back({t->data_ptr(), t->stride(0), t->stride(1), t->stride(2), static_cast<int>(t->size(0)), static_cast<int>(t->size(1)),
                      static_cast<int>(t->size(2)), static_cast<int>(t->size(3))});
      names_.push_back(what);
    }
    const at::Tensor& first = *tensors.begin()->first;
    const cudaStream_t stream = current_stream(first);
    flags_ = at::zeros({static_cast<std::int64_t>(list.size())}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
    launch(op, [&] {
      void* on_device = nullptr;  // (the same address under unified addressing; asked, not assumed)
      throw_on(cudaHostGetDevicePointer(&on_device, flags_.data_ptr(), 0), "mapping the flags' pinned memory");
      const cudaEvent_t done = scanned_event(first.get_device());
      try {
        cuda::flag_nonfinite(list.data(), static_cast<int>(list.size()), type, static_cast<unsigned*>(on_device), stream);
        throw_on(cudaEventRecord(done, stream), "recording the pass's end");
      } catch (...) {
        // (the pass may be queued with no event recorded behind it, and the destructor does not run for a
        // constructor that throws: it must end before flags_ returns to the cache)
        cudaStreamSynchronize(stream);
        throw;
      }
      scanned_ = done;
    });
  }
  PendingFiniteCheck(const PendingFiniteCheck&) = delete;
  PendingFiniteCheck& operator=(const PendingFiniteCheck&) = delete;
  // (an error thrown before finish, a failed launch: the pass must be done writing before its pinned buffer returns to
  // the cache)
  ~PendingFiniteCheck() {
    if (scanned_ != nullptr) cudaEventSynchronize(scanned_);
  }

  // Waits for the flags (not for the kernels launched since) and raises the error naming the first input with a NaN
  // or an Inf.
  void finish() {
    if (scanned_ == nullptr) return;
    launch(op_, [&] {
      throw_on(cudaEventSynchronize(scanned_), "waiting for the flags");
      scanned_ = nullptr;
    });
    const int* bad = flags_.data_ptr<int>();
    for (std::size_t i = 0; i < names_.size(); ++i) TORCH_CHECK(bad[i] == 0, "flashcheck.", op_, ": ", names_[i], " contains NaN or Inf");
  }

 private:
  static void throw_on(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("NaN/Inf input check: ") + what + ": " + cudaGetErrorString(e));
  }
  // One event per device and host thread, made on first use and kept (an op finishes its check before it returns, so
  // a thread never has two pending on one device).
  static cudaEvent_t scanned_event(int device) {
    thread_local std::vector<cudaEvent_t> events;
    if (events.size() <= static_cast<std::size_t>(device)) events.resize(device + 1, nullptr);
    if (events[device] == nullptr) throw_on(cudaEventCreateWithFlags(&events[device], cudaEventDisableTiming), "creating an event");
    return events[device];
  }

  const char* op_;
  std::vector<const char*> names_;
  at::Tensor flags_;  // pinned host memory, written by the pass
  cudaEvent_t scanned_ = nullptr;
};
cuda::StridedOut strided_out(at::Tensor& t) { return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)}; }

}  // namespace

std::tuple<at::Tensor, at::Tensor> forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, c10::string_view mask,
                                                c10::optional<double> scale, c10::string_view kernel, c10::optional<c10::string_view> policy) {
  const char* op = "attention_forward";
  const Problem p = check_problem(op, q, k, v, mask, scale, policy);
  const cuda::StorageType type = require_first_order(op, p, kernel);
  const c10::DeviceGuard device(q.device());
  const at::Tensor qr = kernel_ready(q), kr = kernel_ready(k), vr = kernel_ready(v);
  PendingFiniteCheck finite(op, type, {{&qr, "q"}, {&kr, "k"}, {&vr, "v"}});
  const auto& s = p.shape;
  at::Tensor o = at::empty({s.batch, s.heads_q, s.seq_q, s.head_dim_v}, q.options());
  at::Tensor lse = at::empty({s.batch, s.heads_q, s.seq_q}, q.options().dtype(at::kFloat));
  cuda::ForwardParams f;
  f.shape = cuda::shape_params(p.shape, p.mask, p.scale), f.type = type;
  f.q = strided(qr), f.k = strided(kr), f.v = strided(vr), f.o = strided_out(o), f.lse = lse.data_ptr<float>();
  f.rounding = {p.policy.rounding == Rounding::stochastic, p.policy.seed}, f.o_stream = p.policy.stream(Role::o).stream;
  if (is_fa3(kernel)) {
    // (kernel_ready's tensors are TMA-readable: unit stride along D, 16-byte aligned base and strides, none 0)
    TORCH_CHECK(cuda::fa3_supports(f), "flashcheck.", op, ": cuda.fa3 cannot describe these tensors to TMA");
    // (cuda.fa3's auto: schedule and scheduler; the persistent scheduler takes its tiles from a zeroed counter)
    at::Tensor work_counter;
    auto scheduler = cuda::Fa3Scheduler::grid;
    if (cuda::persistent_scheduler_by_default(f.shape)) {
      work_counter = at::zeros({1}, q.options().dtype(at::kInt));
      f.work_counter = work_counter.data_ptr<int>(), scheduler = cuda::Fa3Scheduler::persistent;
    }
    launch(op, [&] { cuda::fa3_forward(f, cuda::Fa3Schedule::automatic, current_stream(q), 128, cuda::Fa3Epilogue::automatic, scheduler); });
  } else {
    launch(op, [&] { cuda::fa2_forward(f, current_stream(q)); });
  }
  finite.finish();
  return {o, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                             const at::Tensor& o, const at::Tensor& lse, const at::Tensor& dout,
                                                             c10::string_view mask, c10::optional<double> scale, c10::string_view kernel,
                                                             c10::optional<c10::string_view> policy) {
  const char* op = "attention_backward";
  const Problem p = check_problem(op, q, k, v, mask, scale, policy);
  check_saved(op, p, q, o, lse, dout);
  const cuda::StorageType type = require_first_order(op, p, kernel);
  const c10::DeviceGuard device(q.device());
  const at::Tensor qr = kernel_ready(q), kr = kernel_ready(k), vr = kernel_ready(v), or_ = kernel_ready(o), gr = kernel_ready(dout);
  PendingFiniteCheck finite(op, type, {{&qr, "q"}, {&kr, "k"}, {&vr, "v"}, {&gr, "dout"}});
  const at::Tensor l = lse.contiguous();
  at::Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(k.sizes(), k.options()), dv = at::empty(v.sizes(), v.options());
  at::Tensor delta = at::empty(l.sizes(), l.options());
  cuda::BackwardParams b;
  b.shape = cuda::shape_params(p.shape, p.mask, p.scale), b.type = type;
  b.q = strided(qr), b.k = strided(kr), b.v = strided(vr), b.o = strided(or_), b.dout = strided(gr);
  b.lse = l.data_ptr<float>(), b.delta = delta.data_ptr<float>();
  b.dq = strided_out(dq), b.dk = strided_out(dk), b.dv = strided_out(dv);
  b.rounding = {p.policy.rounding == Rounding::stochastic, p.policy.seed}, b.grad_stream = p.policy.stream(Role::grad).stream;
  at::Tensor dq_accum, dq_ready;  // fa3.fused: the fp32 sum of dQ's partials, per-kv-head counts (both zeroed by the D pass)
  if (is_fa3(kernel)) {
    // fa3: the two-pass form, no atomics, the same bits every run (as cuda.fa2's backward); fa3.fused: FA3's one pass
    b.deterministic = kernel == "fa3";
    if (!b.deterministic) {
      dq_accum = at::empty(q.sizes(), q.options().dtype(at::kFloat));  // (contiguous [B, Hq, Nq, D]: its TMA map's layout)
      b.dq_accum = dq_accum.data_ptr<float>();
      dq_ready = at::empty({p.shape.batch * p.shape.heads_kv}, q.options().dtype(at::kInt));  // (dQ converted as heads finish)
      b.dq_ready = reinterpret_cast<std::uint32_t*>(dq_ready.data_ptr<int>());
    }
    launch(op, [&] { cuda::fa3_backward(b, current_stream(q)); });
  } else {
    launch(op, [&] { cuda::fa2_backward(b, current_stream(q)); });
  }
  finite.finish();
  return {dq, dk, dv};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> double_backward_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse, const at::Tensor& dout,
    const c10::optional<at::Tensor>& ddq, const c10::optional<at::Tensor>& ddk, const c10::optional<at::Tensor>& ddv,
    c10::string_view mask, c10::optional<double> scale, c10::string_view kernel, c10::optional<c10::string_view> policy) {
  const char* op = "attention_double_backward";
  const Problem p = check_problem(op, q, k, v, mask, scale, policy);
  check_saved(op, p, q, o, lse, dout);
  const cuda::StorageType type = require_cuda_kernel(op, p, kernel, {"hog", "hog.2pass"}, "double_backward_kernel=");
  const c10::DeviceGuard device(q.device());
  // An absent cotangent is zero (autograd passes none for an unused first-order gradient).
  const auto cotangent = [&](const c10::optional<at::Tensor>& t, const at::Tensor& like, const char* what) {
    if (!t || !t->defined()) return at::zeros(like.sizes(), like.options());
    check_tensor(op, what, *t, 4, like.scalar_type(), q.device());
    check_same_shape(op, what, *t, like.sizes());
    return kernel_ready(*t);
  };
  const at::Tensor ddq_ = cotangent(ddq, q, "ddq"), ddk_ = cotangent(ddk, k, "ddk"), ddv_ = cotangent(ddv, v, "ddv");
  const at::Tensor qr = kernel_ready(q), kr = kernel_ready(k), vr = kernel_ready(v), or_ = kernel_ready(o), gr = kernel_ready(dout);
  PendingFiniteCheck finite(op, type, {{&qr, "q"}, {&kr, "k"}, {&vr, "v"}, {&gr, "dout"}, {&ddq_, "ddq"}, {&ddk_, "ddk"}, {&ddv_, "ddv"}});
  const at::Tensor l = lse.contiguous();
  at::Tensor dq2 = at::empty(q.sizes(), q.options()), dk2 = at::empty(k.sizes(), k.options()), dv2 = at::empty(v.sizes(), v.options());
  at::Tensor ddo = at::empty(dout.sizes(), dout.options());
  at::Tensor stats = at::empty({3, l.numel()}, l.options());  // D, dd, b: the O(N) workspace
  cuda::HogParams h;
  h.shape = cuda::shape_params(p.shape, p.mask, p.scale), h.type = type;
  h.q = strided(qr), h.k = strided(kr), h.v = strided(vr), h.o = strided(or_), h.dout = strided(gr);
  h.ddq = strided(ddq_), h.ddk = strided(ddk_), h.ddv = strided(ddv_), h.lse = l.data_ptr<float>();
  h.dq2 = strided_out(dq2), h.dk2 = strided_out(dk2), h.dv2 = strided_out(dv2), h.ddo = strided_out(ddo);
  h.delta = stats[0].data_ptr<float>(), h.dd = stats[1].data_ptr<float>(), h.b = stats[2].data_ptr<float>();
  h.two_pass = kernel == "hog.2pass";
  // FLASHCHECK_HOG_MMA_SYNC set (to anything): the mma.sync passes for every shape (cuda.hog's passes=mma_sync), the
  // baseline that hvp_bench.py's same-run comparison of the wgmma passes times.
  h.mma_sync_only = std::getenv("FLASHCHECK_HOG_MMA_SYNC") != nullptr;
  h.rounding = {p.policy.rounding == Rounding::stochastic, p.policy.seed}, h.grad_stream = p.policy.stream(Role::grad).stream;
  launch(op, [&] { cuda::hog_double_backward(h, current_stream(q)); });
  finite.finish();
  return {dq2, dk2, dv2, ddo};
}

#else  // no CUDA kernels in this build (or libtorch < 2): a clear error

std::tuple<at::Tensor, at::Tensor> forward_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view,
                                                c10::optional<double>, c10::string_view kernel, c10::optional<c10::string_view>) {
  no_cuda_kernel("attention_forward", "cuda." + std::string(kernel.data(), kernel.size()));
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                             const at::Tensor&, const at::Tensor&, c10::string_view, c10::optional<double>,
                                                             c10::string_view kernel, c10::optional<c10::string_view>) {
  no_cuda_kernel("attention_backward", "cuda." + std::string(kernel.data(), kernel.size()));
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> double_backward_cuda(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, c10::string_view,
    c10::optional<double>, c10::string_view kernel, c10::optional<c10::string_view>) {
  no_cuda_kernel("attention_double_backward", "cuda." + std::string(kernel.data(), kernel.size()));
}

#endif

}  // namespace fc::kernels::pt::ops
