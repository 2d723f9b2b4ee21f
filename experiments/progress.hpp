// Progress of a long run on stderr: on a terminal, one bar redrawn in place with the share done, the
// items done and an ETA (from the items' cost estimates, rescaled by the time the finished ones took);
// otherwise (a log, CI) a plain line at most every 10 s, so logs stay short.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace fc::experiments {

class Progress {
 public:
  Progress(std::string title, double total_cost, int total_items, std::FILE* out = stderr);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void done(double cost, const std::string& label);  // one item finished
  void finish();                                     // the closing line
  static std::string duration(double seconds);       // "42 s", "3 min 05 s"

 private:
  void draw(const std::string& label, bool force);
  std::string title_;
  double total_cost_, done_cost_ = 0;
  int total_items_, done_items_ = 0;
  std::FILE* out_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_line_;
};

}  // namespace fc::experiments
