#include "gradcheck/corpus.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fc::gradcheck {

std::string default_corpus_path() { return std::string(FLASHCHECK_SOURCE_DIR) + "/gradcheck/corpus/regressions.txt"; }

std::vector<CorpusEntry> read_corpus(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the regression corpus " + path);
  std::vector<CorpusEntry> entries;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string text = line.substr(0, line.find('#'));
    std::istringstream fields(text);
    CorpusEntry e;
    std::string op;
    if (!(fields >> e.subject)) continue;  // blank or comment
    if (!(fields >> op)) throw std::invalid_argument(path + ":" + std::to_string(number) + ": want <subject> <op> <case>");
    if (op == "fwd") e.op = kernels::Op::fwd;
    else if (op == "bwd") e.op = kernels::Op::bwd;
    else if (op == "bwdbwd") e.op = kernels::Op::bwdbwd;
    else throw std::invalid_argument(path + ":" + std::to_string(number) + ": unknown op '" + op + "'");
    std::string rest;
    std::getline(fields, rest);
    const auto first = rest.find_first_not_of(' ');
    e.case_text = first == std::string::npos ? "" : rest.substr(first, rest.find_last_not_of(' ') - first + 1);
    try {
      Case::parse(e.case_text);
    } catch (const std::invalid_argument& attention_error) {
      try {
        AttnResCase::parse(e.case_text);
      } catch (const std::invalid_argument&) {
        throw std::invalid_argument(path + ":" + std::to_string(number) + ": " + attention_error.what());
      }
    }
    e.line = number;
    entries.push_back(std::move(e));
  }
  return entries;
}

void append_corpus(const std::string& path, const std::string& subject, kernels::Op op, const std::string& case_text,
                   const std::string& note) {
  std::ofstream out(path, std::ios::app);
  if (!out) throw std::runtime_error("cannot append to the regression corpus " + path);
  out << subject << " " << kernels::name(op) << " " << case_text;
  if (!note.empty()) out << "  # " << note;
  out << "\n";
  if (!out) throw std::runtime_error("writing the regression corpus " + path + " failed");
}

}  // namespace fc::gradcheck
