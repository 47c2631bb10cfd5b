// HDF5 handles: h5::Handle, an owning hid_t closed with the H5*close that matches its kind, and
// h5::lock, the process-wide lock every HDF5 call takes while other threads may make one.
// Calls are checked with RT_H5_CHECK (check/h5_check.hpp).
#pragma once
#include <hdf5.h>

#include <mutex>
#include <utility>

#include "hdf5/h5_close_state.hpp"

namespace ringtrain::h5 {

// Parallel HDF5 is not built thread-safe, and the loader reads from background threads: any
// HDF5 call that may run while another thread can make one (loader threads, or code running
// while a loader exists) holds this process-wide lock. Recursive, so helpers can take it too.
inline std::unique_lock<std::recursive_mutex> lock() {
  static std::recursive_mutex mutex;
  return std::unique_lock<std::recursive_mutex>(mutex);
}

// An owning hid_t. Close is the H5*close function for its kind, so a file is never closed
// with H5Dclose; moving transfers ownership. Destruction ignores close errors (it may run
// while an exception unwinds), so close() explicitly where a failed flush must be reported.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: lets handles go straight into H5 calls
  bool valid() const { return id_ >= 0; }

  // Closes now and reports failure (for files, where closing flushes data).
  herr_t close() { return noted(Close(std::exchange(id_, H5I_INVALID_HID))); }
  void reset() {
    if (id_ >= 0) noted(Close(std::exchange(id_, H5I_INVALID_HID)));
  }

 private:
  static herr_t noted(herr_t closed) {  // a file that failed to close: h5_close_state.hpp
    if constexpr (Close == &H5Fclose)
      if (closed < 0) a_file_close_failed() = true;
    return closed;
  }

  hid_t id_ = H5I_INVALID_HID;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using Dataspace = Handle<H5Sclose>;
using PropList = Handle<H5Pclose>;
using Attribute = Handle<H5Aclose>;
using Datatype = Handle<H5Tclose>;

}  // namespace ringtrain::h5
