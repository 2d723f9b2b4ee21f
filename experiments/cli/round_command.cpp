// `flashcheck round VALUE --to FORMAT [--mode rn|rz|sr]`: what one rounding does to one value, with
// its neighbours, its error in ULPs and units of u, and for SR the random word and the probability
// of rounding up. A calculator for reasoning about a kernel's numerics by hand.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "experiments/cli/commands.hpp"
#include "precision/format.hpp"
#include "precision/fp8.hpp"
#include "precision/half.hpp"
#include "precision/philox.hpp"
#include "precision/rounding.hpp"

namespace fc::cli {
namespace {

struct RoundRequest {
  std::string value_text;
  std::string to = "bf16";
  std::string from = "fp64";
  std::string mode = "rn";
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;
  std::uint64_t index = 0;
};

double parse_value(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    throw std::invalid_argument("'" + text + "' is not a number (decimal, hex float like 0x1.8p-3, inf or nan)");
  }
  return v;
}

template <class T>
std::string hex_bits(T x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", static_cast<int>(2 * sizeof(T)),
                static_cast<unsigned long long>(raw_bits(x)));
  return buf;
}

template <class To, class From>
void report(From x, Format to, Rounding mode, std::uint32_t word, const RoundRequest& req) {
  const double exact = to_double(x);
  std::printf("input       %.17g = %a (%s)\n", exact, exact, req.from.c_str());
  const To result = round_to<To>(x, mode, word);
  const double value = to_double(result);
  if (std::isfinite(exact)) {
    // The neighbours lo <= |x| <= hi: truncation gives lo; the next encoding up is hi.
    const To lo = round_to<To>(x, Rounding::toward_zero);
    const To hi = from_raw_bits<To>(static_cast<typename Encoding<To>::Bits>(raw_bits(lo) + 1));  // (e4m3 past 448: its NaN)
    if (to_double(lo) == exact) {
      std::printf("exact       representable in %s as %s\n", std::string(name(to)).c_str(), hex_bits(lo).c_str());
    } else {
      const double lo_v = to_double(lo), hi_v = to_double(hi);
      if (std::isnan(hi_v)) {  // (e4m3 past 448: no encoding above, conversions saturate)
        std::printf("neighbours  %.17g (%s), the largest finite value: %s saturates there\n", lo_v, hex_bits(lo).c_str(),
                    std::string(name(to)).c_str());
      } else {
        std::printf("neighbours  %.17g (%s) and %.17g (%s)\n", lo_v, hex_bits(lo).c_str(), hi_v, hex_bits(hi).c_str());
      }
      if (mode == Rounding::stochastic && std::isfinite(hi_v)) {
        std::printf("P(away)     %.9g  (word 0x%08x from Philox seed %llu, stream %u, element %llu)\n",
                    (std::fabs(exact) - std::fabs(lo_v)) / (std::fabs(hi_v) - std::fabs(lo_v)), word,
                    static_cast<unsigned long long>(req.seed), req.stream,
                    static_cast<unsigned long long>(req.index));
      }
    }
  }
  std::printf("result      %.17g = %s (%s, %s)\n", value, hex_bits(result).c_str(),
              std::string(name(to)).c_str(), std::string(name(mode)).c_str());
  if (std::isfinite(exact) && std::isfinite(value)) {
    const double err = value - exact;
    const double u = unit_roundoff(to);
    std::printf("error       %+.6g absolute, %.6g ulp of %s, relative %.6g = %.4g u (u = 2^-%d)\n", err,
                std::fabs(err) / ulp(to, exact), std::string(name(to)).c_str(),
                exact != 0 ? std::fabs(err / exact) : 0.0, exact != 0 ? std::fabs(err / exact) / u : 0.0,
                format_info(to).precision);
  } else if (std::isfinite(exact)) {
    std::printf("error       overflow: %s's largest finite value is %.17g\n", std::string(name(to)).c_str(),
                format_info(to).max_finite());
  }
}

void run(const RoundRequest& req) {
  const auto to = parse_format(req.to);
  const auto from = parse_format(req.from);
  const auto mode = parse_rounding(req.mode);
  if (!to) throw std::invalid_argument("--to: unknown format '" + req.to + "'");
  if (!from || (*from != Format::fp64 && *from != Format::fp32)) {
    throw std::invalid_argument("--from: must be fp64 or fp32, got '" + req.from + "'");
  }
  if (!mode) throw std::invalid_argument("--mode: unknown rounding '" + req.mode + "' (rn, rz or sr)");
  if (format_info(*to).precision >= format_info(*from).precision) {
    throw std::invalid_argument("--to " + req.to + " is not narrower than --from " + req.from +
                                ": nothing to round");
  }
  const double value = parse_value(req.value_text);
  const std::uint32_t word = RandomStream{req.seed, req.stream}.word(req.index);
  if (*from == Format::fp32) {
    const float x = static_cast<float>(value);  // the C++ conversion: round to nearest even
    if (*to == Format::bf16) return report<bf16>(x, *to, *mode, word, req);
    if (*to == Format::e4m3) return report<e4m3>(x, *to, *mode, word, req);
    return report<fp16>(x, *to, *mode, word, req);
  }
  if (*to == Format::e4m3) return report<e4m3>(value, *to, *mode, word, req);
  if (*to == Format::bf16) return report<bf16>(value, *to, *mode, word, req);
  if (*to == Format::fp16) return report<fp16>(value, *to, *mode, word, req);
  return report<float>(value, *to, *mode, word, req);
}

}  // namespace

void add_round_command(CLI::App& app) {
  auto req = std::make_shared<RoundRequest>();
  CLI::App* cmd = app.add_subcommand("round", "Round one value to a narrower format and show the error");
  cmd->add_option("value", req->value_text, "The value (decimal, hex float, inf, nan)")->required();
  cmd->add_option("--to", req->to, "Target format: bf16, fp16, fp32")->capture_default_str();
  cmd->add_option("--from", req->from, "Source format the value is first held in: fp64, fp32")
      ->capture_default_str();
  cmd->add_option("--mode", req->mode, "Rounding: rn (nearest even), rz (toward zero), sr (stochastic)")
      ->capture_default_str();
  cmd->add_option("--seed", req->seed, "SR: Philox seed")->capture_default_str();
  cmd->add_option("--stream", req->stream, "SR: tensor stream id")->capture_default_str();
  cmd->add_option("--index", req->index, "SR: element index within the tensor")->capture_default_str();
  cmd->callback([req] { run(*req); });
}

}  // namespace fc::cli
