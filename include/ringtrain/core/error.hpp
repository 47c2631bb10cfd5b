// The one exception hierarchy of ringtrain. Every failure a user can cause or meet is one of
// these, with a one-line message that names the file, key, dataset or value at fault.
#pragma once
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace ringtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ConfigError : public Error {  // bad config file, key, type or value
 public:
  using Error::Error;
};
class DataError : public Error {  // dataset missing, malformed or out of range
 public:
  using Error::Error;
};
class CommError : public Error {  // a collective or point-to-point call failed
 public:
  using Error::Error;
};
class IoError : public Error {  // files we write (metrics, summaries, checkpoints)
 public:
  using Error::Error;
};
class CorruptFileError : public IoError {  // a file we wrote earlier is damaged (checksum, truncated)
 public:
  using IoError::IoError;
};
class NumericError : public Error {  // non-finite loss or gradients
 public:
  using Error::Error;
};
class OutOfMemory : public Error {  // device memory exhausted (the batch-size finder catches it)
 public:
  using Error::Error;
};
// Host memory exhausted where the allocation can say what it was for: run_collectively reports
// "out of memory on rank R (host H) <context>" as for any std::bad_alloc, with the context.
class HostOutOfMemory : public std::bad_alloc {
 public:
  explicit HostOutOfMemory(std::string context) : context_(std::move(context)) {}
  const char* what() const noexcept override { return context_.c_str(); }
  const std::string& context() const { return context_; }

 private:
  std::string context_;
};
class NotCompiled : public Error {  // a backend that this build does not contain
 public:
  using Error::Error;
};

// Throws E with a formatted message when cond is false.
#define RT_REQUIRE(cond, E, ...)                    \
  do {                                              \
    if (!(cond)) throw E(fmt::format(__VA_ARGS__)); \
  } while (0)

}  // namespace ringtrain
