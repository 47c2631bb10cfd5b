// MetricsLog (see header). Every libc call is checked.
#include "ringtrain/monitor/metrics_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain {
namespace {
[[noreturn]] void io_fail(const std::string& path, const char* what) {
  throw IoError(fmt::format("{}: {}: {}", path, what, std::strerror(errno)));
}
// The bytes of `path` up to and with its last newline: what an append may follow. A write that
// failed half way (a full disk, a killed run) leaves a torn record after it, which the next
// record would be glued onto (the resume marker among them: one unreadable line).
std::int64_t complete_lines_bytes(const std::string& path) {
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return -1;  // not there yet: nothing to cut
    io_fail(path, "cannot open");
  }
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  if (size < 0) io_fail(path, "cannot seek");
  off_t end = size;
  std::array<char, 65536> block{};
  for (bool last = true; end > 0; last = false) {  // last: the block holding the file's last byte
    const off_t begin = std::max<off_t>(0, end - static_cast<off_t>(block.size()));
    const ssize_t got = ::pread(fd.get(), block.data(), static_cast<std::size_t>(end - begin), begin);
    if (got != end - begin) io_fail(path, "read failed");
    if (last && block[static_cast<std::size_t>(got - 1)] == '\n') return -1;
    for (ssize_t i = got - 1; i >= 0; --i)
      if (block[static_cast<std::size_t>(i)] == '\n') return begin + i + 1;
    end = begin;
  }
  return size > 0 ? 0 : -1;  // no newline at all: all of it is torn; empty: nothing to cut
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  if (append) {
    if (const std::int64_t keep = complete_lines_bytes(path); keep >= 0) {
      if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) io_fail(path, "cannot cut its torn last record");
      log::warn("{}: removed a torn last record (an interrupted write) before appending", path);
    }
  }
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
  if (!moved_ && !still_at_its_path()) {
    moved_ = true;  // said once; the records go on into the open file, wherever it is now
    log::warn(
        "{}: the file was removed or moved during the run (run.dir deleted or renamed?): records written from "
        "now on do not reach that path",
        path_);
  }
}

bool MetricsLog::still_at_its_path() const {
  struct stat open_file {};
  struct stat at_path {};
  if (::fstat(::fileno(file_), &open_file) != 0) io_fail(path_, "cannot stat the open file");
  return ::stat(path_.c_str(), &at_path) == 0 && at_path.st_dev == open_file.st_dev &&
         at_path.st_ino == open_file.st_ino;
}

}  // namespace ringtrain
