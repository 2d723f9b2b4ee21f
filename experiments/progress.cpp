#include "experiments/progress.hpp"

#include <unistd.h>

#include <algorithm>

namespace fc::experiments {

Progress::Progress(std::string title, double total_cost, int total_items, std::FILE* out)
    : title_(std::move(title)),
      total_cost_(std::max(total_cost, 1e-9)),
      total_items_(total_items),
      out_(out),
      tty_(isatty(fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_line_(start_) {}

std::string Progress::duration(double seconds) {
  char buf[32];
  const long s = static_cast<long>(seconds + 0.5);
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%ld s", s);
  } else {
    std::snprintf(buf, sizeof buf, "%ld min %02ld s", s / 60, s % 60);
  }
  return buf;
}

void Progress::done(double cost, const std::string& label) {
  done_cost_ += cost, ++done_items_;
  draw(label, false);
}

void Progress::draw(const std::string& label, bool force) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double share = std::min(1.0, done_cost_ / total_cost_);
  const std::string eta = share > 0 && share < 1 ? "eta " + duration(elapsed * (1 - share) / share) : "";
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(share * kWidth);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::string tail = label.size() > 40 ? label.substr(0, 37) + "..." : label;
    std::fprintf(out_, "\r\033[K%s [%s] %3.0f%% %d/%d %s  %s", title_.c_str(), bar.c_str(), 100 * share, done_items_, total_items_,
                 eta.c_str(), tail.c_str());
  } else if (force || std::chrono::duration<double>(now - last_line_).count() >= 10) {
    std::fprintf(out_, "%s: %3.0f%% (%d/%d items, %s elapsed%s%s) last: %s\n", title_.c_str(), 100 * share, done_items_, total_items_,
                 duration(elapsed).c_str(), eta.empty() ? "" : ", ", eta.c_str(), label.c_str());
    last_line_ = now;
  }
  std::fflush(out_);
}

void Progress::finish() {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) std::fprintf(out_, "\r\033[K");
  std::fprintf(out_, "%s: %d items in %s\n", title_.c_str(), done_items_, duration(elapsed).c_str());
  std::fflush(out_);
}

}  // namespace fc::experiments
