// write_file_atomic and fsync_path (see header). Every libc call is checked.
#include "ringtrain/core/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {
[[noreturn]] void io_fail(const std::string& path, const char* what) {
  throw IoError(fmt::format("{}: {}: {}", path, what, std::strerror(errno)));
}
}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) io_fail(tmp, "cannot open for writing");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      errno = err;
      io_fail(tmp, "write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    io_fail(tmp, "fsync failed");
  }
  if (::close(fd) != 0) io_fail(tmp, "close failed");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) io_fail(path, "rename failed");
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) {
    if (directory) return;
    io_fail(path, "cannot open to sync");
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  errno = err;
  if (rc != 0 && !directory) io_fail(path, "fsync failed");
}

}  // namespace ringtrain
