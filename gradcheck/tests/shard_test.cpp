#include "gradcheck/shard.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "gradcheck/runner.hpp"
#include "kernels/builtin_subjects.hpp"

namespace fc::gradcheck {
namespace {

TEST(Shard, ParsesIOfNAndRefusesTheRest) {
  const Shard s = Shard::parse("2/5");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 5);
  EXPECT_TRUE(s.owns(7));
  EXPECT_FALSE(s.owns(8));
  for (const char* bad : {"5/5", "1", "/3", "a/3", "1/0", "-1/3", "1/3/4", ""}) {
    EXPECT_THROW(Shard::parse(bad), std::invalid_argument) << bad;
  }
}

// The shards of a run are disjoint and together are exactly the unsharded run's cases.
TEST(Shard, ShardsOfARunPartitionItsCases) {
  auto subjects = kernels::make_builtin_subjects();
  kernels::Subject& naive = *subjects.front();
  RunOptions o;
  o.policy = PrecisionPolicy::uniform(Format::fp32);
  o.cases = 17;
  o.verdict.oracle_only = true;
  const auto texts = [&](Shard shard) {
    o.shard = shard;
    std::multiset<std::string> seen;
    const RunSummary s = run_cases(naive, o, [&](const CaseReport& r) { seen.insert(r.case_text()); });
    EXPECT_EQ(static_cast<std::size_t>(s.cases), seen.size());
    return seen;
  };
  const auto whole = texts({0, 1});
  ASSERT_EQ(whole.size(), 17u);
  std::multiset<std::string> joined;
  for (int i = 0; i < 3; ++i) {
    const auto part = texts({i, 3});
    EXPECT_EQ(part.size(), i < 2 ? 6u : 5u);
    joined.insert(part.begin(), part.end());
  }
  EXPECT_EQ(joined, whole);
}

}  // namespace
}  // namespace fc::gradcheck
