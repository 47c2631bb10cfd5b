// `ringtrain bench ckpt` through the real executable on 1 and 2 ranks (a small model): the
// JSON line holds positive bandwidths and their ratios, says the reads come from storage, and
// the benchmark leaves no file behind in its directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "integration/run_command.hpp"

namespace ringtrain::test {
namespace {

TEST(BenchCkpt, ComparesWithRawIoOfTheSameBytesFromStorage) {
  for (int ranks : {1, 2}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() /
        ("ringtrain-bench-ckpt-" + std::to_string(::getpid()) + "-" + std::to_string(ranks));
    const CommandResult r =
        run_ringtrain(ranks, {"bench", "ckpt", "--params", "300000", "--repeats", "2", "--dir", dir.string()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    nlohmann::json j;
    for (const std::string& line : lines_of(r.output))
      if (!line.empty() && line.front() == '{') j = nlohmann::json::parse(line);
    ASSERT_FALSE(j.is_null()) << "no JSON line in:\n" << r.output;
    EXPECT_EQ(j["bench"], "ckpt");
    EXPECT_EQ(j["ranks"], ranks);
    EXPECT_EQ(j["bytes"], 300000 * 4);
    for (const char* key : {"raw_write_MBps", "ckpt_write_MBps", "raw_read_MBps", "ckpt_read_MBps"})
      EXPECT_GT(j[key].get<double>(), 0.0) << key;
    EXPECT_NE(j["read_from"].get<std::string>().find("evicted from the page cache"), std::string::npos);
    EXPECT_NE(r.output.find("all the bytes per rank, both from storage"), std::string::npos) << r.output;
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << dir;
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace ringtrain::test
