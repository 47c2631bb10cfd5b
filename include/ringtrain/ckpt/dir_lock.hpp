// DirLock: one run at a time in a directory (checkpoint.dir, run.dir). An open file
// description lock (fcntl F_OFD_SETLK) on `<dir>/.lock` (or another file), held while the object lives: the kernel (or
// the NFS server, at lease expiry) drops it when the process ends however it ends, so a crashed or killed run never
// leaves a stale lock behind. The file records who holds it, for the error a second run gets. On a file system without
// locks the run goes on with a warning.
#pragma once
#include <string>

namespace ringtrain {

class DirLock {
 public:
  // Takes the lock on <dir>/<file> or throws IoError naming the directory and the holder
  // (host, pid, Slurm job, since when) and what to do. `what` names the directory in messages
  // ("checkpoint.dir"). Two locks of one process on the same file exclude each other too.
  DirLock(const std::string& dir, const std::string& what, const std::string& file = file_name());
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  static std::string file_name() { return ".lock"; }

 private:
  int fd_ = -1;
};

}  // namespace ringtrain
