// ckpt/file_space: the room a checkpoint file needs is allocated before the save, held across
// the truncation HDF5's create makes (before, that truncation gave it back, and a disk another
// writer filled during the save failed a rank's write half way: a hang until the watchdog), and
// what the file did not use is given back after it is closed. Checked by the blocks the file
// system allocates (st_blocks), on a file system with fallocate (the test directory's; skipped
// elsewhere).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/file_space.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

struct Space {
  std::int64_t size = 0;       // st_size
  std::int64_t allocated = 0;  // st_blocks, in bytes
};

Space space_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return {static_cast<std::int64_t>(st.st_size), static_cast<std::int64_t>(st.st_blocks) * 512};
}

TEST(FileSpace, RoomIsHeldThroughATruncationAndGivenBackAfter) {
  const fs::path dir = fs::temp_directory_path() / ("ringtrain-file-space-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "ckpt-000000020.h5.tmp").string();
  constexpr std::int64_t kRoom = std::int64_t{8} << 20;
  ckpt::create_with_room(path, kRoom);
  if (space_of(path).allocated < kRoom) {
    fs::remove_all(dir);
    GTEST_SKIP() << "this file system does not allocate with posix_fallocate";
  }
  fs::resize_file(path, 0);  // what H5Fcreate(H5F_ACC_TRUNC) does
  EXPECT_LT(space_of(path).allocated, kRoom) << "the truncation gave the room back";
  ckpt::hold_room(path, kRoom);
  EXPECT_EQ(space_of(path).size, 0) << "held without growing the file";
  EXPECT_GE(space_of(path).allocated, kRoom) << "the room is held again";
  std::ofstream(path, std::ios::binary) << std::string(1 << 20, 'x');  // the file as written: 1 MiB
  ckpt::release_unused_room(path);
  EXPECT_EQ(space_of(path).size, 1 << 20);
  EXPECT_LE(space_of(path).allocated, (1 << 20) + (64 << 10)) << "the unused room is given back";
  fs::remove_all(dir);
}

TEST(FileSpace, NoRoomIsOneLineNamingTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("ringtrain-file-space-full-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "ckpt-000000020.h5.tmp").string();
  try {
    ckpt::create_with_room(path, std::int64_t{1} << 60);  // an exabyte: more than any disk here
    FAIL() << "an exabyte was allocated";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": no room for "), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ringtrain
