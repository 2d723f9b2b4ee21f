// The one public description of a call to an attention kernel ("subject"): shapes, mask, softmax
// scale, precision policy, and strided typed tensors, inputs and outputs. Every backend (CPU, CUDA,
// libtorch, a user's plugin) receives this, and declares what it supports in a SubjectInfo.
//
// Tensors are 4-dimensional logical views [B, H, N, D] with element strides, so callers may pass
// layouts other than contiguous [B, H, N, D] (PyTorch's [B, N, H, D] memory order, for one). Row
// statistics (L) are [B, H, N, 1]. Element (b, h, n, c) lives at data + b*s0 + h*s1 + n*s2 + c*s3 in
// units of the tensor's format.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "precision/format.hpp"
#include "precision/policy.hpp"

namespace fc::kernels {

enum class Op { fwd, bwd, bwdbwd };
std::string_view name(Op op);  // "fwd", "bwd", "bwdbwd"

// (i, j) visible: none always; causal_top_left iff j <= i; causal_bottom_right iff
// j <= i + (Nk - Nq). A row with no visible key has O = 0, L = -inf, no gradient (EQUATIONS.md 1).
enum class Mask { none, causal_top_left, causal_bottom_right };
std::string_view name(Mask m);  // "none", "causal_tl", "causal_br"

inline bool visible(Mask m, int i, int j, int nq, int nk) {
  switch (m) {
    case Mask::none: return true;
    case Mask::causal_top_left: return j <= i;
    case Mask::causal_bottom_right: return j <= i + (nk - nq);
  }
  return false;
}

enum class Family { attention, attnres };
std::string_view name(Family f);

struct AttentionShape {
  int batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_k = 1, head_dim = 1, head_dim_v = 1;
};

struct TensorView {
  void* data = nullptr;
  Format format = Format::fp32;
  std::array<std::int64_t, 4> shape{};    // logical [B, H, N, D]
  std::array<std::int64_t, 4> strides{};  // elements

  bool empty() const { return data == nullptr; }
  std::int64_t offset(std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t c) const {
    return b * strides[0] + h * strides[1] + n * strides[2] + c * strides[3];
  }
  std::int64_t elements() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
};

// A contiguous [B, H, N, D] view of `data`.
TensorView contiguous_view(void* data, Format format, std::array<std::int64_t, 4> shape);

// One call. Inputs are read, outputs written; which ones an op uses:
//   fwd:    q, k, v                                  -> out_o, out_lse (if the subject returns L)
//   bwd:    q, k, v, o, lse (its own fwd's), dout     -> dq, dk, dv
//   bwdbwd: q, k, v, o, lse, dout, ddq, ddk, ddv      -> dq2, dk2, dv2, ddo
// Outputs are preallocated by the caller in the policy's formats. dK, dV (and dK', dV') are summed
// over each kv head's group of query heads.
struct AttentionCall {
  AttentionShape shape;
  Mask mask = Mask::none;
  double scale = 1.0;
  PrecisionPolicy policy;
  TensorView q, k, v, o, lse, dout, ddq, ddk, ddv;
  TensorView out_o, out_lse, dq, dk, dv, dq2, dk2, dv2, ddo;
};

// A tunable parameter of a subject (a tile size, a rescale threshold), set by name before calls.
struct SubjectOption {
  std::string name;
  std::string value;  // the current value, as text
  std::string description;
};

// A quantity a subject measured during its last call (FA4's rescale count, say).
struct Counter {
  std::string name;
  double value = 0;
};

// What a subject supports; the harness generates cases only within it.
struct SubjectInfo {
  std::string name;  // backend.family[.variant], e.g. "cpu.naive", "cuda.fa2", "plugin.mine"
  std::string description;
  Family family = Family::attention;
  std::vector<Op> ops;
  std::vector<Format> formats;  // storage formats (the policy's base format) it accepts
  std::vector<Format> accumulate_formats = {Format::fp32, Format::fp64};  // policy accumulate= it honours
  std::vector<int> head_dims;   // empty: any d in [1, max_head_dim]
  int max_head_dim = 256;
  int max_seq = 0;              // 0: unbounded
  int min_seq = 1;              // Nq and Nk at least this (cuDNN's SDPA refuses Nk = 1)
  bool causal_equal_lengths = false;  // causal masks only with Nq == Nk (PyTorch's SDPA flash backend)
  std::vector<Mask> masks;
  bool gqa = true;              // Hq a multiple of Hkv > 1
  bool separate_dv = true;      // dv may differ from d
  bool returns_lse = true;
  bool stochastic_rounding = false;  // honours round=sr in the policy
  bool deterministic = true;    // bitwise identical results for identical calls
  bool host_allocations_counted = true;  // its memory goes through operator new (memory_counter.hpp sees it)
  std::string device;           // where it runs, for records ("cuda: NVIDIA H100 80GB HBM3"); empty: the host CPU
  std::vector<SubjectOption> options;  // current values

  bool supports(Op op) const;
  bool supports(Format f) const;
  bool supports_accumulate(Format f) const;
  bool supports(Mask m) const;
  bool supports_head_dim(int d) const;
  // The current value of a declared option; "" when the subject has no such option.
  std::string option_value(const std::string& option) const;
};

// An error a subject reports for a call it cannot or will not run (unsupported head dim, shapes that
// do not match, non-finite inputs, a failed launch, out of memory): its message names the problem.
struct SubjectError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct AttnResCall;  // attnres_call.hpp

// A throughput measurement on the subject's own device (`flashcheck bench`): inputs of `format` drawn
// from N(0, 1) on the device (never zeros), contiguous [B, H, N, D], timed after `warmup` runs.
struct TimingRequest {
  AttentionShape shape;
  Mask mask = Mask::none;
  double scale = 1;
  Format format = Format::bf16;
  Op op = Op::fwd;  // fwd: the forward; bwd: the backward alone, from a forward's saved O and L
  int warmup = 5;
  // Warm-up runs go on, past `warmup`, until this many seconds of them have run (each waited for). The GPU's power
  // controller settles on a scale of time, not of runs: after 200 runs (0.1 s) of a 0.5 ms forward its bench rounds
  // spread by 15-18 %, after 1000 (0.5 s) by 1-1.5 % (H200; kernels/cuda/NOTES.md, "A warm-up in seconds").
  double warmup_seconds = 0;
  int repeats = 20;
  std::uint64_t seed = 1;
};
struct Timing {
  std::vector<double> milliseconds;  // one per repeat (device events around each run; the CUDA and SDPA subjects hold the stream until the run is enqueued, kernels/cuda/run_timer.hpp)
  double device_bytes = 0;           // device memory the measured op held (inputs, outputs, workspace)
  // The device's state as each timed run started (kernels/cuda/device_monitor.hpp says why the bench wants it and what
  // a reading means): the SM clock and NVML's latest GPU power reading, one each per run where read, and the
  // clock-limit reasons any sample showed ("power cap", ...). Shorter than `milliseconds` (empty without NVML) where a
  // reading failed, and device_state_note then says why.
  std::vector<double> sm_clock_mhz, power_w;
  std::vector<std::string> clock_limits;
  std::string device_state_note;
};

class Subject {
 public:
  virtual ~Subject() = default;
  virtual const SubjectInfo& info() const = 0;
  // Throws SubjectError (or std::invalid_argument) with a clear message; never returns a wrong answer
  // for an input it did not reject. Attention subjects implement run, AttnRes subjects run_attnres;
  // the other one refuses (SubjectError naming the family).
  virtual void run(Op op, const AttentionCall& call);
  virtual void run_attnres(Op op, const AttnResCall& call);
  // Sets a declared option (info().options then shows the new value); throws SubjectError for an
  // unknown name or a bad value.
  virtual void set_option(const std::string& name, const std::string& value);
  // What the last call measured (empty for most subjects).
  virtual std::vector<Counter> counters() const { return {}; }
  // Times an op on the subject's device; subjects that cannot (the CPU backends) return none.
  // Throws SubjectError for a problem outside the subject's limits or a device failure.
  virtual std::optional<Timing> time(const TimingRequest&) { return std::nullopt; }
};

// Checks a call against the subject's declared limits and the shapes of its tensors; throws
// SubjectError naming the first problem. Backends call it first.
void validate_call(const SubjectInfo& info, Op op, const AttentionCall& call);
// Its parts, for callers that want to refuse work before allocating anything (flashcheck check exits
// 2 on a case or policy outside a subject's declared support): the policy (storage format, accumulation,
// rounding), and the problem (op, shape, mask, scale).
void validate_policy(const SubjectInfo& info, const PrecisionPolicy& policy);
void validate_problem(const SubjectInfo& info, Op op, const AttentionShape& shape, Mask mask, double scale);
// FA4's selective rescaling (cpu.fa4, cuda.fa4): without a rescale the unnormalised P runs up to 2^tau and
// enters P V in V's storage format, so a tau whose 2^tau is past that format's largest finite value (fp16:
// 65504 < 2^16) would make P Inf. SubjectError naming tau and the largest tau the format allows.
void validate_rescale_threshold(const SubjectInfo& info, double tau, const PrecisionPolicy& policy);
// One tensor of a call: present, of this logical shape and format; SubjectError "<subject>: <what> ..."
// otherwise.
void validate_tensor(const SubjectInfo& info, const std::string& what, const TensorView& t, std::array<std::int64_t, 4> shape,
                     Format format);

}  // namespace fc::kernels
