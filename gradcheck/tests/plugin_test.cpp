// The plugin ABI: the example plugin loads and passes the harness; a wrong plugin is caught; every
// broken plugin gives a clear PluginError, never a crash.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "gradcheck/plugin/plugin_loader.hpp"
#include "gradcheck/registry.hpp"
#include "gradcheck/runner.hpp"

namespace fc::gradcheck {
namespace {

std::string plugin(const char* name) { return std::string(FLASHCHECK_PLUGIN_DIR) + "/lib" + name + ".so"; }

std::string load_error(const std::string& path) {
  try {
    load_plugin_file(path);
  } catch (const PluginError& e) {
    return e.what();
  }
  return "loaded";
}

TEST(Plugin, TheExamplePluginPassesTheHarness) {
  Registry registry = Registry::with_builtins();
  registry.load_plugin(plugin("flashcheck_example_plugin"));
  kernels::Subject* s = registry.find("plugin.example");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(registry.is_builtin("plugin.example"));
  EXPECT_EQ(s->info().ops, (std::vector<kernels::Op>{kernels::Op::fwd, kernels::Op::bwd}));
  for (kernels::Op op : {kernels::Op::fwd, kernels::Op::bwd}) {
    RunOptions o;
    o.op = op, o.policy = PrecisionPolicy::uniform(Format::fp32), o.cases = 40, o.seed = 2, o.limits.max_seq = 48;
    const RunSummary r = run_cases(*s, o);
    EXPECT_EQ(r.passed, r.cases) << (r.failure ? r.failure->report.summary() : "");
  }
}

TEST(Plugin, AWrongPluginIsCaughtAndShrunk) {
  Registry registry = Registry::with_builtins();
  registry.load_plugin(plugin("flashcheck_wrong_plugin"));
  RunOptions o;
  o.op = kernels::Op::fwd, o.policy = PrecisionPolicy::uniform(Format::fp32), o.cases = 50;
  const RunSummary r = run_cases(*registry.find("plugin.wrong"), o);
  ASSERT_TRUE(r.failure.has_value());
  EXPECT_LE(Case::parse(r.failure->minimal).shape.seq_k, Case::parse(r.failure->original).shape.seq_k) << "shrinking only makes cases smaller";
}

TEST(Plugin, BrokenPluginsGiveClearErrors) {
  EXPECT_NE(load_error("/nonexistent/libmine.so").find("no such file"), std::string::npos);
  EXPECT_NE(load_error(FLASHCHECK_CORPUS).find("cannot load"), std::string::npos) << "a text file is no shared library";
  EXPECT_NE(load_error(plugin("flashcheck_test_plugin_no_symbols")).find("missing symbol flashcheck_plugin_abi_version"),
            std::string::npos);
  const std::string version = load_error(plugin("flashcheck_test_plugin_wrong_version"));
  EXPECT_NE(version.find("ABI version 999"), std::string::npos) << version;
  const std::string failing = load_error(plugin("flashcheck_test_plugin_failing_subjects"));
  EXPECT_NE(failing.find("code 7: license server unreachable"), std::string::npos) << failing;
}

// Each inconsistent declaration is refused at load time with a message naming what is wrong.
TEST(Plugin, InconsistentDeclarationsAreRefused) {
  const std::string path = plugin("flashcheck_test_plugin_bad_declaration");
  ASSERT_EQ(unsetenv("FC_TEST_BAD_DECLARATION"), 0);
  EXPECT_EQ(load_error(path), "loaded") << "the control declaration is valid";
  const std::vector<std::pair<const char*, const char*>> expected = {
      {"bwd_without_fwd", "without fwd"},
      {"head_dim_zero", "head_dims[0] = 0 is outside [1, max_head_dim = 256]"},
      {"head_dim_above_max", "head_dims[0] = 512 is outside"},
      {"negative_max_seq", "max_seq must be >= 0"},
      {"unknown_format_bit", "name nothing"},
      {"huge_count", "declares 100000 subjects"},
  };
  for (const auto& [what, message] : expected) {
    ASSERT_EQ(setenv("FC_TEST_BAD_DECLARATION", what, 1), 0);
    const std::string error = load_error(path);
    EXPECT_NE(error.find(message), std::string::npos) << what << ": " << error;
  }
  unsetenv("FC_TEST_BAD_DECLARATION");
}

TEST(Plugin, ASubjectNameCannotBeRegisteredTwice) {
  Registry registry = Registry::with_builtins();
  registry.load_plugin(plugin("flashcheck_example_plugin"));
  EXPECT_THROW(registry.load_plugin(plugin("flashcheck_example_plugin")), std::invalid_argument);
}

}  // namespace
}  // namespace fc::gradcheck
