// DirLock (see header). The holder's description is written into the lock file after the
// lock is taken, so a reader that fails to take it reads a complete one.
#include "ringtrain/ckpt/dir_lock.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/runtime/slurm.hpp"

namespace ringtrain {
namespace {

// "host node1, pid 1234, Slurm job 99, since 2026-12-02 03:04:05 UTC"
std::string holder_description() {
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char since[32] = {};
  std::strftime(since, sizeof(since), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return fmt::format("host {}, pid {}{}, since {}", node_name(), ::getpid(),
                     job != nullptr ? fmt::format(", Slurm job {}", job) : std::string(), since);
}

// What the lock file says about its holder (at most one line of 512 bytes), or "unknown".
std::string read_holder(int fd) {
  char text[513] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder(text, n > 0 ? static_cast<std::size_t>(n) : 0);
  holder = holder.substr(0, holder.find('\n'));
  return holder.empty() ? std::string("holder unknown") : holder;
}

struct flock whole_file(short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 0;  // to the end, however long
  return lock;
}

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& what, const std::string& file) {
  const std::string path = dir + "/" + file;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError(fmt::format("{}: {}: cannot open: {}", what, path, std::strerror(errno)));
  struct flock lock = whole_file(F_WRLCK);
  if (::fcntl(fd_, F_OFD_SETLK, &lock) != 0) {
    const int err = errno;
    if (err == EAGAIN || err == EACCES) {
      const std::string holder = read_holder(fd_);
      ::close(fd_);
      fd_ = -1;
      throw IoError(fmt::format(
          "{}: {} is in use by another run ({}; lock {}): give this run another {}, or let that run end first", what,
          dir, holder, path, what));
    }
    // ENOLCK, EINVAL, EOPNOTSUPP: a file system (some NFS or Lustre mounts) without locks.
    log::warn("{}: cannot lock {} ({}): a second run on this directory would not be detected", what, path,
              std::strerror(err));
    return;
  }
  const std::string holder = holder_description() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size()))
    log::warn("{}: {}: cannot record this run as the holder: {}", what, path, std::strerror(errno));
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race a new holder)
}

}  // namespace ringtrain
