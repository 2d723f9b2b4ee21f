// The oracle's self-verification (oracle/self_check.hpp) as a property over generated cases, the
// regression corpus, and the precision ladder.
#include "oracle/self_check.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <fstream>
#include <sstream>

#include "oracle/attnres.hpp"
#include "oracle/ladder.hpp"

namespace fc::oracle {
namespace {

std::string failures(const std::vector<Agreement>& agreements) {
  std::ostringstream out;
  for (const Agreement& a : agreements) {
    if (!a.pass()) out << "  " << a.check << " (" << name(a.type) << "): " << a.value << " u > bound " << a.bound << " u\n";
  }
  return out.str();
}

// Shapes shrink toward 1; Nq, Nk up to 9 include 1 and primes; every mask; GQA groups up to 3;
// scales from 1/4 to 2 times 1/sqrt(d), sometimes negative.
rc::Gen<AttentionCase> attention_cases() {
  return rc::gen::apply(
      [](int b, int hkv, int group, int nq, int nk, int d, int dv, int mask, int quarters, bool negative, std::uint64_t seed) {
        AttentionCase c;
        c.problem.shape = {b, hkv * group, hkv, nq, nk, d, dv};
        c.problem.mask = static_cast<Mask>(mask);
        c.problem.scale = default_scale(d) * quarters / 4.0 * (negative ? -1 : 1);
        c.seed = seed;
        return c;
      },
      rc::gen::inRange(1, 3), rc::gen::inRange(1, 3), rc::gen::inRange(1, 4), rc::gen::inRange(1, 10), rc::gen::inRange(1, 10),
      rc::gen::inRange(1, 9), rc::gen::inRange(1, 9), rc::gen::inRange(0, 3), rc::gen::inRange(1, 9), rc::gen::arbitrary<bool>(),
      rc::gen::arbitrary<std::uint64_t>());
}

rc::Gen<AttnResCase> attnres_cases() {
  return rc::gen::apply(
      [](int n, int b, int t, int d, int s, int eps_index, std::uint64_t seed) {
        AttnResCase c;
        c.shape.sources = n, c.shape.batch = b, c.shape.tokens = t, c.shape.dim = d, c.shape.layers = s;
        c.shape.eps = std::array<double, 3>{1e-6, 1e-3, 0.5}[static_cast<std::size_t>(eps_index)];
        c.seed = seed;
        return c;
      },
      rc::gen::inRange(1, 6), rc::gen::inRange(1, 3), rc::gen::inRange(1, 4), rc::gen::inRange(1, 13), rc::gen::inRange(1, 4),
      rc::gen::inRange(0, 3), rc::gen::arbitrary<std::uint64_t>());
}

RC_GTEST_PROP(OracleSelfCheck, AttentionAgreementsHold, ()) {
  const AttentionCase c = *attention_cases();
  const std::string f = failures(check_attention(c));
  if (!f.empty()) RC_FAIL(f + "  corpus line: attention " + c.to_string());
}

RC_GTEST_PROP(OracleSelfCheck, AttnResAgreementsHold, ()) {
  const AttnResCase c = *attnres_cases();
  const std::string f = failures(check_attnres(c));
  if (!f.empty()) RC_FAIL(f + "  corpus line: attnres " + c.to_string());
}

TEST(OracleSelfCheck, RegressionCorpus) {
  std::ifstream in(FLASHCHECK_ORACLE_CORPUS);
  ASSERT_TRUE(in) << "cannot open " << FLASHCHECK_ORACLE_CORPUS;
  std::string line;
  int entries = 0;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string text = line.substr(0, line.find('#'));
    std::istringstream fields(text);
    std::string family;
    if (!(fields >> family)) continue;
    const std::string rest = text.substr(text.find(family) + family.size());
    std::string f;
    if (family == "attention") {
      f = failures(check_attention(AttentionCase::parse(rest)));
    } else if (family == "attnres") {
      f = failures(check_attnres(AttnResCase::parse(rest)));
    } else {
      ADD_FAILURE() << "corpus line " << number << ": unknown family '" << family << "'";
      continue;
    }
    EXPECT_TRUE(f.empty()) << "corpus line " << number << " (" << line << "):\n" << f;
    ++entries;
  }
  EXPECT_GT(entries, 0);
}

TEST(OracleSelfCheck, CaseTextRoundTrips) {
  const AttentionCase c = random_attention_case(5);
  const AttentionCase back = AttentionCase::parse(c.to_string());
  EXPECT_EQ(back.to_string(), c.to_string());
  const AttnResCase r = random_attnres_case(6);
  EXPECT_EQ(AttnResCase::parse(r.to_string()).to_string(), r.to_string());
  EXPECT_THROW(AttentionCase::parse("B=1 Hq=2 Hkv=2 Nq=0 Nk=1 d=1 dv=1"), std::invalid_argument);
  EXPECT_THROW(AttentionCase::parse("B=1 frobnicate=2"), std::invalid_argument);
  EXPECT_THROW(AttnResCase::parse("N=2 D=x"), std::invalid_argument);
}

TEST(PrecisionLadder, PicksTheCheapestTypeWithA24BitMargin) {
  EXPECT_EQ(oracle_type_for(PrecisionPolicy::uniform(Format::bf16)), OracleType::fp64);
  EXPECT_EQ(oracle_type_for(PrecisionPolicy::uniform(Format::fp16)), OracleType::fp64);
  EXPECT_EQ(oracle_type_for(PrecisionPolicy::uniform(Format::fp32)), OracleType::fp64);
  EXPECT_EQ(oracle_type_for(PrecisionPolicy::uniform(Format::fp64)), OracleType::quad);
  // bf16 storage but outputs kept in fp64, or fp64 accumulation: the subject can be fp64-accurate.
  EXPECT_EQ(oracle_type_for(PrecisionPolicy::parse("bf16,o=fp64")), OracleType::quad);
  EXPECT_EQ(oracle_type_for(PrecisionPolicy::parse("bf16,acc=fp64")), OracleType::quad);
  // Inputs stored in fp64 do not matter: they reach oracle and subject alike, exactly.
  EXPECT_EQ(oracle_type_for(PrecisionPolicy::parse("bf16,q=fp64,k=fp64,v=fp64")), OracleType::fp64);
}

}  // namespace
}  // namespace fc::oracle
