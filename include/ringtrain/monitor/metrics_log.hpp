// Run records on disk: metrics.jsonl (one JSON object per line, flushed as written, so a
// killed run keeps what it logged) and whole files written atomically (summary.json).
#pragma once
#include <cstdio>
#include <string>

namespace ringtrain {

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path);  // truncates; IoError naming the path
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const std::string& json_line);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Writes text to path via path.tmp + fsync + rename. Throws IoError naming the path.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace ringtrain
