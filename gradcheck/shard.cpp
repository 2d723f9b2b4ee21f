#include "gradcheck/shard.hpp"

#include <stdexcept>

namespace fc::gradcheck {

Shard Shard::parse(const std::string& text) {
  const auto slash = text.find('/');
  const auto digits = [&](const std::string& s) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) {
      throw std::invalid_argument("--shard '" + text + "': expected I/N with 0 <= I < N (e.g. 0/4)");
    }
    return std::stoi(s);
  };
  if (slash == std::string::npos) throw std::invalid_argument("--shard '" + text + "': expected I/N with 0 <= I < N (e.g. 0/4)");
  Shard s{digits(text.substr(0, slash)), digits(text.substr(slash + 1))};
  if (s.count < 1 || s.index >= s.count) {
    throw std::invalid_argument("--shard '" + text + "': the index must be in 0 .. N-1 and N >= 1");
  }
  return s;
}

}  // namespace fc::gradcheck
