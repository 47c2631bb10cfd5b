// Durable file operations: whole small files written atomically (tmp + fsync + rename), fsync
// of a written file or of the directory that holds a renamed one, and an output's directories.
#pragma once
#include <string>
#include <vector>

namespace ringtrain {

// An open file descriptor that closes itself (-1: none).
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_;
};

// Writes text to path via a temporary file beside it (path.tmp.XXXXXX, created exclusively,
// removed on failure) + fsync + rename. Throws IoError naming the path.
void write_file_atomic(const std::string& path, const std::string& text);

// Flushes a file's data (IoError naming it on failure), or a directory's entries so that a
// rename inside it survives a crash (best effort: some file systems cannot open directories).
void fsync_path(const std::string& path, bool directory);

// Creates the directories an output file at path is to go in, where missing (as `mkdir -p`).
// Throws IoError naming path and the directory that could not be made.
void create_parent_directories(const std::string& path);

// The path to write an output the user named (`-o`) to, as the file itself is replaced by a
// rename into place: the path, or for a symbolic link the file it names (written through: the link
// stays, e.g. data/train.h5 -> /scratch/.../train.h5). IoError for an existing path that is not a
// regular file (a device such as /dev/full, a FIFO, a directory), which a rename would replace.
std::string output_file(const std::string& path);

// DataError when the file `output` is to be written is one of `inputs` (also by another name:
// a link, a relative path), which writing it would destroy before it is read.
void require_output_is_not_an_input(const std::string& output, const std::vector<std::string>& inputs);

}  // namespace ringtrain
