// A text with structure to learn (numbered sentences over a small vocabulary) as byte tokens, for
// the language-model integration tests: DIR/corpus.txt, then DIR/tokens/train.h5 and val.h5
// (the last 10%) through `ringtrain data convert --text`.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "integration/run_command.hpp"

namespace ringtrain::test {

// Returns DIR/tokens.
inline std::filesystem::path write_token_corpus(const std::filesystem::path& dir, std::size_t bytes = 60000) {
  const char* words[] = {"the",      "ring", "passes", "gradients", "between", "ranks", "while",
                         "backward", "runs", "and",    "every",     "step",    "ends",  "together"};
  std::string text;
  for (int i = 0; text.size() < bytes; ++i)
    text +=
        std::to_string(i % 97) + ": " + words[i % 14] + " " + words[(i * 7) % 14] + " " + words[(i * 3) % 14] + ".\n";
  const std::filesystem::path txt = dir / "corpus.txt";
  std::ofstream(txt) << text;
  const std::filesystem::path out = dir / "tokens";
  const auto r =
      run_ringtrain(1, {"data", "convert", "--text", txt.string(), "--val-fraction", "0.1", "--out-dir", out.string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

}  // namespace ringtrain::test
