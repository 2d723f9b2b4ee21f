// The regression corpus: shrunk failing cases, one per line, re-run by the tests on every run
// (gradcheck/tests/corpus_test.cpp). `flashcheck check` appends each new failure it finds.
//   <subject> <op> <case text>   # note
#pragma once

#include <string>
#include <vector>

#include "gradcheck/attnres_case.hpp"
#include "gradcheck/case.hpp"
#include "kernels/attention_call.hpp"

namespace fc::gradcheck {

struct CorpusEntry {
  std::string subject;
  kernels::Op op = kernels::Op::fwd;
  std::string case_text;  // a Case or an AttnResCase (check_case_text parses it by the subject's family)
  int line = 0;
};

// The repository's corpus file (gradcheck/corpus/regressions.txt in the source tree).
std::string default_corpus_path();
// Throws std::invalid_argument naming the line for a malformed entry (a case text neither family parses), std::runtime_error if unreadable.
std::vector<CorpusEntry> read_corpus(const std::string& path);
// Appends one entry; throws std::runtime_error if the file cannot be written.
void append_corpus(const std::string& path, const std::string& subject, kernels::Op op, const std::string& case_text,
                   const std::string& note);

}  // namespace fc::gradcheck
