// The README and docs/ name only flags that exist: every `--flag` after `pagoda SUBCOMMAND` on a
// line is in that subcommand's --help, and every inline code span that starts with a flag
// (prose such as `--kv-host-mem 8G`) names one that some subcommand has. Lines of other
// programs (bench scripts, docker, llama-server) are not checked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

const std::vector<std::string> kSubcommands = {"bench-serve", "make-model", "perplexity", "tokenize", "explain", "convert",
                                               "kvcalc", "router", "bench", "serve", "info", "run", "replay"};

bool help_has(const std::string& help, const std::string& flag) {
  const std::regex re("(^|[\\s,])" + flag + "([\\s,=]|$)");
  return std::regex_search(help, re);
}

std::vector<std::string> flags_in(const std::string& text) {
  static const std::regex re("(^|[^\\w-])(--[a-z][a-z0-9-]*)");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[2].str());
  }
  return out;
}

TEST(Docs, EveryFlagTheDocsNameExists) {
  std::map<std::string, std::string> helps;
  std::string all_help;
  for (const std::string& sub : kSubcommands) {
    const testing::Output o = testing::pagoda(sub + " --help");
    ASSERT_EQ(o.exit_code, 0) << sub << ": " << o.err;
    ASSERT_NE(o.out.find("--"), std::string::npos) << sub;
    helps[sub] = o.out;
    all_help += o.out;
  }
  std::vector<std::string> files = {std::string(PAGODA_SOURCE_DIR) + "/README.md"};
  for (const auto& e : std::filesystem::directory_iterator(std::string(PAGODA_SOURCE_DIR) + "/docs")) {
    if (e.path().extension() == ".md") files.push_back(e.path().string());
  }
  ASSERT_GE(files.size(), 5u) << "README.md and the docs/ pages";
  std::string command_alt;
  for (const std::string& sub : kSubcommands) command_alt += (command_alt.empty() ? "" : "|") + sub;
  const std::regex command("pagoda (" + command_alt + ")(?![\\w-])");
  const std::regex code_span("`(--[a-z][^`]*)`");
  int64_t checked = 0;
  for (const std::string& path : files) {
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      const std::string where = path + ":" + std::to_string(n) + ": ";
      std::smatch m;
      if (std::regex_search(line, m, command)) {
        std::string rest = m.suffix().str();
        for (const char* end : {"`", " # "}) rest = rest.substr(0, rest.find(end));  // the command's own words
        for (const std::string& flag : flags_in(rest)) {
          ++checked;
          EXPECT_TRUE(help_has(helps[m[1].str()], flag)) << where << "pagoda " << m[1] << " has no " << flag;
        }
      }
      for (auto it = std::sregex_iterator(line.begin(), line.end(), code_span); it != std::sregex_iterator(); ++it) {
        const std::vector<std::string> flags = flags_in((*it)[1].str());
        if (flags.empty()) continue;
        ++checked;
        EXPECT_TRUE(help_has(all_help, flags[0])) << where << "no subcommand has " << flags[0];
      }
    }
  }
  EXPECT_GT(checked, 100) << "the docs name the flags users type";
  RecordProperty("flags_checked", static_cast<int>(checked));
}

// The README stays a front page: the reference material lives in docs/.
TEST(Docs, ReadmeIsShort) {
  std::ifstream in(std::string(PAGODA_SOURCE_DIR) + "/README.md");
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_GT(lines, 20);
  EXPECT_LT(lines, 200);
}

}  // namespace
}  // namespace pagoda
