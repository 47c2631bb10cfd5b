// Room on storage for checkpoint files (see header): posix_fallocate for the first reservation,
// fallocate(FALLOC_FL_KEEP_SIZE) to hold it across HDF5's truncation, a same-size truncate to
// give back what the file did not use.
#include "ckpt/file_space.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/files.hpp"

namespace ringtrain::ckpt {
namespace {

bool no_room(int error) { return error == ENOSPC || error == EDQUOT || error == EFBIG; }

[[noreturn]] void throw_no_room(const std::string& path, std::int64_t bytes, int error) {
  throw IoError(
      fmt::format("{}: no room for {:.1f} MB: {}", path, static_cast<double>(bytes) / 1e6, std::strerror(error)));
}

int open_for_writing(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  return fd;
}

}  // namespace

std::int64_t file_bytes_bound(const std::vector<CheckpointBuffer>& buffers, int world) {
  std::int64_t bytes = std::int64_t{1} << 20;
  for (const auto& b : buffers)
    bytes += b.numel * static_cast<std::int64_t>(sizeof(float)) * (b.per_rank ? world : 1) + (std::int64_t{1} << 20);
  return bytes;
}

void create_with_room(const std::string& path, std::int64_t bytes) {
  const auto create = [&] { return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644); };
  int raw = create();
  if (raw < 0 && errno == EEXIST && ::unlink(path.c_str()) == 0) raw = create();
  if (raw < 0) throw IoError(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  const FileDescriptor fd(raw);
  const int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
  if (no_room(rc)) throw_no_room(path, bytes, rc);
  // Other errors (EOPNOTSUPP on some file systems): nothing proven, the write will tell.
}

void hold_room(const std::string& path, std::int64_t bytes) {
  const FileDescriptor fd(open_for_writing(path));
  if (::fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes)) == 0) return;
  if (no_room(errno)) throw_no_room(path, bytes, errno);
  // EOPNOTSUPP and the like: nothing held, as create_with_room.
}

void release_unused_room(const std::string& path) {
  const FileDescriptor fd(open_for_writing(path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw IoError(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  // Truncating to its own size frees the blocks allocated past the end (ext4, XFS, tmpfs).
  if (::ftruncate(fd.get(), st.st_size) != 0)
    throw IoError(fmt::format("{}: cannot truncate: {}", path, std::strerror(errno)));
}

}  // namespace ringtrain::ckpt
