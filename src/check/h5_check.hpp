// RT_H5_CHECK(call): runs an HDF5 call and throws DataError (check.hpp's message) with HDF5's
// innermost error message, prefixed by the current h5::ErrorContext (the file path). An
// expression: it yields the call's result when that is non-negative.
#pragma once
#include <hdf5.h>

#include <string>
#include <type_traits>
#include <utility>

#include "check/check.hpp"

namespace ringtrain::h5 {

// Names the file (or object) that HDF5 errors raised on this thread are about, for as long
// as it lives; scopes nest and the innermost wins. Constructing one also switches off HDF5's
// automatic stack dumps, which would otherwise reach users on stderr before our exception.
class ErrorContext {
 public:
  explicit ErrorContext(std::string where) : where_(std::move(where)), outer_(top_) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    top_ = this;
  }
  ~ErrorContext() { top_ = outer_; }
  ErrorContext(const ErrorContext&) = delete;
  ErrorContext& operator=(const ErrorContext&) = delete;

  static const std::string* current() { return top_ ? &top_->where_ : nullptr; }

 private:
  std::string where_;
  const ErrorContext* outer_;
  static inline thread_local const ErrorContext* top_ = nullptr;
};

// The message of the deepest frame on HDF5's error stack: it says what actually went wrong
// ("object 'labels' doesn't exist"), where the outer frames only say which API failed.
inline std::string innermost_error() {
  std::string message;
  auto walk = [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
    if (n == 0 && err && err->desc) *static_cast<std::string*>(data) = err->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &message);
  H5Eclear2(H5E_DEFAULT);
  // Some of HDF5's messages span lines (the POSIX driver's read errors); ours are one line.
  for (char& c : message)
    if (c == '\n') c = ' ';
  while (!message.empty() && message.back() == ' ') message.pop_back();
  if (message.empty()) return "no message from HDF5";
  // "bad version number for hyperslab selection", "... for layout message": a part of the file
  // in a format newer than this library reads (HDF5 2.0 writes some with libver='latest').
  if (message.find("version number") != std::string::npos) {
    unsigned major = 0, minor = 0, release = 0;
    H5get_libversion(&major, &minor, &release);
    message += " (this is HDF5 " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release) +
               ": the file was written in a newer format than it reads; write it with an older libver, e.g. "
               "h5py.File(..., libver='v110'), or build ringtrain with a newer HDF5)";
  }
  return message;
}

}  // namespace ringtrain::h5

namespace ringtrain::check {

// hid_t, herr_t, htri_t and HDF5's enums (H5D_LAYOUT_ERROR, H5T_ORDER_ERROR, ...) all
// signal failure with a negative value.
template <typename T>
T h5(T rc, const char* call, const char* file, int line) {
  bool failed = false;
  if constexpr (std::is_enum_v<T>) {
    failed = static_cast<std::make_signed_t<std::underlying_type_t<T>>>(rc) < 0;
  } else {
    static_assert(std::is_signed_v<T>, "RT_H5_CHECK expects hid_t, herr_t, htri_t or an HDF5 enum");
    failed = rc < 0;
  }
  if (failed) {
    const std::string* where = ::ringtrain::h5::ErrorContext::current();
    throw DataError(fmt::format("{}{}{}", where ? *where : "", where ? ": " : "",
                                failure_message(call, file, line, ::ringtrain::h5::innermost_error())));
  }
  return rc;
}

}  // namespace ringtrain::check

#define RT_H5_CHECK(call) ::ringtrain::check::h5((call), #call, __FILE__, __LINE__)
