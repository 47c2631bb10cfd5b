// FileDescriptor, write_file_atomic, fsync_path, create_parent_directories, output_file and
// require_output_is_not_an_input (see header). Every libc call is checked.
#include "ringtrain/core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {
[[noreturn]] void io_fail(const std::string& path, const char* what) {
  throw IoError(fmt::format("{}: {}: {}", path, what, std::strerror(errno)));
}
}  // namespace

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  // A name of our own (mkstemp: created exclusively, never an existing file or a planted
  // link), removed again whatever fails before the rename.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) io_fail(path, "cannot create");  // the user's name, not the temporary one
  const auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = err;
    io_fail(path, what);  // the temporary file is gone: the name the user knows
  };
  if (::fchmod(fd, 0644) != 0) fail("chmod failed");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    io_fail(path, "close failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    io_fail(path, "rename failed");
  }
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

void create_parent_directories(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::absolute(fs::path(path)).parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent, ec))
    throw IoError(fmt::format("{}: cannot create directory {}: {}", path, parent.string(),
                              ec ? ec.message() : std::string("a file of that name is in the way")));
}

std::string output_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::string at = path;
  struct stat st {};
  for (int links = 0;; ++links) {  // through every link, also to a file not written yet
    if (::lstat(at.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return at;  // not there: creating it will say what is wrong
      io_fail(at, "cannot stat");
    }
    if (!S_ISLNK(st.st_mode)) break;
    RT_REQUIRE(links < 40, IoError, "{}: too many levels of symbolic links", path);
    std::error_code ec;
    const fs::path target = fs::read_symlink(at, ec);
    if (ec) throw IoError(fmt::format("{}: cannot read the link: {}", at, ec.message()));
    at = (target.is_absolute() ? target : fs::path(at).parent_path() / target).lexically_normal().string();
  }
  if (S_ISREG(st.st_mode)) return at;
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  throw IoError(
      fmt::format("{}: is {}: an output is written to a file (it would be replaced); give a file's path", at, kind));
}

void require_output_is_not_an_input(const std::string& output, const std::vector<std::string>& inputs) {
  for (const std::string& input : inputs) {
    std::error_code ec;  // an output that does not exist yet is no input
    RT_REQUIRE(!std::filesystem::equivalent(output, input, ec), DataError,
               "{}: the output is also an input ({}); writing it would destroy what is read: choose another output",
               output, input);
  }
}

}  // namespace ringtrain
