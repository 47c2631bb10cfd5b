// output_file: where an output the user named is written. A device, FIFO or directory in its
// place is refused (the rename into place replaced them: `data convert -o /dev/full` as root
// replaced the device node with an HDF5 file); a symbolic link is written through. And
// write_file_atomic's failures name the file, not its temporary.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/files.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

std::string refusal(const std::string& path) {
  try {
    output_file(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(OutputFile, FilesAndNewPathsAreThemselves) {
  const fs::path dir = fs::temp_directory_path() / ("ringtrain-output-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "out.h5").string();
  EXPECT_EQ(output_file(file), file);  // not there yet
  std::ofstream(file) << "x";
  EXPECT_EQ(output_file(file), file);
  fs::remove_all(dir);
}

TEST(OutputFile, ALinkIsWrittenThrough) {
  const fs::path dir = fs::temp_directory_path() / ("ringtrain-output-link-" + std::to_string(::getpid()));
  fs::create_directories(dir / "scratch");
  const fs::path target = fs::weakly_canonical(dir / "scratch" / "train.h5");
  fs::create_symlink(target, dir / "train.h5");
  EXPECT_EQ(output_file((dir / "train.h5").string()), target.string());  // a target not written yet
  std::ofstream(target) << "x";
  EXPECT_EQ(output_file((dir / "train.h5").string()), target.string());
  fs::remove_all(dir);
}

TEST(OutputFile, SpecialFilesAreRefused) {
  EXPECT_EQ(refusal("/dev/null"),
            "/dev/null: is a character device: an output is written to a file (it would be "
            "replaced); give a file's path");
  const fs::path dir = fs::temp_directory_path() / ("ringtrain-output-special-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_NE(refusal(dir.string()).find(": is a directory:"), std::string::npos);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(refusal(fifo).find(": is a FIFO:"), std::string::npos);
  fs::create_symlink("/dev/null", dir / "link-to-device");
  EXPECT_NE(refusal((dir / "link-to-device").string()).find("/dev/null: is a character device"), std::string::npos);
  fs::remove_all(dir);
}

// A write_file_atomic that fails (here the file-size limit: EFBIG, as a full disk gives ENOSPC)
// names the file the caller asked for, not its temporary name (config.toml.tmp.3oH9bp, which is
// already removed), and leaves neither.
TEST(WriteFileAtomic, AFailedWriteNamesTheFileNotItsTemporary) {
  const fs::path dir = fs::temp_directory_path() / ("ringtrain-atomic-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "config.toml").string();
  struct rlimit before {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  struct rlimit small = before;
  small.rlim_cur = 1024;
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write_file_atomic(path, std::string(4096, 'x'));
  } catch (const IoError& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previous);
  EXPECT_EQ(message, path + ": write failed: File too large");
  EXPECT_TRUE(fs::is_empty(dir)) << "a file was left behind";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ringtrain
