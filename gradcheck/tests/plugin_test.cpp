// The plugin ABI: the example plugin loads and passes the harness; a wrong plugin is caught; every
// broken plugin gives a clear PluginError, never a crash.
#include <gtest/gtest.h>

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
  EXPECT_LE(r.failure->minimal.shape.seq_k, r.failure->original.shape.seq_k) << "shrinking only makes cases smaller";
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

TEST(Plugin, ASubjectNameCannotBeRegisteredTwice) {
  Registry registry = Registry::with_builtins();
  registry.load_plugin(plugin("flashcheck_example_plugin"));
  EXPECT_THROW(registry.load_plugin(plugin("flashcheck_example_plugin")), std::invalid_argument);
}

}  // namespace
}  // namespace fc::gradcheck
