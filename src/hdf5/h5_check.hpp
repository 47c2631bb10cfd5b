// RT_H5_CHECK(call): runs an HDF5 call and throws DataError naming the call, file, line and
// HDF5's innermost error message, prefixed by the current h5::ErrorContext (the file path).
// Plus h5::Handle, an owning hid_t closed with the H5*close that matches its kind, and h5::lock.
#pragma once
#include <hdf5.h>

#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ringtrain/core/error.hpp"

namespace ringtrain::h5 {

// Parallel HDF5 is not built thread-safe, and the loader reads from background threads: any
// HDF5 call that may run while another thread can make one (loader threads, or code running
// while a loader exists) holds this process-wide lock. Recursive, so helpers can take it too.
inline std::unique_lock<std::recursive_mutex> lock() {
  static std::recursive_mutex mutex;
  return std::unique_lock<std::recursive_mutex>(mutex);
}

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
  return message.empty() ? "no message from HDF5" : message;
}

// Source paths shortened to the part below src/ so messages stay one readable line.
constexpr std::string_view short_source(std::string_view file) {
  const auto pos = file.rfind("src/");
  return pos == std::string_view::npos ? file : file.substr(pos + 4);
}

[[noreturn]] inline void throw_h5_error(const char* call, const char* file, int line) {
  const std::string* where = ErrorContext::current();
  throw DataError(fmt::format("{}{}{} failed ({}:{}): {}", where ? *where : "", where ? ": " : "", call,
                              short_source(file), line, innermost_error()));
}

// hid_t, herr_t, htri_t and HDF5's enums (H5D_LAYOUT_ERROR, H5T_ORDER_ERROR, ...) all
// signal failure with a negative value.
template <typename T>
T check(T rc, const char* call, const char* file, int line) {
  if constexpr (std::is_enum_v<T>) {
    if (static_cast<std::make_signed_t<std::underlying_type_t<T>>>(rc) < 0) throw_h5_error(call, file, line);
  } else {
    static_assert(std::is_signed_v<T>, "RT_H5_CHECK expects hid_t, herr_t, htri_t or an HDF5 enum");
    if (rc < 0) throw_h5_error(call, file, line);
  }
  return rc;
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
  herr_t close() { return Close(std::exchange(id_, H5I_INVALID_HID)); }
  void reset() {
    if (id_ >= 0) Close(std::exchange(id_, H5I_INVALID_HID));
  }

 private:
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

// An expression: yields the call's result when it is non-negative, throws DataError otherwise.
#define RT_H5_CHECK(call) ::ringtrain::h5::check((call), #call, __FILE__, __LINE__)
