// CheckpointDir's listing: checkpoints newest first, and names that look like checkpoints but
// do not parse (a step too large for an int64) are ignored, not fatal (issue 19, item 5); the
// file names it takes a step from: ckpt-<decimal digits>.h5 and nothing else.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ringtrain/ckpt/checkpoint_dir.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

TEST(CheckpointDirListing, IgnoresNamesWhoseStepDoesNotParse) {
  const std::filesystem::path dir = test::temp_dir("ckpt-dir-listing");
  for (const char* name : {"ckpt-000000005.h5", "ckpt-000000012.h5", "ckpt-99999999999999999999999.h5", "notes.txt"})
    std::ofstream(dir / name) << "x";
  const CheckpointDir checkpoints(test::context(), dir.string(), 3);
  const std::vector<std::string> listed = checkpoints.list();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(std::filesystem::path(listed[0]).filename(), "ckpt-000000012.h5");
  EXPECT_EQ(std::filesystem::path(listed[1]).filename(), "ckpt-000000005.h5");
}

TEST(CheckpointDirNames, OnlyCkptDigitsH5HasAStep) {
  EXPECT_EQ(CheckpointDir::step_of_path("/runs/a/checkpoints/ckpt-000000012.h5"), 12);
  EXPECT_EQ(CheckpointDir::step_of_path("ckpt-7.h5"), 7);
  EXPECT_EQ(CheckpointDir::step_of_path("ckpt-9223372036854775807.h5"), 9223372036854775807);
  for (const char* name : {"ckpt-.h5", "ckpt-12a.h5", "ckpt--1.h5", "ckpt-+3.h5", "ckpt- 3.h5", "xckpt-1.h5",
                           "ckpt-1.h5.tmp", "ckpt-1.h5x", "ckpt-1", "ckpt-9223372036854775808.h5", ".h5", ""})
    EXPECT_EQ(CheckpointDir::step_of_path(name), -1) << "'" << name << "'";
}

}  // namespace
}  // namespace ringtrain
