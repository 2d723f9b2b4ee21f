// `flashcheck formats`: the number formats and the units every tolerance is stated in.
#include <cstdio>
#include <string>

#include "experiments/cli/commands.hpp"
#include "precision/format.hpp"

namespace fc::cli {

void add_formats_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "formats", "Print each number format's precision, range, unit roundoff u and machine epsilon");
  cmd->callback([] {
    std::printf("%-6s %4s %3s %6s %5s  %-22s %-12s %-12s %-12s %-12s\n", "format", "bits", "p",
                "emin", "emax", "unit roundoff u", "epsilon", "max finite", "min normal",
                "min subnormal");
    for (Format f : kAllFormats) {
      const FormatInfo i = format_info(f);
      char ubuf[32];
      std::snprintf(ubuf, sizeof ubuf, "%.6g (2^-%d)", i.unit_roundoff(), i.precision);
      std::printf("%-6s %4d %3d %6d %5d  %-22s %-12.4g %-12.5g %-12.4g %-12.4g\n",
                  std::string(i.name).c_str(), i.bits, i.precision, i.emin, i.emax, ubuf,
                  i.machine_epsilon(), i.max_finite(), i.min_normal(), i.min_subnormal());
    }
    std::printf("\np counts the implicit bit; u = 2^-p bounds round-to-nearest's relative error in the\n"
                "normal range; epsilon = 2^(1-p) is the spacing just above 1.\n");
  });
}

}  // namespace fc::cli
