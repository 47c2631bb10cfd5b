// MetricsLog appending to a metrics.jsonl whose last record was torn (a write that failed half
// way: a full disk, a killed run): the torn part is cut before the first new record, so the
// resume marker and what follows stay lines of their own (before, the marker was glued onto it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ringtrain/monitor/metrics_log.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

std::string appended_to(const std::string& before) {
  const fs::path path = fs::temp_directory_path() / ("ringtrain-metrics-" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(path, std::ios::binary) << before;
  {
    MetricsLog log(path.string(), true);
    log.write(R"({"type":"resume"})");
  }
  std::stringstream text;
  text << std::ifstream(path, std::ios::binary).rdbuf();
  fs::remove(path);
  return text.str();
}

TEST(MetricsLog, AppendingCutsATornLastRecordFirst) {
  EXPECT_EQ(appended_to("{\"step\":1}\n{\"step\":2,\"lo"), "{\"step\":1}\n{\"type\":\"resume\"}\n");
  EXPECT_EQ(appended_to("{\"step\":1,\"lo"), "{\"type\":\"resume\"}\n");  // no complete line at all
  // A torn record longer than the 64 KiB block the file is read back in.
  EXPECT_EQ(appended_to("{\"step\":1}\n" + std::string(200000, 'x')), "{\"step\":1}\n{\"type\":\"resume\"}\n");
}

TEST(MetricsLog, AppendingKeepsCompleteRecords) {
  EXPECT_EQ(appended_to("{\"step\":1}\n"), "{\"step\":1}\n{\"type\":\"resume\"}\n");
  EXPECT_EQ(appended_to(""), "{\"type\":\"resume\"}\n");
}

}  // namespace
}  // namespace ringtrain
