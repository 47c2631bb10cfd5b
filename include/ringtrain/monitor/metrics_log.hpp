// Run records on disk: metrics.jsonl (one JSON object per line, flushed as written, so a
// killed run keeps what it logged). Whole files go through write_file_atomic (core/files.hpp).
#pragma once
#include <cstdio>
#include <string>

#include "ringtrain/core/files.hpp"

namespace ringtrain {

class MetricsLog {
 public:
  // Truncates, or appends (a resumed run continues its log); IoError naming the path.
  explicit MetricsLog(const std::string& path, bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const std::string& json_line);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace ringtrain
