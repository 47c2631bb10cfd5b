// MetricsLog (see header). Every libc call is checked.
#include "ringtrain/monitor/metrics_log.hpp"

#include <cerrno>
#include <cstring>

#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {
[[noreturn]] void io_fail(const std::string& path, const char* what) {
  throw IoError(fmt::format("{}: {}: {}", path, what, std::strerror(errno)));
}
}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) io_fail(path, "cannot open for writing");
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsLog::write(const std::string& json_line) {
  if (std::fwrite(json_line.data(), 1, json_line.size(), file_) != json_line.size() || std::fputc('\n', file_) == EOF ||
      std::fflush(file_) != 0)
    io_fail(path_, "write failed");
}

}  // namespace ringtrain
