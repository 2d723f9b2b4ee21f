// `flashcheck bench`: attention throughput on the GPU, our kernels and PyTorch's SDPA backends in one
// run. For each head dim d, sequence length N (= Nq = Nk), mask and format: batch x heads sized to fill
// the GPU (B = tokens / N, H = head_chars / d, as the FlashAttention papers do), inputs N(0, 1) made on
// the device, `--preheat` seconds of untimed load before the first point, `--warmup` untimed runs and more until
// `--warmup-seconds` have passed (by default enough to reach the clocks of sustained load, so that the order of the
// subjects does not bias them), then
// `--repeats` runs timed with device events around each run, the stream held until the run is enqueued so that the
// host's launch work stays out (kernels/cuda/run_timer.hpp); their median is a round's time. `--rounds` rounds a point
// (the subjects in turn, the order reversed every other round); a subject's time is the median of its rounds'.
// TFLOP/s from EQUATIONS.md's counts: forward 4 N^2 d B H, backward 10 N^2 d B H (2.5x), fwd+bwd 14,
// halved for causal. fwd+bwd is the sum of the fwd and bwd medians. Records: DIR/bench.jsonl
// (experiment "bench"), drawn by the report. Last, the side-by-side table: every subject against --baseline
// (default torch.sdpa.cudnn) measured in the same run. Each point's line also gives, per op, the medians of the SM clock
// and of the GPU power read as each timed run started, and the clock-limit reasons seen (kernels/cuda/device_monitor.hpp
// says what a reading means), where they can be read.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "experiments/bench_table.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/experiment_options.hpp"
#include "experiments/cli/registry_options.hpp"
#include "experiments/records.hpp"

namespace fc::cli {
namespace {

struct Request {
  std::vector<std::string> subjects, plugins, options;
  std::vector<int> head_dims{64, 128}, lengths{1024, 4096, 16384};
  std::vector<std::string> masks{"none", "causal"}, dtypes{"bf16"};
  int tokens = 16384, head_chars = 2048, warmup = 200, repeats = 20, rounds = 3;
  double preheat_s = 10, warmup_s = 0.5;
  std::string baseline = "torch.sdpa.cudnn";  // the side-by-side table's reference subject
  std::uint64_t seed = 1;
  std::string out;
  bool overwrite = false;
};

using experiments::bench_median;

using Point = experiments::BenchPoint;

// Runs the first subject that can time the first point, fwd and bwd in turn, for `seconds` before anything is measured,
// and discards the times; says which subject ran and for how long, or why none could. A GPU that was idle does not
// settle at once under this load: on the H200 the first point of a process, measured with only its own 200 warm-up
// runs, ran steady for 9-13 runs and then slowed in steps by up to 20 % (the 4k backward, 2.92 -> 3.07 -> 3.52 ms),
// while the same point timed a few seconds later, or after 2000 warm-up runs (8 s of load), ran steady throughout
// (kernels/cuda/NOTES.md, "The bench's clock"). A subject that cannot time the point is passed over; its error is
// reported again when the point is measured. Returns the seconds of preheat run.
double preheat(const std::vector<kernels::Subject*>& subjects, kernels::TimingRequest r, double seconds) {
  if (seconds <= 0) return 0;
  const auto start = std::chrono::steady_clock::now();
  const auto since = [](std::chrono::steady_clock::time_point t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); };
  const auto elapsed = [&] { return since(start); };
  r.warmup = 1, r.warmup_seconds = 0, r.repeats = 100;  // (fewer calls, each of which allocates and fills its buffers)
  std::string skipped;
  for (kernels::Subject* s : subjects) {
    if (!s->info().supports(r.format) || !(s->info().supports(kernels::Op::fwd) || s->info().supports(kernels::Op::bwd))) continue;
    const auto subject_start = std::chrono::steady_clock::now();
    try {
      while (elapsed() < seconds) {
        for (kernels::Op op : {kernels::Op::fwd, kernels::Op::bwd}) {
          if (!s->info().supports(op)) continue;
          r.op = op;
          if (!s->time(r)) throw std::runtime_error("cannot be timed on a device");
        }
      }
      const double ran = since(subject_start);
      std::printf("preheat: %.1f s of %s on the first point%s\n", ran, s->info().name.c_str(), skipped.c_str());
      return ran;
    } catch (const std::exception& e) {
      skipped += std::string("; passed over ") + s->info().name + ": " + e.what();
    }
  }
  std::printf("preheat: none (no subject could time the first point%s)\n", skipped.c_str());
  return 0;
}

int run(const Request& req) {
  const gradcheck::Registry registry = make_registry(req.plugins);
  std::vector<kernels::Subject*> subjects;
  if (req.subjects.empty()) {
    for (kernels::Subject* s : registry.subjects()) {
      const std::string& n = s->info().name;
      // (cuda.hog* run cuda.fa2's forward and backward: they would repeat its column)
      if (n.rfind("cuda.hog", 0) == 0) continue;
      if (n.rfind("cuda.", 0) == 0 || n.rfind("torch.sdpa.", 0) == 0) subjects.push_back(s);
    }
  } else {
    for (const std::string& n : req.subjects) {
      kernels::Subject* s = registry.find(n);
      if (!s) throw std::invalid_argument("--subjects: no subject '" + n + "' (flashcheck list)");
      subjects.push_back(s);
    }
  }
  for (const std::string& o : req.options) {  // NAME=VALUE, for every timed subject that declares NAME
    const std::size_t eq = o.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--option: NAME=VALUE, got '" + o + "'");
    for (kernels::Subject* s : subjects) {
      for (const kernels::SubjectOption& declared : s->info().options) {
        if (declared.name == o.substr(0, eq)) s->set_option(declared.name, o.substr(eq + 1));
      }
    }
  }
  if (subjects.empty()) {
    throw std::invalid_argument("bench: no GPU subject to time (cuda.* need a CUDA device; torch.sdpa.* libtorch >= 2 with CUDA)");
  }
  ExperimentRequest out_request;
  out_request.out = req.out;
  const std::string dir = out_request.out_dir("bench");
  std::filesystem::create_directories(dir);
  experiments::RecordWriter writer(dir + "/bench.jsonl", req.overwrite);
  std::printf("flashcheck bench: %zu subjects, %d round(s) of %d warm-up runs (and %g s at least) + %d timed runs each (the median of the rounds' medians), B = %d / N, H = %d / d -> %s\n",
              subjects.size(), req.rounds, req.warmup, req.warmup_s, req.repeats, req.tokens, req.head_chars, dir.c_str());

  // table rows: (dtype, d, mask, N) -> subject -> point
  std::map<std::string, std::map<std::string, Point>> table;
  std::vector<std::string> row_order;
  double preheated_s = 0;
  bool timed_any = false;  // (none: every subject failed at every point, e.g. only CPU subjects asked for)
  std::map<std::string, std::string> reference_rows;  // row -> the row whose baseline it is read against, where its own has none
  std::string unread_state;     // why an op's clock or power was not read (the first such op's reason)
  bool any_state_read = false;  // (some op's clock or power was read)
  // The reference format: bf16 if the run has it (as --dtype spells it), else fp16, else none.
  std::string reference_dtype;
  for (const Format wanted : {Format::bf16, Format::fp16}) {
    for (const std::string& dtype : req.dtypes) {
      if (reference_dtype.empty() && parse_format(dtype) == wanted) reference_dtype = dtype;
    }
  }
  for (const std::string& dtype : req.dtypes) {
    const std::optional<Format> parsed = parse_format(dtype);
    if (!parsed) throw std::invalid_argument("--dtype: unknown format '" + dtype + "'");
    const Format format = *parsed;
    for (int d : req.head_dims) {
      for (const std::string& mask_text : req.masks) {
        if (mask_text != "none" && mask_text != "causal") throw std::invalid_argument("--mask: none or causal, got " + mask_text);
        const kernels::Mask mask = mask_text == "none" ? kernels::Mask::none : kernels::Mask::causal_top_left;
        for (int n : req.lengths) {
          kernels::TimingRequest r;
          r.shape.batch = std::max(1, req.tokens / n), r.shape.heads_q = r.shape.heads_kv = std::max(1, req.head_chars / d);
          r.shape.seq_q = r.shape.seq_k = n, r.shape.head_dim = r.shape.head_dim_v = d;
          r.mask = mask, r.scale = 1 / std::sqrt(static_cast<double>(d)), r.format = format;
          r.warmup = req.warmup, r.warmup_seconds = req.warmup_s, r.repeats = req.repeats, r.seed = req.seed;
          if (row_order.empty()) preheated_s = preheat(subjects, r, req.preheat_s);
          const auto row_key = [&](const std::string& row_dtype) {
            std::ostringstream text;
            text << row_dtype << " d=" << d << " " << mask_text << " N=" << n << " (B=" << r.shape.batch << " H=" << r.shape.heads_q << ")";
            return text.str();
          };
          std::ostringstream key;
          key << row_key(dtype);
          row_order.push_back(key.str());
          // (a format the baseline does not run, e4m3 against cuDNN, is read against its time in the reference format)
          if (!reference_dtype.empty() && dtype != reference_dtype) reference_rows[key.str()] = row_key(reference_dtype);
          const double flops_fwd = 4.0 * n * static_cast<double>(n) * d * r.shape.batch * r.shape.heads_q * (mask_text == "none" ? 1 : 0.5);
          // --rounds: the subjects in turn, each with its warm-up, the order reversed every other round, so that a drift of
          // the clocks over a point's runs weighs on every subject alike; a subject's time is the median of its rounds'
          // medians.
          std::vector<kernels::Subject*> timed;
          for (kernels::Subject* s : subjects) {
            if (s->info().supports(format)) timed.push_back(s);  // (cuda.fa3.fp8 in bf16, cuda.fa3 in e4m3: not an error, not a row)
          }
          struct OpRuns {
            std::vector<double> round_medians;  // ms, one per round
            double lo = INFINITY, hi = -INFINITY, device_bytes = 0;
            experiments::BenchDeviceState state;  // the SM clock, power and clock limits over the rounds
          };
          std::map<std::string, std::map<kernels::Op, OpRuns>> runs;  // subject -> op -> its rounds
          for (int round = 0; round < req.rounds; ++round) {
            for (std::size_t i : experiments::bench_round_order(timed.size(), round)) {
              kernels::Subject* s = timed[i];
              Point& pt = table[key.str()][s->info().name];
              if (!pt.error.empty()) continue;
              for (kernels::Op op : {kernels::Op::fwd, kernels::Op::bwd}) {
                if (!s->info().supports(op)) continue;
                r.op = op;
                std::optional<kernels::Timing> t;
                try {
                  t = s->time(r);
                } catch (const std::exception& e) {
                  pt.error = e.what();
                  break;
                }
                if (!t) {
                  pt.error = "cannot be timed on a device";
                  break;
                }
                OpRuns& o = runs[s->info().name][op];
                o.round_medians.push_back(bench_median(t->milliseconds));
                timed_any = true;
                const auto [lo, hi] = std::minmax_element(t->milliseconds.begin(), t->milliseconds.end());
                o.lo = std::min(o.lo, *lo), o.hi = std::max(o.hi, *hi), o.device_bytes = t->device_bytes;
                o.state.add_round(t->sm_clock_mhz, t->power_w, t->clock_limits, t->device_state_note);
              }
            }
          }
          for (kernels::Subject* s : timed) {
            Point& pt = table[key.str()][s->info().name];
            std::string spread;  // (more than one round: each op's range of round medians, in TFLOP/s)
            std::string state;   // each op's SM clock, power and clock limits, where read
            for (kernels::Op op : {kernels::Op::fwd, kernels::Op::bwd}) {
              // (a subject that failed keeps the ops it had timed, in the rounds before the failure, as one timed once did)
              const auto found = runs[s->info().name].find(op);
              if (found == runs[s->info().name].end()) continue;
              const OpRuns& o = found->second;
              const double ms = bench_median(o.round_medians);
              if (const std::string text = o.state.text(); !text.empty()) {
                state += (state.empty() ? "" : "; ") + std::string(kernels::name(op)) + " at " + text;
                any_state_read = true;
              }
              if (unread_state.empty()) unread_state = o.state.note;
              (op == kernels::Op::fwd ? pt.fwd_ms : pt.bwd_ms) = ms;
              const double flops = flops_fwd * (op == kernels::Op::fwd ? 1.0 : 2.5);
              const double tflops = flops / (ms * 1e-3) / 1e12;
              const auto [fastest, slowest] = std::minmax_element(o.round_medians.begin(), o.round_medians.end());
              if (o.round_medians.size() > 1) {
                char text[64];
                std::snprintf(text, sizeof text, " %s %.1f-%.1f", std::string(kernels::name(op)).c_str(), flops / (*slowest * 1e-3) / 1e12, flops / (*fastest * 1e-3) / 1e12);
                spread += text;
              }
              nlohmann::json j = experiments::record_header("experiment", experiments::device_of(s->info()));
              j["experiment"] = "bench";
              j["subject"] = s->info().name;
              for (const kernels::SubjectOption& declared : s->info().options) j["options"][declared.name] = declared.value;
              j["op"] = std::string(kernels::name(op));
              j["dtype"] = dtype;
              j["policy"] = dtype;
              j["mask"] = mask_text == "none" ? "none" : "causal_tl";
              j["shape"] = {{"B", r.shape.batch}, {"Hq", r.shape.heads_q}, {"Hkv", r.shape.heads_kv}, {"Nq", n}, {"Nk", n}, {"d", d}, {"dv", d}};
              j["x"] = {{"name", "N"}, {"value", n}};
              char warmup_seconds_text[32];
              std::snprintf(warmup_seconds_text, sizeof warmup_seconds_text, "%g", req.warmup_s);
              j["method"] = "device events around each run, the stream held until it is enqueued; the median over " + std::to_string(o.round_medians.size()) +
                            " round(s) (the subjects in turn, the order reversed every other round) of each round's median of " + std::to_string(req.repeats) +
                            " after " + std::to_string(std::max(1, req.warmup)) + " warm-up runs or more, " + warmup_seconds_text + " s of them at least; " + std::to_string(static_cast<int>(std::lround(preheated_s))) +
                            " s of preheat before the first point";
              nlohmann::json rounds = nlohmann::json::array();
              for (double m : o.round_medians) rounds.push_back(experiments::number(m));
              j["metrics"] = {{"median_ms", experiments::number(ms)}, {"min_ms", experiments::number(o.lo)}, {"max_ms", experiments::number(o.hi)},
                              {"round_medians_ms", rounds}, {"flops", flops}, {"tflops", experiments::number(tflops)},
                              {"device_bytes", o.device_bytes}};
              // (the device's state over the rounds' timed runs, medians: kernels/cuda/device_monitor.hpp; the report
              // divides TFLOP/s by the clock for the work a clock does, apart from the clock the power limit leaves)
              j["metrics"]["sm_clock_mhz"] = experiments::number(o.state.sm_clock_mhz());
              j["metrics"]["power_w"] = experiments::number(o.state.power_w());
              nlohmann::json round_clocks = nlohmann::json::array(), round_powers = nlohmann::json::array();
              for (double c : o.state.round_clocks_mhz) round_clocks.push_back(experiments::number(c));
              for (double w : o.state.round_powers_w) round_powers.push_back(experiments::number(w));
              j["metrics"]["round_sm_clock_mhz"] = round_clocks;  // (beside round_medians_ms, round by round)
              j["metrics"]["round_power_w"] = round_powers;
              j["clock_limits"] = o.state.limits;
              if (!o.state.note.empty()) j["device_state_note"] = o.state.note;
              j["verdict"] = "measured";
              writer.write(j);
            }
            if (!pt.error.empty()) {
              nlohmann::json j = experiments::record_header("experiment", experiments::device_of(s->info()));
              j["experiment"] = "bench", j["subject"] = s->info().name, j["item"] = key.str(), j["verdict"] = "error", j["error"] = pt.error;
              writer.write(j);
            }
            // (an op the subject does not declare was not timed: "-")
            const auto tf = [&](double ms, double factor) {
              char text[16] = "      -";
              if (!std::isnan(ms)) std::snprintf(text, sizeof text, "%7.1f", flops_fwd * factor / (ms * 1e-3) / 1e12);
              return std::string(text);
            };
            std::printf("  %-40s %-22s fwd %s  bwd %s  fwd+bwd %s TFLOP/s%s%s%s%s%s%s\n", key.str().c_str(), s->info().name.c_str(),
                        tf(pt.fwd_ms, 1).c_str(), tf(pt.bwd_ms, 2.5).c_str(), tf(pt.fwd_ms + pt.bwd_ms, 3.5).c_str(),
                        spread.empty() ? "" : "  (rounds:", spread.empty() ? "" : (spread + ")").c_str(),
                        state.empty() ? "" : "  [", state.empty() ? "" : (state + "]").c_str(),
                        pt.error.empty() ? "" : "  error: ", pt.error.c_str());
            std::fflush(stdout);
          }
        }
      }
    }
  }
  // The side-by-side table (experiments/bench_table.hpp) against the baseline measured in this run.
  std::vector<std::string> names;
  for (kernels::Subject* s : subjects) names.push_back(s->info().name);
  std::fputs(experiments::bench_side_by_side(row_order, table, names, req.baseline, dir + "/bench.jsonl", reference_rows,
                                             "the " + reference_dtype + " row of the same shape").c_str(), stdout);
  if (!unread_state.empty()) std::printf("clocks and power: %s (%s)\n", any_state_read ? "some readings missing" : "not read", unread_state.c_str());
  if (!timed_any) throw std::runtime_error("bench: nothing was timed: every subject failed at every point (each line above gives its error)");
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto req = std::make_shared<Request>();
  CLI::App* cmd = app.add_subcommand("bench", "GPU throughput of our kernels and PyTorch's SDPA backends in one run (TFLOP/s, medians)");
  cmd->add_option("--subjects", req->subjects, "Subjects to time (default: every cuda.* but cuda.hog*, and torch.sdpa.*)")->delimiter(',');
  cmd->add_option("--d", req->head_dims, "Head dims")->delimiter(',')->capture_default_str();
  cmd->add_option("--n", req->lengths, "Sequence lengths N = Nq = Nk")->delimiter(',')->capture_default_str();
  cmd->add_option("--mask", req->masks, "none, causal (top-left; the same as bottom-right for Nq = Nk)")->delimiter(',')->capture_default_str();
  cmd->add_option("--dtype", req->dtypes, "Storage formats")->delimiter(',')->capture_default_str();
  cmd->add_option("--tokens", req->tokens, "B x N: batch = tokens / N")->capture_default_str()->check(at_least(1));
  cmd->add_option("--head-chars", req->head_chars, "H x d: heads = head-chars / d")->capture_default_str()->check(at_least(1));
  cmd->add_option("--warmup", req->warmup,
                  "Untimed runs first (at least 1 is run: a kernel's first launch loads its module). The default runs each "
                  "subject into the clocks of sustained load: on an H200, with 5 a subject timed first ran up to 9 % faster "
                  "than when timed after the others; with 200, the two orders' ratios agreed within 5 % (kernels/cuda/NOTES.md)")->capture_default_str()->check(at_least(0));
  cmd->add_option("--warmup-seconds", req->warmup_s,
                  "Warm-up runs go on past --warmup until this many seconds of them have run: the power controller settles on a "
                  "scale of time, not of runs. On an H200, after 200 warm-up runs (0.1 s) of a 0.5 ms forward its rounds spread by "
                  "15-18 %, after 1000 (0.5 s) by 1-1.5 % (kernels/cuda/NOTES.md, \"A warm-up in seconds\")")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--preheat", req->preheat_s,
                  "Seconds of untimed load before the first point (the first subject that can time it). On an H200 the first "
                  "point of a run, after only its own warm-up, slowed by 4-20 % in steps halfway through its timed runs; "
                  "points timed after a few seconds of load did not (kernels/cuda/NOTES.md)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--repeats", req->repeats, "Timed runs a round (their median is the round's time)")->capture_default_str()->check(at_least(1));
  cmd->add_option("--rounds", req->rounds,
                  "Rounds per point: the subjects timed in turn, each with its warm-up, the order reversed every other round; a "
                  "subject's time is the median of its rounds' medians, and each line shows their range (one process on an H200 "
                  "read cuda.fa3's 8k forward 5 % below another's: kernels/cuda/NOTES.md)")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--seed", req->seed, "Seed of the inputs")->capture_default_str();
  cmd->add_option("--out", req->out, "Output directory (default reports/out/bench-<UTC time>)");
  cmd->add_flag("--overwrite", req->overwrite, "Replace an existing bench.jsonl in --out");
  cmd->add_option("--baseline", req->baseline, "The subject the side-by-side table divides by (its speed = 1.00x)")->capture_default_str();
  cmd->add_option("--option", req->options, "NAME=VALUE: set a subject option (flashcheck list) on every timed subject that has it");
  add_plugin_option(cmd, req->plugins);
  cmd->callback([req] { run(*req); });
}

}  // namespace fc::cli
