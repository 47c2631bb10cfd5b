// What the fuzz targets that read files share: MPI on one rank and a private scratch directory
// for the process, the rule every read must follow (succeed, or throw a ringtrain error of one
// line that names the file), and keeping the edited files for replay (tools/fuzz/cli-pass).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "ringtrain/core/error.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain::fuzz {

struct FuzzProcess {
  std::unique_ptr<Context> ctx;
  std::filesystem::path dir;  // removed at exit
};

inline FuzzProcess& process() {
  static FuzzProcess p;
  return p;
}

// This process's private scratch directory, made by the first call (named after `target`) and
// removed at exit.
inline const std::filesystem::path& scratch_dir(const std::string& target) {
  static const std::filesystem::path dir = [&] {
    auto made = std::filesystem::temp_directory_path() / ("ringtrain-fuzz-" + target + "-" + std::to_string(getpid()));
    std::filesystem::create_directories(made);
    std::atexit([] { std::filesystem::remove_all(scratch_dir(std::string())); });
    return made;
  }();
  return dir;
}

// For LLVMFuzzerInitialize: starts MPI (one rank) and makes the scratch directory.
inline FuzzProcess& start_process(int* argc, char*** argv, const std::string& target) {
  FuzzProcess& p = process();
  p.ctx = std::make_unique<Context>(argc, argv);
  p.dir = scratch_dir(target);
  return p;
}

// Runs one read of the file at `path`: true when it succeeded, false when it threw a ringtrain
// error of one line that names the file (or, with names_file false, any one-line error: checks
// of options rather than of the file). Anything else aborts, which libFuzzer reports.
template <typename F>
bool clean_read(const char* what, const std::string& path, bool names_file, F&& read) {
  try {
    read();
    return true;
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.find('\n') == std::string::npos && (!names_file || message.find(path) != std::string::npos))
      return false;
    std::fprintf(stderr, "fuzz: %s: error without the file's name or on several lines:\n%s\n", what, message.c_str());
    std::abort();
  }
}

// With RINGTRAIN_FUZZ_KEEP=DIR, a copy of each edited file goes to DIR as KIND-HASH.h5 (KIND:
// checkpoint, images or tokens; HASH of the input), for replaying through the ringtrain
// executable (tools/fuzz/cli-pass).
inline void keep_for_replay(const std::string& path, const char* kind, const std::uint8_t* data, std::size_t size) {
  const char* dir = std::getenv("RINGTRAIN_FUZZ_KEEP");
  if (dir == nullptr) return;
  const std::size_t hash = std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::filesystem::path copy =
      std::filesystem::path(dir) / (std::string(kind) + "-" + std::to_string(hash) + ".h5");
  std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
}

}  // namespace ringtrain::fuzz
