#include "precision/policy.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <stdexcept>
#include <vector>

namespace fc {

std::string_view name(Role r) {
  switch (r) {
    case Role::q: return "q";
    case Role::k: return "k";
    case Role::v: return "v";
    case Role::o: return "o";
    case Role::dout: return "do";
    case Role::grad: return "grad";
    case Role::stats: return "stats";
  }
  return "?";
}

PrecisionPolicy PrecisionPolicy::uniform(Format storage) {
  PrecisionPolicy p;
  p.storage.fill(storage);
  if (storage == Format::e4m3) {  // FP8 is an operand format: the outputs and gradients are 16-bit
    for (Role r : {Role::o, Role::dout, Role::grad}) p.set(r, Format::bf16);
  }
  const Format wide = storage == Format::fp64 ? Format::fp64 : Format::fp32;
  p.set(Role::stats, wide);
  p.accumulate = wide;
  return p;
}

namespace {

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

[[noreturn]] void fail(std::string_view text, std::string_view why) {
  throw std::invalid_argument("precision policy '" + std::string(text) + "': " + std::string(why));
}

Format format_or_fail(std::string_view text, std::string_view token) {
  if (auto f = parse_format(token)) return *f;
  fail(text, "unknown format '" + std::string(token) + "' (expected fp64, fp32, fp16 or bf16)");
}

std::optional<Role> parse_role(std::string_view key) {
  for (Role r : kAllRoles) {
    if (name(r) == key) return r;
  }
  return std::nullopt;
}

}  // namespace

PrecisionPolicy PrecisionPolicy::parse(std::string_view text) {
  if (text.empty()) fail(text, "empty");
  const auto tokens = split(text, ',');
  std::size_t first = 0;
  PrecisionPolicy p = uniform(Format::fp32);
  if (tokens[0].find('=') == std::string_view::npos) {
    p = uniform(format_or_fail(text, tokens[0]));
    first = 1;
  }
  bool seed_given = false;
  std::vector<std::string> keys_seen;
  for (std::size_t i = first; i < tokens.size(); ++i) {
    const std::string_view token = tokens[i];
    const std::size_t eq = token.find('=');
    if (eq == std::string_view::npos) {
      fail(text, "'" + std::string(token) + "' is not key=value (only the first item may be a bare format)");
    }
    std::string key_text(token.substr(0, eq));
    std::transform(key_text.begin(), key_text.end(), key_text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (std::find(keys_seen.begin(), keys_seen.end(), key_text) != keys_seen.end()) {
      fail(text, "key '" + key_text + "' is given twice");
    }
    keys_seen.push_back(key_text);
    const std::string_view key = key_text, value = token.substr(eq + 1);
    if (auto role = parse_role(key)) {
      p.set(*role, format_or_fail(text, value));
    } else if (key == "acc") {
      p.accumulate = format_or_fail(text, value);
    } else if (key == "round") {
      auto r = parse_rounding(value);
      if (!r) fail(text, "unknown rounding '" + std::string(value) + "' (expected rn, rz or sr)");
      p.rounding = *r;
    } else if (key == "seed") {
      const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), p.seed);
      if (ec != std::errc{} || ptr != value.data() + value.size() || value.empty()) {
        fail(text, "seed '" + std::string(value) + "' is not an unsigned 64-bit integer");
      }
      seed_given = true;
    } else {
      fail(text, "unknown key '" + std::string(key) + "' (expected q k v o do grad stats acc round seed)");
    }
  }
  if (seed_given && p.rounding != Rounding::stochastic) {
    fail(text, "a seed is given but rounding is not stochastic (add round=sr)");
  }
  return p;
}

std::string PrecisionPolicy::to_string() const {
  const Format base_format = format(Role::q);
  const PrecisionPolicy base = uniform(base_format);
  std::string out(name(base_format));
  // Appends piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict, GCC bug 105329) on
  // `out += "," + std::string(...)`.
  const auto add = [&out](std::string_view key, std::string_view value) {
    out.append(",").append(key).append("=").append(value);
  };
  for (Role r : kAllRoles) {
    if (format(r) != base.format(r)) add(name(r), name(format(r)));
  }
  if (accumulate != base.accumulate) add("acc", name(accumulate));
  if (rounding != Rounding::nearest_even) add("round", name(rounding));
  if (rounding == Rounding::stochastic) add("seed", std::to_string(seed));
  return out;
}

}  // namespace fc
