// cuda.fa3.fp8: FA3's FP8 forward on Hopper (fa3_fp8_kernels.hpp) as a harness subject, the GPU twin of
// cpu.fa3.fp8 (kernels/cpu/flash_attention.hpp), with the same option `operands`:
//   e4m3    Q, K, V are e4m3 tensors (the policy "e4m3": O in bf16, L in fp32); their block exponents are 0;
//   scaled  Q, K, V are fp32, bf16 or fp16 tensors holding e4m3 values times a power of two per block (128 rows
//           of Q, block_k keys of K and V: what a quantizer with per-block scales produces, fa3-accuracy's
//           input); the subject finds each block's exponent by the quantizer's rule
//           (e4m3_block_exponent_of_float) on the GPU and refuses a value that is not e4m3 times it, as
//           cpu.fa3.fp8 does;
// and the same option `block_k`: the kernel's key tile and K's and V's block (128, or at d = 128 FA3's FP8 tile
// there, 224, or cuDNN's, 256), and `tau`: 0, FA3's rule (the default), or FA4's selective rescaling with threshold tau,
// in the 256-key kernel with P in shared memory only (its rescales are the counter `rescales`, as cpu.fa3.fp8's).
// Every call also writes V^T (the FP8 product's B operand must be K-major). O is stored in bf16 or fp16, RN or
// SR with the CPU backends' Philox words.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention_call.hpp"
#include "kernels/cuda/cuda_subjects.hpp"
#include "kernels/cuda/device_fill.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/fa3_fp8_kernels.hpp"
#include "kernels/cuda/run_timer.hpp"
#include "kernels/cuda/shape_params.hpp"
#include "kernels/tensor_io.hpp"

namespace fc::kernels::cuda {
namespace {

// A head's V blocks may differ in exponent by at most this: O is kept in units of the current V block's scale
// and multiplied by 2^(e_old - e_new) at each V tile (fa3_forward.cuh), which must neither overflow fp32 (O's
// units hold at most Nk 448 < 2^40 for any int Nk: 2^40 2^64 < 2^127) nor push a product of two e4m3 values
// (>= 2^-18) below fp32's normal range (2^-18 2^-64 > 2^-126).
constexpr int kMaxVExponentSpread = 64;
// Q's and K's exponents scale the softmax's scale (2^(e_q + e_k) s log2 e, fa3_forward.cuh): their largest sum
// must leave that factor finite.
constexpr int kMaxQkExponentSum = 120;

int blocks_of(int rows, int block) { return (rows + block - 1) / block; }

class CudaFa3Fp8 final : public Subject {
 public:
  CudaFa3Fp8() {
    info_ = cuda_attention_info(
        "cuda.fa3.fp8",
        "FA3's FP8 forward on Hopper: cuda.fa3's pipeline on the FP8 tensor cores (QGMMA k32): e4m3 Q, K, V with a power-of-two "
        "scale per block (128 rows of Q, block_k keys of K and V), S in fp32, P rounded to e4m3 before P V (V transposed in the kernel, or by a pass "
        "first), O in bf16 or fp16; d = 64, 128 and 256 (two consumer groups with P in registers at 256); cpu.fa3.fp8's numerics");
    info_.ops = {Op::fwd};
    info_.max_head_dim = 256;
    refresh_options();  // (the formats follow the option operands)
  }

  const SubjectInfo& info() const override { return info_; }

  // An option that leaves no compiled kernel for any head dim together with the others set (turns=none with P in
  // registers or block_k=224 or 256; scheduler=persistent with P in registers, block_k=224, turns=ring at block_k=128 or
  // v_transpose=kernel) is refused, whichever comes second, and the options stay as they were: an empty list of head
  // dims would declare every head dim (SubjectInfo::supports_head_dim).
  void set_option(const std::string& name, const std::string& value) override {
    const Fp8Options before = options_;
    apply_option(name, value);
    refresh_options();
    if (info_.head_dims.empty()) {
      options_ = before;
      refresh_options();
      throw SubjectError(info_.name + ": " + name + "=" + value + " with block_k=" + std::to_string(options_.block_k) + ", p_operand=" + p_operand_name() +
                         ", turns=" + turns_name() + ", v_transpose=" + v_transpose_name() + ", scheduler=" + scheduler_name() + ", tau=" + tau_text() +
                         ": no kernel runs these together at any head dim (turns=none needs P in shared memory and block_k=128: p_operand=shared at head dim "
                         "128 or 256, or auto at 128, or block_k=256 with tau > 0; scheduler=persistent P in shared memory at head dim 128 with v_transpose auto or pass, and block_k=128 with "
                         "turns auto or none, or block_k=256; tau > 0 block_k=256 with p_operand auto or shared at head dim 128)");
    }
  }

  void apply_option(const std::string& name, const std::string& value) {
    if (name == "operands") {
      if (value != "e4m3" && value != "scaled") throw SubjectError(info_.name + ": operands=" + value + ": e4m3 or scaled");
      options_.scaled = value == "scaled";
    } else if (name == "block_q") {
      if (value != std::to_string(kFp8BlockRows)) throw SubjectError(info_.name + ": block_q=" + value + ": the kernels' query blocks are 128 rows");
    } else if (name == "block_k") {
      if (value != "128" && value != "224" && value != "256") throw SubjectError(info_.name + ": block_k=" + value + ": 128, or 224 or 256 (head dim 128 only)");
      if (value == "224" && options_.p_operand == Fp8POperand::shared) throw SubjectError(p_shared_with_wide_tile(value));
      if (value != "128" && options_.v_transpose == Fp8VTranspose::kernel) throw SubjectError(v_in_kernel_with_wide_tile(value));
      options_.block_k = std::stoi(value);
    } else if (name == "p_operand") {
      if (value == "auto") {
        options_.p_operand = Fp8POperand::automatic;
      } else if (value == "registers") {
        options_.p_operand = Fp8POperand::registers;
      } else if (value == "shared") {
        if (options_.block_k == 224) throw SubjectError(p_shared_with_wide_tile(std::to_string(options_.block_k)));
        options_.p_operand = Fp8POperand::shared;
      } else {
        throw SubjectError(info_.name + ": p_operand=" + value + ": auto, registers or shared");
      }
    } else if (name == "epilogue") {
      options_.epilogue = parse_fa3_epilogue(info_.name, value);
    } else if (name == "turns") {
      if (value == "auto") {
        options_.turns = Fp8Turns::automatic;
      } else if (value == "ring") {
        options_.turns = Fp8Turns::ring;
      } else if (value == "none") {
        options_.turns = Fp8Turns::none;
      } else {
        throw SubjectError(info_.name + ": turns=" + value + ": auto, ring or none");
      }
    } else if (name == "scheduler") {
      if (value == "auto") {
        options_.scheduler = Fp8Scheduler::automatic;
      } else if (value == "grid") {
        options_.scheduler = Fp8Scheduler::grid;
      } else if (value == "persistent") {
        options_.scheduler = Fp8Scheduler::persistent;
      } else {
        throw SubjectError(info_.name + ": scheduler=" + value + ": auto, grid or persistent");
      }
    } else if (name == "v_transpose") {
      if (value == "auto") {
        options_.v_transpose = Fp8VTranspose::automatic;
      } else if (value == "pass") {
        options_.v_transpose = Fp8VTranspose::pass;
      } else if (value == "kernel") {
        if (options_.block_k != 128) throw SubjectError(v_in_kernel_with_wide_tile(std::to_string(options_.block_k)));
        options_.v_transpose = Fp8VTranspose::kernel;
      } else {
        throw SubjectError(info_.name + ": v_transpose=" + value + ": auto, pass or kernel");
      }
    } else if (name == "tau") {
      options_.tau = parse_tau(info_.name, value, kFp8MaxTau, "P runs up to 2^tau and is rounded to e4m3, whose largest value is 448");
    } else {
      throw SubjectError(info_.name + ": no option " + name + " (operands, block_q, block_k, p_operand, epilogue, turns, v_transpose, scheduler, tau)");
    }
  }

  // With tau > 0, the selective rule's rescales of the last run() (per row and key tile after the first), as cpu.fa3.fp8
  // counts them.
  std::vector<Counter> counters() const override { return options_.tau == 0 ? std::vector<Counter>{} : rescale_counter(rescale_counter_.data()); }

  void run(Op op, const AttentionCall& c) override {
    require_block_k(c.shape.head_dim);
    validate_call(info_, op, c);
    const StorageType out = require_policy(c.policy);
    for (auto [t, what] : {std::pair{&c.q, "Q"}, std::pair{&c.k, "K"}, std::pair{&c.v, "V"}}) require_finite(*t, info_.name, what);
    const std::string& who = info_.name;
    const AttentionShape& sh = c.shape;
    DeviceInput q = to_device(c.q, who, "Q"), k = to_device(c.k, who, "K"), v = to_device(c.v, who, "V");
    Operands ops(sh, options_.block_k, v_in_kernel(), who);
    run_kernels(who, "preparing the operands", [&] { prepare(ops, sh, c.policy.format(Role::q), q.view, k.view, v.view, options_.scaled); });
    if (options_.scaled) check_scaled(ops, sh);
    const std::size_t rows = static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.seq_q;
    DeviceOutput o = device_output(c.out_o, who, "O");
    DeviceBuffer lse(rows * sizeof(float), who, "L");
    Fp8ForwardParams f = forward_params(ops, sh, c.mask, c.scale, out);
    f.p.o = o.view, f.p.lse = static_cast<float*>(lse.get());
    f.p.rounding = {c.policy.rounding == Rounding::stochastic, c.policy.seed}, f.p.o_stream = c.policy.stream(Role::o).stream;
    if (options_.tau > 0) f.p.rescale_count = reinterpret_cast<unsigned long long*>(rescale_counter_.cleared(nullptr, who));
    run_kernels(who, "forward", [&] {
      with_work_counter(f);
      fa3_fp8_forward(f, nullptr);
    });
    to_host(o, c.out_o, who, "O");
    if (!c.out_lse.empty()) {
      std::vector<float> l(rows);
      check_cuda(cudaMemcpy(l.data(), lse.get(), l.size() * sizeof(float), cudaMemcpyDeviceToHost), who, "copying back L");
      write_from(c.out_lse, std::span<const float>(l), Rounding::nearest_even);
    }
  }

  // The forward as run() does it on device-made inputs: e4m3 operands (from N(0, 1) bf16 values quantized with
  // block scales) time V's transpose pass (where V is not transposed in the kernel) and the forward; scaled bf16 or
  // fp16 operands also the quantization.
  std::optional<Timing> time(const TimingRequest& r) override {
    const std::string& who = info_.name;
    const PrecisionPolicy policy = PrecisionPolicy::uniform(r.format);
    require_block_k(r.shape.head_dim);
    validate_problem(info_, r.op, r.shape, r.mask, r.scale);
    validate_policy(info_, policy);
    if (r.format == Format::fp32) throw SubjectError(who + ": timed with e4m3, bf16 or fp16 operands");
    const StorageType out = require_policy(policy);
    const AttentionShape& sh = r.shape;
    const std::size_t nq = static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.seq_q * sh.head_dim;
    const std::size_t nk = static_cast<std::size_t>(sh.batch) * sh.heads_kv * sh.seq_k * sh.head_dim;
    const std::size_t rows = static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.seq_q;
    const StorageType wide = r.format == Format::fp16 ? StorageType::fp16 : StorageType::bf16;
    DeviceBuffer q(nq * 2, who, "Q"), k(nk * 2, who, "K"), v(nk * 2, who, "V"), o(nq * 2, who, "O"), lse(rows * 4, who, "L");
    run_kernels(who, "filling inputs", [&] {
      fill_normal(q.get(), nq, wide, r.seed, 1), fill_normal(k.get(), nk, wide, r.seed, 2), fill_normal(v.get(), nk, wide, r.seed, 3);
    });
    const auto contiguous = [&](const DeviceBuffer& b, int heads, int n) {
      return Strided{b.get(), static_cast<std::int64_t>(heads) * n * sh.head_dim, static_cast<std::int64_t>(n) * sh.head_dim, sh.head_dim};
    };
    const Format wide_format = wide == StorageType::fp16 ? Format::fp16 : Format::bf16;
    Operands ops(sh, options_.block_k, v_in_kernel(), who);
    const auto prepare_all = [&] {
      prepare(ops, sh, wide_format, contiguous(q, sh.heads_q, sh.seq_q), contiguous(k, sh.heads_kv, sh.seq_k), contiguous(v, sh.heads_kv, sh.seq_k), true);
    };
    run_kernels(who, "preparing the operands", prepare_all);  // (e4m3: the quantized inputs the timed runs read)
    Fp8ForwardParams f = forward_params(ops, sh, r.mask, r.scale, out);
    const Strided o_view = contiguous(o, sh.heads_q, sh.seq_q);
    f.p.o = StridedOut{o.get(), o_view.batch, o_view.head, o_view.row}, f.p.lse = static_cast<float*>(lse.get());
    Timing timing = time_runs(who, r.warmup, r.warmup_seconds, r.repeats, [&] {
      if (options_.scaled) {
        prepare_all();
      } else if (!ops.v_in_kernel) {
        transpose_v_e4m3(ops.v_view, sh.batch, sh.heads_kv, sh.seq_k, sh.head_dim, ops.vt.get(), nullptr);  // (prepare's e4m3 V)
      }
      with_work_counter(f);
      fa3_fp8_forward(f, nullptr);
    });
    timing.device_bytes = static_cast<double>(q.bytes() + k.bytes() + v.bytes() + o.bytes() + lse.bytes() + ops.bytes());
    return timing;
  }

 private:
  // The persistent scheduler's work counter, zeroed on the launch's stream (a memset, no wait) where the launcher runs it.
  void with_work_counter(Fp8ForwardParams& f) {
    f.p.work_counter = fa3_fp8_persistent(f) ? reinterpret_cast<int*>(work_counter_.cleared(nullptr, info_.name)) : nullptr;
  }

  // The device operands of one call: e4m3 Q, K, V (contiguous; operands=e4m3 reads the inputs in place and
  // leaves q, k, v unused), V^T (none where the kernel transposes V), the block exponents and the quantizer's
  // inexact-block flag.
  struct Operands {
    DeviceBuffer q, k, v, vt, q_exp, k_exp, v_exp, first_inexact;
    Strided q_view, k_view, v_view;
    bool v_in_kernel;
    Operands(const AttentionShape& sh, int block_k, bool v_in_kernel_, const std::string& who) : v_in_kernel(v_in_kernel_) {
      const std::size_t dq = static_cast<std::size_t>(sh.batch) * sh.heads_q, dk = static_cast<std::size_t>(sh.batch) * sh.heads_kv;
      if (!v_in_kernel) vt = DeviceBuffer(dk * sh.head_dim * fp8_vt_keys(sh.seq_k), who, "V^T");
      q_exp = DeviceBuffer(dq * blocks_of(sh.seq_q, kFp8BlockRows) * sizeof(int), who, "Q's block exponents");
      k_exp = DeviceBuffer(dk * blocks_of(sh.seq_k, block_k) * sizeof(int), who, "K's block exponents");
      v_exp = DeviceBuffer(dk * blocks_of(sh.seq_k, block_k) * sizeof(int), who, "V's block exponents");
      first_inexact = DeviceBuffer(3 * sizeof(unsigned), who, "the quantizer's flags");
    }
    std::size_t bytes() const { return q.bytes() + k.bytes() + v.bytes() + vt.bytes() + q_exp.bytes() + k_exp.bytes() + v_exp.bytes(); }
  };

  // Launches (no wait): e4m3 operands in place with zero exponents, or (quantize) wider ones quantized with
  // block exponents; then V^T, where the kernel does not transpose V.
  void prepare(Operands& ops, const AttentionShape& sh, Format format, const Strided& q, const Strided& k, const Strided& v, bool quantize) const {
    const std::string& who = info_.name;
    const int d = sh.head_dim;
    Strided v_e4m3 = v;
    if (!quantize) {
      ops.q_view = q, ops.k_view = k;
      for (const DeviceBuffer* b : {&ops.q_exp, &ops.k_exp, &ops.v_exp}) check_cuda(cudaMemsetAsync(b->get(), 0, b->bytes()), who, "zeroing block exponents");
    } else {
      const WideType type = format == Format::fp32 ? WideType::fp32 : format == Format::fp16 ? WideType::fp16 : WideType::bf16;
      const std::size_t nq = static_cast<std::size_t>(sh.batch) * sh.heads_q * sh.seq_q * d, nk = static_cast<std::size_t>(sh.batch) * sh.heads_kv * sh.seq_k * d;
      if (ops.q.bytes() != nq) ops.q = DeviceBuffer(nq, who, "e4m3 Q"), ops.k = DeviceBuffer(nk, who, "e4m3 K"), ops.v = DeviceBuffer(nk, who, "e4m3 V");
      // UINT_MAX in each flag (not a copy from a host array: from pageable memory the driver may synchronize inside
      // the timed run, which RunTimer then refuses)
      check_cuda(cudaMemsetAsync(ops.first_inexact.get(), 0xff, ops.first_inexact.bytes()), who, "the quantizer's flags");
      auto* flags = static_cast<unsigned*>(ops.first_inexact.get());
      quantize_e4m3_blocks(q, type, sh.batch, sh.heads_q, sh.seq_q, d, kFp8BlockRows, ops.q.get(), static_cast<int*>(ops.q_exp.get()), flags, nullptr);
      quantize_e4m3_blocks(k, type, sh.batch, sh.heads_kv, sh.seq_k, d, options_.block_k, ops.k.get(), static_cast<int*>(ops.k_exp.get()), flags + 1, nullptr);
      quantize_e4m3_blocks(v, type, sh.batch, sh.heads_kv, sh.seq_k, d, options_.block_k, ops.v.get(), static_cast<int*>(ops.v_exp.get()), flags + 2, nullptr);
      const auto contiguous = [&](const DeviceBuffer& b, int heads, int n) {
        return Strided{b.get(), static_cast<std::int64_t>(heads) * n * d, static_cast<std::int64_t>(n) * d, d};
      };
      ops.q_view = contiguous(ops.q, sh.heads_q, sh.seq_q), ops.k_view = contiguous(ops.k, sh.heads_kv, sh.seq_k);
      v_e4m3 = contiguous(ops.v, sh.heads_kv, sh.seq_k);
    }
    ops.v_view = v_e4m3;
    if (!ops.v_in_kernel) transpose_v_e4m3(v_e4m3, sh.batch, sh.heads_kv, sh.seq_k, d, ops.vt.get(), nullptr);
  }

  // operands=scaled: every value e4m3 times its block's scale (cpu.fa3.fp8's rule), and V's exponents of each
  // head within kMaxVExponentSpread.
  void check_scaled(const Operands& ops, const AttentionShape& sh) const {
    const std::string& who = info_.name;
    unsigned flags[3];
    check_cuda(cudaMemcpy(flags, ops.first_inexact.get(), sizeof flags, cudaMemcpyDeviceToHost), who, "reading the quantizer's flags");
    const char* names[3] = {"Q", "K", "V"};
    for (int t = 0; t < 3; ++t) {
      if (flags[t] == UINT_MAX) continue;
      const int block = t == 0 ? kFp8BlockRows : options_.block_k, blocks = blocks_of(t == 0 ? sh.seq_q : sh.seq_k, block), heads = t == 0 ? sh.heads_q : sh.heads_kv;
      const int head = static_cast<int>(flags[t] / blocks);  // (b H + h)
      std::ostringstream m;
      m << who << ": operands=scaled, but " << names[t] << " (batch " << head / heads << ", head " << head % heads << ", rows " << flags[t] % blocks * block
        << "..) holds a value that is not an e4m3 value times its block's power-of-two scale (the scale of the block's largest magnitude)";
      throw SubjectError(m.str());
    }
    const auto exponents = [&](const DeviceBuffer& b, std::size_t n, const char* what) {
      std::vector<int> e(n);
      check_cuda(cudaMemcpy(e.data(), b.get(), n * sizeof(int), cudaMemcpyDeviceToHost), who, std::string("reading ") + what + "'s block exponents");
      return e;
    };
    const int kb = blocks_of(sh.seq_k, options_.block_k);
    const std::vector<int> ev = exponents(ops.v_exp, static_cast<std::size_t>(sh.batch) * sh.heads_kv * kb, "V");
    for (std::size_t h = 0; h * kb < ev.size(); ++h) {
      const auto [lo, hi] = std::minmax_element(ev.begin() + h * kb, ev.begin() + (h + 1) * kb);
      if (*hi - *lo > kMaxVExponentSpread) {
        throw SubjectError(who + ": V's block scales of batch " + std::to_string(h / sh.heads_kv) + ", head " + std::to_string(h % sh.heads_kv) + " span 2^" +
                           std::to_string(*hi - *lo) + " (at most 2^" + std::to_string(kMaxVExponentSpread) + ": O is carried in the current block's scale)");
      }
    }
    const std::vector<int> eq = exponents(ops.q_exp, static_cast<std::size_t>(sh.batch) * sh.heads_q * blocks_of(sh.seq_q, kFp8BlockRows), "Q");
    const std::vector<int> ek = exponents(ops.k_exp, static_cast<std::size_t>(sh.batch) * sh.heads_kv * kb, "K");
    const int sum = *std::max_element(eq.begin(), eq.end()) + *std::max_element(ek.begin(), ek.end());
    if (sum > kMaxQkExponentSum) {
      throw SubjectError(who + ": Q's and K's block scales reach 2^" + std::to_string(sum) + " together (at most 2^" + std::to_string(kMaxQkExponentSum) +
                         ": they scale the softmax's scale, which must stay finite)");
    }
  }

  Fp8ForwardParams forward_params(const Operands& ops, const AttentionShape& sh, Mask mask, double scale, StorageType out) const {
    Fp8ForwardParams f;
    f.p.shape = shape_params(sh, mask, scale), f.p.type = out;
    f.p.q = ops.q_view, f.p.k = ops.k_view;
    f.vt = ops.vt.get(), f.v = ops.v_view;
    f.v_transpose = options_.v_transpose;
    f.q_exponents = static_cast<const int*>(ops.q_exp.get()), f.k_exponents = static_cast<const int*>(ops.k_exp.get());
    f.v_exponents = static_cast<const int*>(ops.v_exp.get());
    f.block_k = options_.block_k;
    f.p_operand = options_.p_operand;
    f.epilogue = options_.epilogue;
    f.turns = options_.turns;
    f.scheduler = options_.scheduler;
    f.p.rescale_threshold = options_.tau;  // (rescale_count: run() sets it; the timed runs count nothing)
    return f;
  }

  // Q, K, V in one format (e4m3, or with operands=scaled fp32, bf16 or fp16; validate_policy checked it is
  // declared), O in bf16 or fp16, L and the accumulation in fp32.
  StorageType require_policy(const PrecisionPolicy& policy) const {
    const Format t = policy.format(Role::q);
    if (policy.format(Role::k) != t || policy.format(Role::v) != t) {
      throw SubjectError(info_.name + ": Q, K and V in one format; policy " + policy.to_string() + " mixes them");
    }
    const Format o = policy.format(Role::o);
    if (o != Format::bf16 && o != Format::fp16) throw SubjectError(info_.name + ": stores O in bf16 or fp16, not " + std::string(name(o)));
    if (policy.format(Role::stats) != Format::fp32) throw SubjectError(info_.name + ": keeps statistics in fp32");
    return o == Format::fp16 ? StorageType::fp16 : StorageType::bf16;
  }

  // 224- and 256-key tiles at d = 128 only (fp8_key_tile_supported): S of 224 keys does not fit d = 64's three groups
  // of 160 registers, nor O of d = 256 beside S of two groups.
  void require_block_k(int head_dim) const {
    if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
      throw SubjectError(info_.name + ": head dim 64, 128 or 256 (got " + std::to_string(head_dim) + ")");
    }
    if (!fp8_key_tile_supported(options_.block_k, head_dim)) {
      throw SubjectError(info_.name + ": block_k=" + std::to_string(options_.block_k) + " at head dim 128 only (got " + std::to_string(head_dim) + ")");
    }
    if (options_.v_transpose == Fp8VTranspose::kernel && !fp8_v_in_kernel_supported(options_.block_k, head_dim)) {
      throw SubjectError(info_.name + ": v_transpose=kernel at head dim 64 or 128 only (got " + std::to_string(head_dim) +
                         "): the producer's transpose is written for V rows of at most 128 bytes");
    }
    if (options_.p_operand == Fp8POperand::shared && !fp8_p_shared_supported(options_.block_k, head_dim)) {
      throw SubjectError(info_.name + ": p_operand=shared with block_k=128 at head dim 128 or 256, or block_k=256 at head dim 128 only (got head dim " +
                         std::to_string(head_dim) + ", block_k=" + std::to_string(options_.block_k) + ")");
    }
    if (options_.turns == Fp8Turns::none && !turns_optional_at(head_dim)) {
      throw SubjectError(info_.name + ": turns=none with P in shared memory and block_k=128 (p_operand=shared at head dim 128 or 256, or auto at 128), or block_k=256 "
                         "with tau > 0, only (got head dim " + std::to_string(head_dim) + ", block_k=" + std::to_string(options_.block_k) + ", p_operand=" + p_operand_name() +
                         ", tau=" + tau_text() + ")");
    }
    if (options_.scheduler == Fp8Scheduler::persistent && !persistent_possible(head_dim)) {
      throw SubjectError(info_.name + ": scheduler=persistent runs the kernels with P in shared memory and V^T from the pass only (head dim 128, p_operand auto "
                         "or shared, v_transpose auto or pass; block_k=128 with turns auto or none, or block_k=256; got head dim " + std::to_string(head_dim) +
                         ", block_k=" + std::to_string(options_.block_k) + ", p_operand=" + p_operand_name() + ", turns=" + turns_name() + ", v_transpose=" +
                         v_transpose_name() + ")");
    }
  }

  // The launcher's rule for turns=none (fa3_fp8_forward: P in shared memory, fa3_fp8_p_from_shared, with 128-key tiles,
  // or 256-key tiles under the selective rule) for this subject's options at head_dim, where p_operand=shared is supported.
  bool turns_optional_at(int head_dim) const {
    Fp8ForwardParams f;
    f.p.shape.head_dim = head_dim, f.block_k = options_.block_k, f.p_operand = options_.p_operand;
    return fp8_p_shared_supported(options_.block_k, head_dim) && fa3_fp8_p_from_shared(f) && (options_.block_k == 128 || (options_.block_k == 256 && options_.tau > 0));
  }

  // The launcher's rule (fa3_fp8_selective_supported) for this subject's options at head_dim.
  bool selective_possible(int head_dim) const {
    Fp8ForwardParams f;
    f.p.shape.head_dim = head_dim, f.block_k = options_.block_k, f.p_operand = options_.p_operand;
    return fp8_key_tile_supported(options_.block_k, head_dim) && fa3_fp8_selective_supported(f);
  }

  std::string tau_text() const {
    std::ostringstream t;
    t << options_.tau;
    return t.str();
  }

  // The launcher's rule (fa3_fp8_persistent_supported) for this subject's options at head_dim.
  bool persistent_possible(int head_dim) const {
    Fp8ForwardParams f;
    f.p.shape.head_dim = head_dim, f.block_k = options_.block_k, f.p_operand = options_.p_operand, f.turns = options_.turns, f.v_transpose = options_.v_transpose;
    return fa3_fp8_persistent_supported(f);
  }

  void refresh_options() {
    info_.formats = options_.scaled ? std::vector<Format>{Format::fp32, Format::bf16, Format::fp16} : std::vector<Format>{Format::e4m3};
    info_.head_dims.clear();  // (the compiled head dims that take this block_k: fp8_key_tile_supported, the one list)
    for (int d : {64, 128, 256}) {
      if (fp8_key_tile_supported(options_.block_k, d) && (options_.p_operand != Fp8POperand::shared || fp8_p_shared_supported(options_.block_k, d)) &&
          (options_.turns != Fp8Turns::none || turns_optional_at(d)) &&
          (options_.scheduler != Fp8Scheduler::persistent || persistent_possible(d)) && (options_.v_transpose != Fp8VTranspose::kernel || fp8_v_in_kernel_supported(options_.block_k, d)) &&
          (options_.tau == 0 || selective_possible(d))) {
        info_.head_dims.push_back(d);
      }
    }
    info_.options = {{"operands", options_.scaled ? "scaled" : "e4m3",
                      "e4m3: e4m3 tensors; scaled: fp32, bf16 or fp16 tensors holding e4m3 values times a power-of-two scale per block (block_q rows of Q, "
                      "block_k of K and V)"},
                     {"block_q", std::to_string(kFp8BlockRows), "query rows per block scale (fixed: the kernels' tile)"},
                     {"block_k", std::to_string(options_.block_k), "keys per block scale and per key tile: 128, or at head dim 128 224 (FA3's FP8 tile there) or 256 (cuDNN's: "
                      "two groups taking turns at their exponentials; with P in shared memory each group's next S overlaps its softmax, with P in registers "
                      "nothing overlaps inside a group)"},
                     {"p_operand", p_operand_name(), "where P V reads P from: registers (two consumer warpgroups at d = 128 and 256), shared (a tile in shared memory; "
                      "block_k=128: three consumer warpgroups at d = 128, two at 256; block_k=256: two at d = 128), auto (shared at d = 128 with block_k=128 "
                      "or 256, measured faster there; registers elsewhere: at d = 256 shared measured level to 2 % slower)"},
                     {"epilogue", options_.epilogue == Fa3Epilogue::stores ? "stores" : "automatic",
                      "automatic: O through shared memory (the group's Q and P tiles) and one TMA store per 64-column box where P is in shared "
                      "memory (at d = 128), O is rounded to nearest and TMA can write it, 4-byte global stores otherwise; stores: always the latter. The same bits"},
                     {"turns", turns_name(), "whether the consumer groups take turns to issue their products: ring (FA3's ping-pong; with block_k=256 the two "
                      "groups take turns at their exponentials instead, cuDNN's order), none (each group issues as soon as its own P is ready; P in shared "
                      "memory with block_k=128, or block_k=256 with tau > 0, only), auto (none where P is in shared memory with block_k=128, ring elsewhere). The same bits"},
                     {"v_transpose", v_transpose_name(), "where V is transposed for P V (FP8 products read V^T): kernel (the forward's producer warpgroup, "
                      "tile by tile in shared memory, FA3's ldmatrix.trans and stmatrix; block_k=128 at d = 64 and 128 only; no V^T buffer, but the kernel alone measured 2-7 % "
                      "slower than the pass and the kernel together at N = 4k-16k), pass (a kernel over V before the "
                      "forward, into a V^T buffer), auto (the pass). The same bits"},
                     {"scheduler", scheduler_name(),
                      "grid: one CTA per query tile; persistent: one CTA per SM walking the tiles longest first (the kernels with P in shared memory and "
                      "v_transpose pass only, at d = 128: block_k=128 without turns, or block_k=256); auto: persistent under a causal mask where the "
                      "128-key kernel runs and under every mask with block_k=256, else grid. The same bits"},
                     {"tau", tau_text(), "0: FA3's rule (every key tile's row max taken); > 0 (at most 8: P runs up to 2^tau, rounded to e4m3): FA4's selective "
                      "rescaling, the running max raised only when a tile's max exceeds it by tau, rescales counted; with block_k=256 and p_operand auto or "
                      "shared at head dim 128 only, where unmasked tiles after the first take their exponentials before any row max (cpu.fa3.fp8's tau)"}};
  }

  // The launcher's rule (fa3_fp8_transposes_v_in_kernel) for this subject's options.
  bool v_in_kernel() const {
    Fp8ForwardParams f;
    f.block_k = options_.block_k, f.v_transpose = options_.v_transpose;
    return fa3_fp8_transposes_v_in_kernel(f);
  }

  std::string v_in_kernel_with_wide_tile(const std::string& block_k) const {
    return info_.name + ": v_transpose=kernel with block_k=" + block_k + ": the kernel transposes V's tiles of 128 keys only";
  }

  const char* v_transpose_name() const {
    switch (options_.v_transpose) {
      case Fp8VTranspose::pass: return "pass";
      case Fp8VTranspose::kernel: return "kernel";
      case Fp8VTranspose::automatic: break;
    }
    return "auto";
  }

  // (refused whichever option comes second: no head dim would take the pair)
  std::string p_shared_with_wide_tile(const std::string& block_k) const {
    return info_.name + ": p_operand=shared with block_k=" + block_k + ": P from shared memory takes key tiles of 128 or 256 (the 224-key kernel's two groups "
           "hold P in registers)";
  }

  const char* p_operand_name() const { return fp8_p_operand_name(options_.p_operand); }

  const char* scheduler_name() const {
    switch (options_.scheduler) {
      case Fp8Scheduler::grid: return "grid";
      case Fp8Scheduler::persistent: return "persistent";
      case Fp8Scheduler::automatic: break;
    }
    return "auto";
  }

  const char* turns_name() const {
    switch (options_.turns) {
      case Fp8Turns::ring: return "ring";
      case Fp8Turns::none: return "none";
      case Fp8Turns::automatic: break;
    }
    return "auto";
  }

  // The subject's options (set_option restores them whole when it refuses a value).
  struct Fp8Options {
    bool scaled = false;
    Fp8Turns turns = Fp8Turns::automatic;
    Fp8VTranspose v_transpose = Fp8VTranspose::automatic;
    Fa3Epilogue epilogue = Fa3Epilogue::automatic;
    int block_k = kFp8BlockRows;
    Fp8POperand p_operand = Fp8POperand::automatic;
    Fp8Scheduler scheduler = Fp8Scheduler::automatic;
    float tau = 0;  // (0: FA3's rule)
  };

  SubjectInfo info_;
  Fp8Options options_;
  ZeroedDeviceWords work_counter_{sizeof(int)};  // (the persistent scheduler's)
  ZeroedDeviceWords rescale_counter_{sizeof(unsigned long long)};  // (tau > 0: the selective rule's rescales, run() only)
};

}  // namespace

std::unique_ptr<Subject> make_cuda_fa3_fp8() { return std::make_unique<CudaFa3Fp8>(); }

}  // namespace fc::kernels::cuda
