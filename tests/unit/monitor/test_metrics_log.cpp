// MetricsLog appending to a metrics.jsonl whose last record was torn (a write that failed half
// way: a full disk, a killed run): the torn part is cut before the first new record, so the
// resume marker and what follows stay lines of their own (before, the marker was glued onto it);
// and a file removed under a run is said once.
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

// run.dir removed (or renamed) during a run: its records went on into the unlinked file without
// a word, and only the end-of-run summary.json failed. Now the first record after says so, once.
TEST(MetricsLog, AFileRemovedDuringTheRunIsSaidOnce) {
  const fs::path path = fs::temp_directory_path() / ("ringtrain-metrics-gone-" + std::to_string(::getpid()) + ".jsonl");
  MetricsLog log(path.string());
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  log.write("{}");
  fs::remove(path);
  log.write("{}");
  log.write("{}");
  const std::string said = testing::internal::GetCapturedStderr() + testing::internal::GetCapturedStdout();
  const std::string warning = path.string() + ": the file was removed or moved during the run";
  EXPECT_NE(said.find(warning), std::string::npos) << said;
  EXPECT_EQ(said.find(warning), said.rfind(warning)) << "said more than once: " << said;
}

}  // namespace
}  // namespace ringtrain
