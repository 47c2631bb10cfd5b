// Whether an HDF5 file failed to close in this process (its last flush: a full disk, an I/O
// error). HDF5 1.10 keeps such a file half torn down, and its own termination, which MPI_Finalize
// runs, then crashes on it (SIGSEGV in H5F__close_cb, after ringtrain's error line): such a
// process ends without MPI_Finalize (cli/main.cpp). Set by h5::Handle (h5_handle.hpp); no HDF5
// header needed to read it.
#pragma once

namespace ringtrain::h5 {

inline bool& a_file_close_failed() {
  static bool failed = false;
  return failed;
}

}  // namespace ringtrain::h5
