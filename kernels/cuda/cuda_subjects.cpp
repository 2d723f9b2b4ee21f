// The CUDA attention kernels as harness subjects (cuda.fa1, cuda.fa2): the call's host tensors go to
// the device (device_memory.hpp), the kernels run (fa1_kernels.hpp, fa2_kernels.hpp), the outputs come
// back. The policy must store every tensor in one 16-bit format with fp32 statistics and accumulation
// (what the kernels are built for); outputs are rounded to nearest or stochastically with the CPU
// backends' Philox words. CudaAttentionSubject holds what every family shares (transfers, workspaces,
// timing); a family is its kernels, its options and its SubjectInfo.
#include "kernels/cuda/cuda_subjects.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/device_fill.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/fa1_kernels.hpp"
#include "kernels/cuda/fa2_kernels.hpp"
#include "kernels/cuda/fa3_kernels.hpp"
#include "kernels/cuda/hog_kernels.hpp"
#include "kernels/cuda/run_timer.hpp"
#include "kernels/cuda/shape_params.hpp"
#include "kernels/tensor_io.hpp"

namespace fc::kernels::cuda {

std::string device_name();

namespace {

// The policy the kernels implement: one 16-bit storage format t for Q, K, V, O, dO and the gradients,
// fp32 statistics and accumulation.
StorageType require_kernel_policy(const SubjectInfo& info, const PrecisionPolicy& policy) {
  const Format t = policy.format(Role::q);
  for (Role r : {Role::k, Role::v, Role::o, Role::dout, Role::grad}) {
    if (policy.format(r) != t) {
      throw SubjectError(info.name + ": stores every tensor in one format; policy " + policy.to_string() + " mixes formats");
    }
  }
  if (policy.format(Role::stats) != Format::fp32) throw SubjectError(info.name + ": keeps statistics in fp32");
  return t == Format::bf16 ? StorageType::bf16 : StorageType::fp16;
}

// What a family of attention kernels provides; CudaAttentionSubject does the rest.
class CudaAttentionSubject : public Subject {
 public:
  const SubjectInfo& info() const override { return info_; }

  void run(Op op, const AttentionCall& c) override {
    validate_call(info_, op, c);
    const StorageType type = require_kernel_policy(info_, c.policy);
    for (auto [t, what] : {std::pair{&c.q, "Q"}, std::pair{&c.k, "K"}, std::pair{&c.v, "V"}}) require_finite(*t, info_.name, what);
    if (op != Op::fwd) require_finite(c.dout, info_.name, "dO");
    if (op == Op::bwdbwd) {
      for (auto [t, what] : {std::pair{&c.ddq, "ddQ"}, std::pair{&c.ddk, "ddK"}, std::pair{&c.ddv, "ddV"}}) require_finite(*t, info_.name, what);
    }
    const std::string& who = info_.name;
    const OutputRounding rounding{c.policy.rounding == Rounding::stochastic, c.policy.seed};
    const std::size_t rows = static_cast<std::size_t>(c.shape.batch) * c.shape.heads_q * c.shape.seq_q;
    DeviceInput q = to_device(c.q, who, "Q"), k = to_device(c.k, who, "K"), v = to_device(c.v, who, "V");
    if (op == Op::fwd) {
      ForwardParams p;
      p.shape = shape_params(c.shape, c.mask, c.scale), p.type = type;
      configure(p);
      p.q = q.view, p.k = k.view, p.v = v.view;
      DeviceOutput o = device_output(c.out_o, who, "O");
      DeviceBuffer lse(rows * sizeof(float), who, "L");
      const Workspace ws = forward_workspace(p, rows);
      p.o = o.view, p.lse = static_cast<float*>(lse.get());
      p.rounding = rounding, p.o_stream = c.policy.stream(Role::o).stream;
      launch(who, "forward", [&] { forward(p, nullptr); });
      to_host(o, c.out_o, who, "O");
      if (!c.out_lse.empty()) {
        std::vector<float> l(rows);
        check_cuda(cudaMemcpy(l.data(), lse.get(), l.size() * sizeof(float), cudaMemcpyDeviceToHost), who, "copying back L");
        write_from(c.out_lse, std::span<const float>(l), Rounding::nearest_even);
      }
      return;
    }
    if (op == Op::bwdbwd) {
      HogParams p;
      p.shape = shape_params(c.shape, c.mask, c.scale), p.type = type;
      configure(p);
      p.q = q.view, p.k = k.view, p.v = v.view;
      DeviceInput o = to_device(c.o, who, "O"), dout = to_device(c.dout, who, "dO");
      DeviceInput ddq = to_device(c.ddq, who, "ddQ"), ddk = to_device(c.ddk, who, "ddK"), ddv = to_device(c.ddv, who, "ddV");
      p.o = o.view, p.dout = dout.view, p.ddq = ddq.view, p.ddk = ddk.view, p.ddv = ddv.view;
      const std::vector<float> l = read_as_float(c.lse);
      DeviceBuffer lse(l.size() * sizeof(float), who, "L");
      check_cuda(cudaMemcpy(lse.get(), l.data(), l.size() * sizeof(float), cudaMemcpyHostToDevice), who, "copying L");
      p.lse = static_cast<const float*>(lse.get());
      DeviceBuffer delta(rows * sizeof(float), who, "D"), dd(rows * sizeof(float), who, "dd"), bstat(rows * sizeof(float), who, "b");
      p.delta = static_cast<float*>(delta.get()), p.dd = static_cast<float*>(dd.get()), p.b = static_cast<float*>(bstat.get());
      DeviceOutput dq2 = device_output(c.dq2, who, "dQ'"), dk2 = device_output(c.dk2, who, "dK'"), dv2 = device_output(c.dv2, who, "dV'");
      DeviceOutput ddo = device_output(c.ddo, who, "ddO");
      p.dq2 = dq2.view, p.dk2 = dk2.view, p.dv2 = dv2.view, p.ddo = ddo.view;
      p.rounding = rounding, p.grad_stream = c.policy.stream(Role::grad).stream;
      launch(who, "double backward", [&] { double_backward(p, nullptr); });
      to_host(dq2, c.dq2, who, "dQ'"), to_host(dk2, c.dk2, who, "dK'"), to_host(dv2, c.dv2, who, "dV'"), to_host(ddo, c.ddo, who, "ddO");
      return;
    }
    BackwardParams p;
    p.shape = shape_params(c.shape, c.mask, c.scale), p.type = type;
    configure(p);
    p.q = q.view, p.k = k.view, p.v = v.view;
    DeviceInput o = to_device(c.o, who, "O"), dout = to_device(c.dout, who, "dO");
    p.o = o.view, p.dout = dout.view;
    const std::vector<float> l = read_as_float(c.lse);  // [B, Hq, Nq, 1] -> contiguous
    DeviceBuffer lse(l.size() * sizeof(float), who, "L");
    check_cuda(cudaMemcpy(lse.get(), l.data(), l.size() * sizeof(float), cudaMemcpyHostToDevice), who, "copying L");
    p.lse = static_cast<const float*>(lse.get());
    const Workspace ws = backward_workspace(p, rows);
    DeviceOutput dq = device_output(c.dq, who, "dQ"), dk = device_output(c.dk, who, "dK"), dv = device_output(c.dv, who, "dV");
    p.dq = dq.view, p.dk = dk.view, p.dv = dv.view;
    p.rounding = rounding, p.grad_stream = c.policy.stream(Role::grad).stream;
    launch(who, "backward", [&] { backward(p, nullptr); });
    to_host(dq, c.dq, who, "dQ"), to_host(dk, c.dk, who, "dK"), to_host(dv, c.dv, who, "dV");
  }

  std::optional<Timing> time(const TimingRequest& r) override {
    const std::string& who = info_.name;
    const PrecisionPolicy policy = PrecisionPolicy::uniform(r.format);
    validate_problem(info_, r.op, r.shape, r.mask, r.scale);
    validate_policy(info_, policy);
    if (r.op == Op::bwdbwd) throw SubjectError(who + ": flashcheck bench times fwd and bwd; the double backward is timed with its HVP by kernels/torch/hvp_bench.py");
    const StorageType type = require_kernel_policy(info_, policy);
    const AttentionShape& sh = r.shape;
    const std::size_t nq = static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.seq_q * sh.head_dim;
    const std::size_t nk = static_cast<std::size_t>(sh.batch) * sh.heads_kv * sh.seq_k * sh.head_dim;
    const std::size_t rows = static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.seq_q;
    DeviceBuffer q(nq * 2, who, "Q"), k(nk * 2, who, "K"), v(nk * 2, who, "V"), o(nq * 2, who, "O"), lse(rows * 4, who, "L");
    launch(who, "filling inputs", [&] {
      fill_normal(q.get(), nq, type, r.seed, 1), fill_normal(k.get(), nk, type, r.seed, 2), fill_normal(v.get(), nk, type, r.seed, 3);
    });
    const auto contiguous = [&](const DeviceBuffer& b, int heads, int n) {
      return Strided{b.get(), static_cast<std::int64_t>(heads) * n * sh.head_dim, static_cast<std::int64_t>(n) * sh.head_dim, sh.head_dim};
    };
    const auto contiguous_out = [&](const DeviceBuffer& b, int heads, int n) {
      const Strided s = contiguous(b, heads, n);
      return StridedOut{b.get(), s.batch, s.head, s.row};
    };
    ForwardParams f;
    f.shape = shape_params(r.shape, r.mask, r.scale), f.type = type;
    configure(f);
    f.q = contiguous(q, sh.heads_q, sh.seq_q), f.k = contiguous(k, sh.heads_kv, sh.seq_k), f.v = contiguous(v, sh.heads_kv, sh.seq_k);
    f.o = contiguous_out(o, sh.heads_q, sh.seq_q), f.lse = static_cast<float*>(lse.get());
    const Workspace fws = forward_workspace(f, rows);
    const double forward_bytes = static_cast<double>(q.bytes() + k.bytes() + v.bytes() + o.bytes() + lse.bytes() + fws.bytes());
    if (r.op == Op::fwd) {
      Timing timing = time_runs(who, r.warmup, r.warmup_seconds, r.repeats, [&] { forward(f, nullptr); });
      timing.device_bytes = forward_bytes;
      return timing;
    }
    launch(who, "forward", [&] { forward(f, nullptr); });
    DeviceBuffer dout(nq * 2, who, "dO"), dq(nq * 2, who, "dQ"), dk(nk * 2, who, "dK"), dv(nk * 2, who, "dV");
    launch(who, "filling dO", [&] { fill_normal(dout.get(), nq, type, r.seed, 4); });
    BackwardParams b;
    b.shape = f.shape, b.type = type;
    configure(b);
    b.q = f.q, b.k = f.k, b.v = f.v, b.o = contiguous(o, sh.heads_q, sh.seq_q);
    b.dout = contiguous(dout, sh.heads_q, sh.seq_q), b.lse = f.lse;
    const Workspace bws = backward_workspace(b, rows);
    b.dq = contiguous_out(dq, sh.heads_q, sh.seq_q), b.dk = contiguous_out(dk, sh.heads_kv, sh.seq_k);
    b.dv = contiguous_out(dv, sh.heads_kv, sh.seq_k);
    Timing timing = time_runs(who, r.warmup, r.warmup_seconds, r.repeats, [&] { backward(b, nullptr); });
    timing.device_bytes = forward_bytes + static_cast<double>(dout.bytes() + dq.bytes() + dk.bytes() + dv.bytes() + bws.bytes());
    return timing;
  }

 protected:
  // A family's kernels.
  virtual void forward(const ForwardParams& p, cudaStream_t stream) = 0;
  virtual void backward(const BackwardParams& p, cudaStream_t stream) = 0;
  // The double backward, for a family that lists Op::bwdbwd.
  virtual void double_backward(const HogParams&, cudaStream_t) { throw std::runtime_error("no double backward"); }
  // Whether its forward keeps per-row running statistics in global memory (FA1) and its backward an
  // fp32 dQ accumulator (FA1; FA2's fast mode).
  virtual bool needs_row_state() const { return false; }
  virtual bool needs_dq_accum() const { return false; }
  // Whether its backward takes per-kv-head readiness counts for dQ's overlapped conversion (cuda.fa3 fused).
  virtual bool needs_dq_ready() const { return false; }
  // Sets a family's own parameters (tile shape, backward mode) on the params.
  virtual void configure(ForwardParams&) const {}
  virtual void configure(BackwardParams&) const {}
  virtual void configure(HogParams&) const {}

  // The device workspaces of one call, freed with it.
  struct Workspace {
    DeviceBuffer row_state, delta, dq_accum, dq_ready;
    std::size_t bytes() const { return row_state.bytes() + delta.bytes() + dq_accum.bytes() + dq_ready.bytes(); }
  };
  Workspace forward_workspace(ForwardParams& p, std::size_t rows) const {
    Workspace w;
    if (needs_row_state()) {
      w.row_state = DeviceBuffer(2 * rows * sizeof(float), info_.name, "the running m and l");
      p.row_state = static_cast<float*>(w.row_state.get());
    }
    return w;
  }
  Workspace backward_workspace(BackwardParams& p, std::size_t rows) const {
    Workspace w;
    w.delta = DeviceBuffer(rows * sizeof(float), info_.name, "D");
    p.delta = static_cast<float*>(w.delta.get());
    if (needs_dq_accum()) {
      w.dq_accum = DeviceBuffer(rows * p.shape.head_dim * sizeof(float), info_.name, "the fp32 dQ accumulator");
      p.dq_accum = static_cast<float*>(w.dq_accum.get());
    }
    if (needs_dq_ready()) {
      const auto heads = static_cast<std::size_t>(p.shape.batch) * p.shape.heads_kv;
      w.dq_ready = DeviceBuffer(heads * sizeof(std::uint32_t), info_.name, "dQ's per-head readiness counts");
      p.dq_ready = static_cast<std::uint32_t*>(w.dq_ready.get());
    }
    return w;
  }

  SubjectInfo info_;

 private:
  // Runs the launches and waits for them: a launch error or a fault in the kernel becomes a SubjectError.
  template <class F>
  static void launch(const std::string& who, const char* what, F&& f) {
    run_kernels(who, what, f);
  }
};

// cuda.fa2 (deterministic backward) and cuda.fa2.fast (FA2's fast backward: dQ by atomics).
class CudaFa2 final : public CudaAttentionSubject {
 public:
  explicit CudaFa2(bool fast_backward) {
    info_ = cuda_attention_info(fast_backward ? "cuda.fa2.fast" : "cuda.fa2",
                        fast_backward ? "FlashAttention-2 on tensor cores, FA2's fast backward: the dK/dV kernel also adds each step's dQ "
                                        "partial to an fp32 accumulator with atomics (5 products instead of 7; not bitwise "
                                        "reproducible); the forward is cuda.fa2's"
                                      : "FlashAttention-2 on tensor cores (mma.sync m16n8k16, ldmatrix, cp.async): fwd with the online "
                                        "softmax; bwd deterministic (a key-tiled dK/dV kernel and a query-tiled dQ kernel, no atomics)");
    info_.deterministic = !fast_backward;
    info_.options = {{"fwd_tile", "auto",
                      "forward tile: 64x64, 128x64, 128x48, 128x32 (4 warps), 128x64w8 (8 warps), or auto (128x64: the fastest measured at "
                      "d = 64 and 128, kernels/cuda/NOTES.md)"},
                     {"bwd_keys", "64", "keys per block of the dK/dV pass in the warp_keys layout: 64 (4 warps) or 128 (8 warps)"},
                     {"bwd_layout", "auto",
                      "work split of the dK/dV pass: warp_keys (each warp owns 16 keys across all of d), tiled (FA2's: 128 keys x "
                      "64 rows per step over 8 warps, P and dS staged in shared memory), or auto (the faster measured: tiled at d = "
                      "128, warp_keys at d = 64, kernels/cuda/NOTES.md)"}};
  }

  void set_option(const std::string& name, const std::string& value) override {
    if (name == "bwd_keys") {
      if (value != "64" && value != "128") throw SubjectError(info_.name + ": bwd_keys=" + value + ": 64 or 128");
      info_.options[1].value = value;
      return;
    }
    if (name == "bwd_layout") {
      if (value != "auto" && value != "warp_keys" && value != "tiled") {
        throw SubjectError(info_.name + ": bwd_layout=" + value + ": auto, warp_keys or tiled");
      }
      info_.options[2].value = value;
      return;
    }
    if (name != "fwd_tile") throw SubjectError(info_.name + ": no option " + name + " (fwd_tile, bwd_keys, bwd_layout)");
    if (value != "auto" && value != "64x64" && value != "128x64" && value != "128x48" && value != "128x32" && value != "128x64w8") {
      throw SubjectError(info_.name + ": fwd_tile=" + value + ": one of auto, 64x64, 128x64, 128x48, 128x32, 128x64w8");
    }
    info_.options[0].value = value;
  }

 protected:
  void forward(const ForwardParams& p, cudaStream_t stream) override { fa2_forward(p, stream); }
  void backward(const BackwardParams& p, cudaStream_t stream) override { fa2_backward(p, stream); }
  bool needs_dq_accum() const override { return !info_.deterministic; }
  void configure(ForwardParams& p) const override { p.tile = forward_tile(); }
  void configure(BackwardParams& p) const override {
    p.deterministic = info_.deterministic;
    p.dk_dv_keys = info_.options[1].value == "128" ? 128 : 64;
    const std::string& layout = info_.options[2].value;
    p.dk_dv_layout = layout == "tiled" ? DkDvLayout::tiled : layout == "warp_keys" ? DkDvLayout::warp_keys : DkDvLayout::automatic;
  }

 private:
  ForwardTile forward_tile() const {
    const std::string& v = info_.options[0].value;
    if (v == "64x64") return ForwardTile::m64n64w4;
    if (v == "128x64") return ForwardTile::m128n64w4;
    if (v == "128x48") return ForwardTile::m128n48w4;
    if (v == "128x32") return ForwardTile::m128n32w4;
    if (v == "128x64w8") return ForwardTile::m128n64w8;
    return ForwardTile::m128n64w4;  // auto: measured fastest at d = 64 and 128 (NOTES.md, version 3)
  }
};

class CudaFa1 final : public CudaAttentionSubject {
 public:
  CudaFa1() {
    info_ = cuda_attention_info("cuda.fa1",
                        "FlashAttention v1 on tensor cores (mma.sync m16n8k16): key/value tiles outer, O kept normalised in the "
                        "storage format and rewritten per key tile of 64 (cpu.fa1's rounding points); bwd per Algorithm 4, one block "
                        "per kv head walking the key tiles in order, dQ in an fp32 accumulator (deterministic)");
  }

 protected:
  void forward(const ForwardParams& p, cudaStream_t stream) override { fa1_forward(p, stream); }
  void backward(const BackwardParams& p, cudaStream_t stream) override { fa1_backward(p, stream); }
  bool needs_row_state() const override { return true; }
  bool needs_dq_accum() const override { return true; }
};

// The option `scheduler` of cuda.fa3 and cuda.fa4 (auto: persistent_scheduler_by_default, fa3_kernels.hpp).
const char* const kSchedulerHelp =
    "grid: one CTA per 128-row query tile; persistent: one CTA per SM walking the tiles longest first (under a causal mask "
    "heads in L2-sized sections, else head by head); auto: persistent under a causal mask at d = 128, else grid. The same bits";
bool is_scheduler_name(const std::string& value) { return value == "auto" || value == "grid" || value == "persistent"; }

// cuda.fa3 (kernels/cuda/NOTES.md): FA3's forward on wgmma and TMA, bf16 and fp16, head dim 64 and 128, and its
// backward (fa3_backward.cu). The option `schedule` picks among the forward plan's steps (fa3_kernels.hpp), all
// kept so that one bench run compares them; the arithmetic and so the bits are the same in each. The option `bwd`
// picks the fused backward (dQ by fp32 atomics, FA3's default; not bitwise reproducible) or the deterministic two
// passes; the subject's `deterministic` flag follows it, so the harness checks run-to-run bits only for the latter.
// The option `scheduler` picks a CTA per query tile or cuda.fa4's persistent scheduler (auto: the latter under causal
// masks at d = 128; persistent_scheduler_by_default).

class CudaFa3 final : public CudaAttentionSubject {
 public:
  CudaFa3() {
    info_ = cuda_attention_info("cuda.fa3",
                        "FlashAttention-3's forward on Hopper: wgmma m64n128k16 (P from registers, V as an MN-major operand), TMA "
                        "into a K/V ring on mbarriers, a producer warpgroup and two consumer warpgroups (three at d = 64) taking turns, the next tile's "
                        "Q K^T issued with this tile's P V, each head's query tiles longest first; bwd: one key-tiled pass on wgmma, dQ's partials "
                        "added by fp32 atomics (bwd=fused), or a key-tiled dK/dV pass and a query-tiled dQ pass (bwd=two_pass, "
                        "deterministic); bf16 and fp16, d = 64 and 128");
    info_.deterministic = false;
    info_.ops = {Op::fwd, Op::bwd};
    info_.formats = {Format::bf16, Format::fp16};
    info_.head_dims = {64, 128};
    info_.options = {{"schedule", "auto",
                      "one_group (step 1: a warpgroup per 64 rows, no overlap), ws (a producer warp, two consumer warpgroups), "
                      "ws_overlap (and Q K^T of the next tile issued with P V), ws_overlap_pingpong (and the groups take turns), "
                      "ws_overlap_pingpong_3stage (with a 3-stage ring), ws_overlap_pingpong_3groups (three consumer warpgroups in "
                      "turn, 192 rows per CTA; d = 64 only, so the subject then offers d = 64 alone, its backward too), "
                      "ws_overlap_pingpong_3groups_p_shared (the same at d = 128 only, P V reading P from shared memory; 1-10 % slower "
                      "than ws_overlap_pingpong there on an H200), ws_overlap_3groups and ws_overlap_3groups_p_shared (those two without turns: "
                      "each group issues its products as soon as its P is ready; d = 64 and d = 128 only), or auto (3groups at d = 64, "
                      "ws_overlap_pingpong at d = 128 and with key_tile=176)"},
                     {"bwd", "fused",
                      "fused (one key-tiled pass; dQ's partials added into an fp32 accumulator by atomics, so its bits vary "
                      "from run to run) or two_pass (a key-tiled dK/dV pass and a query-tiled dQ pass: deterministic)"},
                     {"key_tile", "128",
                      "keys per K/V tile of the forward: 128, or 176 (FA3's tile for d = 128 without a mask; schedule auto or "
                      "ws_overlap_pingpong; its twin is cpu.fa3 with block_k=176)"},
                     {"dq_convert", "overlapped",
                      "bwd=fused: when dQ is scaled and rounded from its fp32 accumulator: overlapped (a dependent launch whose "
                      "blocks convert each head once the key-tiled pass has finished it, on the SMs its last wave leaves idle) or "
                      "after (a pass over dQ after the key-tiled pass). The same bits either way"},
                     {"bwd_grid", "tiles",
                      "the backward's key-tiled pass: tiles (a CTA per key tile of 128), persistent (a CTA per SM walking the "
                      "tiles in the same order; the next tile's K and V load once this tile's dK and dV have left its K and V buffers, "
                      "or with bwd_epilogue=stores during this tile's epilogue) or a number of CTAs to walk them. The same arithmetic in each"},
                     {"bwd_tail", "0",
                      "the key-tiled pass's launch order: its tiles go head by head (key tile fastest), except the last this many "
                      "(batch, kv head) pairs, whose tiles go key tile slowest, so that under a causal mask their long first key "
                      "tiles start before any short last one; a count in [0, 2^20] (more than the pairs: all of them). Measured "
                      "no faster than 0 on an H200 (NOTES); the same arithmetic in each"},
                     {"epilogue", "automatic",
                      "automatic: the forward stores O through shared memory and one TMA store per 64-column box (FA3's epilogue) where O is "
                      "rounded to nearest and TMA can write it, 4-byte global stores otherwise; stores: always the latter. The same bits"},
                     {"scheduler", "auto",
                      std::string(kSchedulerHelp) + ". Persistent runs with schedule auto (then two consumer groups at d = 64 too) or "
                      "ws_overlap_pingpong and key_tile=128; auto takes it with schedule auto and key_tile=128 only"},
                     {"bwd_epilogue", "automatic",
                      "automatic: the backward's key-tiled pass stores dK and dV through shared memory (the tile's K and V buffers) "
                      "and one TMA store per 64-column box where their layouts allow it, 4-byte global stores otherwise; stores: "
                      "always the latter. The same bits"}};
  }

  void set_option(const std::string& name, const std::string& value) override {
    if (name == "bwd") {
      if (value != "fused" && value != "two_pass") throw SubjectError(info_.name + ": bwd=" + value + ": fused or two_pass");
      info_.options[1].value = value;
      info_.deterministic = value == "two_pass";
      return;
    }
    if (name == "key_tile") {
      if (value != "128" && value != "176") throw SubjectError(info_.name + ": key_tile=" + value + ": 128 or 176");
      if (value == "176" && schedule_ != kAuto && schedule_ != Fa3Schedule::ws_overlap_pingpong) {
        throw SubjectError(info_.name + ": key_tile=176 runs with schedule auto or ws_overlap_pingpong only");
      }
      if (value == "176" && scheduler_ == "persistent") throw SubjectError(info_.name + ": key_tile=176 runs with scheduler grid or auto only");
      info_.options[2].value = value;
      key_tile_ = std::stoi(value);
      return;
    }
    if (name == "dq_convert") {
      if (value != "overlapped" && value != "after") throw SubjectError(info_.name + ": dq_convert=" + value + ": overlapped or after");
      info_.options[3].value = value;
      dq_overlapped_ = value == "overlapped";
      return;
    }
    if (name == "bwd_grid") {
      int ctas = value == "tiles" ? 0 : value == "persistent" ? -1 : -2;
      if (ctas == -2) {
        const bool digits = !value.empty() && value.size() <= 7 && value.find_first_not_of("0123456789") == std::string::npos;
        ctas = digits ? std::stoi(value) : 0;
        if (ctas < 1 || ctas > 1 << 20) {
          throw SubjectError(info_.name + ": bwd_grid=" + value + ": tiles, persistent or a number of CTAs in [1, 2^20]");
        }
      }
      info_.options[4].value = value;
      key_pass_ctas_ = ctas;
      return;
    }
    if (name == "bwd_tail") {
      const bool digits = !value.empty() && value.size() <= 7 && value.find_first_not_of("0123456789") == std::string::npos;
      const int heads = digits ? std::stoi(value) : -1;
      if (heads < 0 || heads > 1 << 20) throw SubjectError(info_.name + ": bwd_tail=" + value + ": a count of head pairs in [0, 2^20]");
      info_.options[5].value = value;
      key_pass_tail_heads_ = heads;
      return;
    }
    if (name == "epilogue") {
      epilogue_ = parse_fa3_epilogue(info_.name, value);
      info_.options[6].value = value;
      return;
    }
    if (name == "scheduler") {
      if (!is_scheduler_name(value)) throw SubjectError(info_.name + ": scheduler=" + value + ": auto, grid or persistent");
      if (value == "persistent" && ((schedule_ != kAuto && schedule_ != Fa3Schedule::ws_overlap_pingpong) || key_tile_ != 128)) {
        throw SubjectError(info_.name + ": scheduler=persistent runs with schedule auto or ws_overlap_pingpong and key_tile=128 only");
      }
      info_.options[7].value = value;
      scheduler_ = value;
      return;
    }
    if (name == "bwd_epilogue") {
      if (value != "automatic" && value != "stores") throw SubjectError(info_.name + ": bwd_epilogue=" + value + ": automatic or stores");
      info_.options[8].value = value;
      dk_dv_by_stores_ = value == "stores";
      return;
    }
    if (name != "schedule") {
      throw SubjectError(info_.name + ": no option " + name + " (schedule, bwd, key_tile, dq_convert, bwd_grid, bwd_tail, epilogue, scheduler, bwd_epilogue)");
    }
    for (Fa3Schedule s : kSchedules) {
      if (value == fa3_schedule_name(s)) {
        if (key_tile_ != 128 && s != Fa3Schedule::ws_overlap_pingpong) throw SubjectError(info_.name + ": schedule=" + value + " runs with key_tile=128 only");
        if (scheduler_ == "persistent" && s != Fa3Schedule::ws_overlap_pingpong) {
          throw SubjectError(info_.name + ": schedule=" + value + " runs with scheduler grid or auto only");
        }
        info_.options[0].value = value;
        schedule_ = s;
        const bool d64 = s == Fa3Schedule::ws_overlap_pingpong_3groups || s == Fa3Schedule::ws_overlap_3groups;
        const bool d128 = s == Fa3Schedule::ws_overlap_pingpong_3groups_p_shared || s == Fa3Schedule::ws_overlap_3groups_p_shared;
        info_.head_dims = d64 ? std::vector<int>{64} : d128 ? std::vector<int>{128} : std::vector<int>{64, 128};
        return;
      }
    }
    if (value != "auto") {
      throw SubjectError(info_.name + ": schedule=" + value +
                         ": one of auto, one_group, ws, ws_overlap, ws_overlap_pingpong, ws_overlap_pingpong_3stage, ws_overlap_pingpong_3groups, "
                         "ws_overlap_pingpong_3groups_p_shared, ws_overlap_3groups, ws_overlap_3groups_p_shared");
    }
    info_.options[0].value = value;
    schedule_ = kAuto;
    info_.head_dims = {64, 128};
  }

 protected:
  void forward(const ForwardParams& p, cudaStream_t stream) override {
    const bool persistent = scheduler_ == "persistent" || (scheduler_ == "auto" && schedule_ == kAuto && key_tile_ == 128 && persistent_scheduler_by_default(p.shape));
    if (!persistent) return fa3_forward(p, schedule_, stream, key_tile_, epilogue_);
    ForwardParams with_counter = p;
    with_counter.work_counter = reinterpret_cast<int*>(work_counter_.cleared(stream, info_.name));
    fa3_forward(with_counter, schedule_, stream, key_tile_, epilogue_, Fa3Scheduler::persistent);
  }
  void backward(const BackwardParams& p, cudaStream_t stream) override { fa3_backward(p, stream); }
  bool needs_dq_accum() const override { return !info_.deterministic; }
  bool needs_dq_ready() const override { return !info_.deterministic && dq_overlapped_; }
  void configure(BackwardParams& p) const override {
    p.deterministic = info_.deterministic, p.key_pass_ctas = key_pass_ctas_, p.key_pass_tail_heads = key_pass_tail_heads_;
    p.dk_dv_by_stores = dk_dv_by_stores_;
  }

 private:
  static constexpr Fa3Schedule kSchedules[] = {Fa3Schedule::one_group,          Fa3Schedule::ws, Fa3Schedule::ws_overlap, Fa3Schedule::ws_overlap_pingpong,
                                               Fa3Schedule::ws_overlap_pingpong_3stage, Fa3Schedule::ws_overlap_pingpong_3groups,
                                               Fa3Schedule::ws_overlap_pingpong_3groups_p_shared, Fa3Schedule::ws_overlap_3groups,
                                               Fa3Schedule::ws_overlap_3groups_p_shared};
  static constexpr Fa3Schedule kAuto = Fa3Schedule::automatic;
  Fa3Schedule schedule_ = kAuto;
  int key_tile_ = 128;
  bool dq_overlapped_ = true;  // (option dq_convert)
  int key_pass_ctas_ = 0;  // (option bwd_grid: BackwardParams::key_pass_ctas)
  int key_pass_tail_heads_ = 0;  // (option bwd_tail: BackwardParams::key_pass_tail_heads)
  Fa3Epilogue epilogue_ = Fa3Epilogue::automatic;
  std::string scheduler_ = "auto";
  bool dk_dv_by_stores_ = false;  // (option bwd_epilogue)
  ZeroedDeviceWords work_counter_{sizeof(int)};  // (the persistent scheduler's)
};

// cuda.fa4 (kernels/cuda/NOTES.md): cuda.fa3's forward pipeline (ws_overlap_pingpong; with the grid scheduler at
// d = 64, three groups as cuda.fa3's auto) with FA4's softmax:
// selective rescaling (tau, log2 units, default 8; the count of rescales per row and key tile after the first
// is the counter `rescales`), the cubic exp2 emulation on a share of the exponentials (exp2_fraction: 0, 0.125 or
// 0.5, the columns cpu.fa4.emulated emulates) and a persistent longest-first scheduler (scheduler=persistent; auto,
// the default, takes it under causal masks at d = 128: see persistent_scheduler_by_default).
// CPU twins: cpu.fa4, cpu.fa4.emulated.
class CudaFa4 final : public CudaAttentionSubject {
 public:
  CudaFa4() {
    info_ = cuda_attention_info("cuda.fa4",
                        "FA4-style forward on Hopper: cuda.fa3's pipeline (TMA ring, producer warpgroup, two consumer warpgroups (three at d = 64 with the grid scheduler) taking "
                        "turns, Q K^T of the next tile issued with P V) with selective rescaling (the running max raised only when a "
                        "tile's max exceeds it by tau; rescales counted) and the cubic exp2 emulation on a share of the exponentials; "
                        "bf16 and fp16, d = 64, 128 and 256 (two groups, key tiles of 64, the grid scheduler at 256); fwd only");
    info_.ops = {Op::fwd};
    info_.formats = {Format::bf16, Format::fp16};
    info_.max_head_dim = 256;
    refresh_options();
  }
  void set_option(const std::string& name, const std::string& value) override {
    if (name == "tau") {
      tau_ = parse_tau(info_.name, value, 30, "");
    } else if (name == "exp2_fraction") {
      const int eighths = value == "0" ? 0 : value == "0.125" ? 1 : value == "0.5" ? 4 : -1;
      if (eighths < 0) throw SubjectError(info_.name + ": exp2_fraction=" + value + ": one of 0, 0.125, 0.5 (compiled variants)");
      fa4_.emulated_eighths = eighths;
    } else if (name == "scheduler") {
      if (!is_scheduler_name(value)) throw SubjectError(info_.name + ": scheduler=" + value + ": auto, grid or persistent");
      scheduler_ = value;
    } else if (name == "epilogue") {
      fa4_.epilogue = parse_fa3_epilogue(info_.name, value);
    } else {
      throw SubjectError(info_.name + ": no option " + name + " (tau, exp2_fraction, scheduler, epilogue)");
    }
    refresh_options();
  }

  void run(Op op, const AttentionCall& c) override {
    validate_rescale_threshold(info_, tau_, c.policy);
    CudaAttentionSubject::run(op, c);
  }

  std::vector<Counter> counters() const override { return rescale_counter(counters_.data()); }

 protected:
  // One device allocation holds the rescale count and the persistent scheduler's work counter; both start at 0.
  void forward(const ForwardParams& p, cudaStream_t stream) override {
    unsigned char* words = counters_.cleared(stream, info_.name);
    ForwardParams with_counters = p;
    with_counters.rescale_threshold = tau_;
    with_counters.rescale_count = reinterpret_cast<unsigned long long*>(words);
    with_counters.work_counter = reinterpret_cast<int*>(words + sizeof(unsigned long long));
    Fa4Options options = fa4_;
    options.persistent = scheduler_ == "persistent" || (scheduler_ == "auto" && persistent_scheduler_by_default(p.shape));
    fa4_forward(with_counters, options, stream);
  }
  void backward(const BackwardParams&, cudaStream_t) override { throw std::runtime_error("cuda.fa4 has no backward yet (plan step 5)"); }

 private:
  void refresh_options() {
    // (d = 256 runs the grid scheduler only: fa4_forward)
    info_.head_dims = scheduler_ == "persistent" ? std::vector<int>{64, 128} : std::vector<int>{64, 128, 256};
    info_.options = {{"tau", std::to_string(tau_), "rescale only when the running max grows by at least this (log2 units); 0: always (FA2)"},
                     {"exp2_fraction", fa4_.emulated_eighths == 0 ? "0" : fa4_.emulated_eighths == 1 ? "0.125" : "0.5",
                      "share of the exponentials by the cubic exp2 emulation on the FMA pipes: 0, 0.125 or 0.5"},
                     {"scheduler", scheduler_, std::string(kSchedulerHelp) + ". At d = 256 the grid only (the subject then offers d = 64 and 128 with persistent)"},
                     {"epilogue", fa4_.epilogue == Fa3Epilogue::stores ? "stores" : "automatic", "automatic: the forward stores O through shared memory and one TMA store per 64-column box (FA3's epilogue) where O is "
                      "rounded to nearest and TMA can write it, 4-byte global stores otherwise; stores: always the latter. The same bits"}};
  }

  float tau_ = 8;
  Fa4Options fa4_;  // (fa4_.persistent is chosen per call from scheduler_)
  std::string scheduler_ = "auto";
  ZeroedDeviceWords counters_{sizeof(unsigned long long) + sizeof(int)};
};

}  // namespace

Fa3Epilogue parse_fa3_epilogue(const std::string& who, const std::string& value) {
  if (value == "automatic") return Fa3Epilogue::automatic;
  if (value == "stores") return Fa3Epilogue::stores;
  throw SubjectError(who + ": epilogue=" + value + ": automatic or stores");
}

float parse_tau(const std::string& who, const std::string& value, double max_tau, const std::string& why) {
  double v = -1;
  try {
    std::size_t used = 0;
    v = std::stod(value, &used);
    if (used != value.size()) v = -1;
  } catch (const std::exception&) {
    v = -1;
  }
  if (!(v >= 0 && v <= max_tau)) {
    std::ostringstream m;
    m << who << ": tau=" << value << ": a number in [0, " << max_tau << "] (log2 units" << (why.empty() ? "" : "; " + why) << ")";
    throw SubjectError(m.str());
  }
  return static_cast<float>(v);
}

std::vector<Counter> rescale_counter(const void* device_word) {
  if (device_word == nullptr) return {};
  unsigned long long rescales = 0;
  if (cudaMemcpy(&rescales, device_word, sizeof rescales, cudaMemcpyDeviceToHost) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return {{"rescales", static_cast<double>(rescales)}};
}

std::string hopper_unavailable_reason() {
  if (std::string why = device_unavailable_reason(); !why.empty()) return why;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return "the device's compute capability could not be read";
  }
  if (major == 9) return "";
  return "the device has compute capability " + std::to_string(major) + "." + std::to_string(minor) +
         ": the wgmma and TMA kernels (sm_90a) run on Hopper (9.x) only";
}

// cuda.hog and cuda.hog.2pass: Flash Hog's double backward (3 or 2 query-tiled passes and a key-tiled
// one); the forward and backward are cuda.fa2's.
class CudaHog final : public CudaAttentionSubject {
 public:
  explicit CudaHog(bool two_pass) : two_pass_(two_pass) {
    info_ = cuda_attention_info(two_pass ? "cuda.hog.2pass" : "cuda.hog",
                        two_pass ? "Flash Hog double backward on tensor cores, b accumulated with dd (r1 + r3 - 2 D dd): 2 query-tiled "
                                   "passes + 1 key-tiled pass, no atomics; fwd, bwd: cuda.fa2's"
                                 : "Flash Hog double backward on tensor cores (wgmma at d = 64, mma.sync at 128): 3 query-tiled passes (dd, b, dQ' and ddO) + 1 "
                                   "key-tiled pass (dK', dV'), no atomics, O(N) extra memory; fwd, bwd: cuda.fa2's");
    info_.ops = {Op::fwd, Op::bwd, Op::bwdbwd};
    info_.options = {{"passes", "auto",
                      "the double backward's passes: auto (wgmma and TMA at head dim 64 with TMA-readable operands, hog_wgmma.cuh; "
                      "mma.sync otherwise) or mma_sync (hog_kernels.cuh's for every shape: the baseline the wgmma ones are measured against)"}};
  }

  void set_option(const std::string& name, const std::string& value) override {
    if (name != "passes") throw SubjectError(info_.name + ": no option " + name + " (passes)");
    if (value != "auto" && value != "mma_sync") throw SubjectError(info_.name + ": passes=" + value + ": auto or mma_sync");
    info_.options[0].value = value;
  }

 protected:
  void forward(const ForwardParams& p, cudaStream_t stream) override { fa2_forward(p, stream); }
  void backward(const BackwardParams& p, cudaStream_t stream) override { fa2_backward(p, stream); }
  void double_backward(const HogParams& p, cudaStream_t stream) override { hog_double_backward(p, stream); }
  void configure(HogParams& p) const override { p.two_pass = two_pass_, p.mma_sync_only = info_.options[0].value == "mma_sync"; }

 private:
  bool two_pass_;
};

SubjectInfo cuda_attention_info(const std::string& name, const std::string& description) {
  SubjectInfo info;
  info.name = name, info.description = description;
  info.family = Family::attention;
  info.ops = {Op::fwd, Op::bwd};
  info.formats = {Format::bf16, Format::fp16};
  info.accumulate_formats = {Format::fp32};
  info.head_dims = {64, 128};
  info.max_head_dim = 128;
  info.masks = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};
  info.separate_dv = false;
  info.stochastic_rounding = true;
  info.deterministic = true;
  info.host_allocations_counted = false;  // device memory
  info.device = device_name();
  return info;
}

std::string device_name() {
  cudaDeviceProp prop{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "cuda: unknown device";
  }
  return std::string("cuda: ") + prop.name;
}

std::vector<std::unique_ptr<Subject>> make_cuda_subjects() {
  std::vector<std::unique_ptr<Subject>> subjects;
  if (!device_unavailable_reason().empty()) return subjects;
  subjects.push_back(std::make_unique<CudaFa1>());
  subjects.push_back(std::make_unique<CudaFa2>(false));
  subjects.push_back(std::make_unique<CudaFa2>(true));
  subjects.push_back(std::make_unique<CudaHog>(false));
  subjects.push_back(std::make_unique<CudaHog>(true));
  subjects.push_back(make_cuda_attnres());
  if (hopper_unavailable_reason().empty()) {
    subjects.push_back(std::make_unique<CudaFa3>());
    subjects.push_back(std::make_unique<CudaFa4>());
    subjects.push_back(make_cuda_fa3_fp8());
  }
  return subjects;
}

}  // namespace fc::kernels::cuda
