// The regression corpus re-runs on every test run; the corpus functions themselves.
#include "gradcheck/corpus.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "gradcheck/checks.hpp"
#include "gradcheck/registry.hpp"

namespace fc::gradcheck {
namespace {

TEST(Corpus, EveryEntryOfABuiltInSubjectPasses) {
  const Registry registry = Registry::with_builtins();
  int replayed = 0;
  for (const CorpusEntry& e : read_corpus(FLASHCHECK_CORPUS)) {
    kernels::Subject* s = registry.find(e.subject);
    if (!s) continue;  // a plugin's entry: replayed only where the plugin is loaded
    const CaseReport r = check_case_text(*s, e.case_text, e.op, {});
    EXPECT_TRUE(r.pass) << "corpus line " << e.line << ": " << e.subject << " " << kernels::name(e.op) << " " << e.case_text
                        << "\n" << r.summary();
    ++replayed;
  }
  RecordProperty("replayed", replayed);
  EXPECT_GE(replayed, 9) << "the corpus lost its seeded entries, or read_corpus stopped reading them";
}

TEST(Corpus, AppendThenReadBack) {
  const std::string path = (std::filesystem::temp_directory_path() / "flashcheck_corpus_test.txt").string();
  std::remove(path.c_str());
  const Case c = Case::parse("B=1 Hq=2 Hkv=1 Nq=3 Nk=5 d=4 dv=4 mask=causal_br scale=0.5 inputs=onehot layout=bnhd policy=bf16 seed=7");
  append_corpus(path, "cpu.naive", kernels::Op::bwd, c.to_string(), "a note");
  const auto entries = read_corpus(path);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].subject, "cpu.naive");
  EXPECT_EQ(entries[0].op, kernels::Op::bwd);
  EXPECT_EQ(entries[0].case_text, c.to_string());
  std::remove(path.c_str());
  EXPECT_THROW(read_corpus(path), std::runtime_error);
}

}  // namespace
}  // namespace fc::gradcheck
