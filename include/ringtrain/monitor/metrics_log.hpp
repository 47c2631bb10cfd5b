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
  // Appends one record and flushes it. IoError naming the path when the write fails; a warning,
  // once, when the file is no longer at its path (removed or moved with its directory).
  void write(const std::string& json_line);

 private:
  bool still_at_its_path() const;

  std::string path_;
  std::FILE* file_ = nullptr;
  bool moved_ = false;
};

}  // namespace ringtrain
