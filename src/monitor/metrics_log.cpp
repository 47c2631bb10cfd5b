// MetricsLog and write_file_atomic (see header). Every libc call is checked.
#include "ringtrain/monitor/metrics_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {
[[noreturn]] void io_fail(const std::string& path, const char* what) {
  throw IoError(fmt::format("{}: {}: {}", path, what, std::strerror(errno)));
}
}  // namespace

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "w");
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

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) io_fail(tmp, "cannot open for writing");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      io_fail(tmp, "write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    io_fail(tmp, "fsync failed");
  }
  if (::close(fd) != 0) io_fail(tmp, "close failed");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) io_fail(path, "rename failed");
}

}  // namespace ringtrain
