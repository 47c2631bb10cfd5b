// read_idx: round trips through plain and gzipped files the test writes, and the errors for
// truncated, malformed and missing files (each naming the path).
#include <gtest/gtest.h>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/idx.hpp"
#include "support/test_context.hpp"
#include "unit/data/data_test_util.hpp"

namespace ringtrain {
namespace {

using test::idx_header;
using test::pattern_bytes;
using test::write_bytes;
using test::write_idx;

std::string idx_error(const std::string& path) {
  try {
    read_idx(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Idx : public ::testing::TestWithParam<bool> {};  // parameter: gzip

TEST_P(Idx, RoundTrip) {
  const bool gzip = GetParam();
  const auto dir = test::temp_dir(gzip ? "idx-gz" : "idx-plain");
  const auto images = pattern_bytes(3 * 4 * 5, 9);
  write_idx(dir / "images.idx", {3, 4, 5}, images, gzip);
  const IdxArray got = read_idx((dir / "images.idx").string());
  EXPECT_EQ(got.dims, (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(got.data, images);

  // Dims above 255 exercise every byte of the big-endian header.
  const auto labels = pattern_bytes(70000, 1);
  write_idx(dir / "labels.idx", {70000}, labels, gzip);
  const IdxArray lab = read_idx((dir / "labels.idx").string());
  EXPECT_EQ(lab.dims, (std::vector<std::int64_t>{70000}));
  EXPECT_EQ(lab.data, labels);
}

TEST_P(Idx, TruncatedFileNamesPathAndSizes) {
  const bool gzip = GetParam();
  const auto dir = test::temp_dir(gzip ? "idx-trunc-gz" : "idx-trunc");
  auto bytes = idx_header({3, 4, 5});
  const auto body = pattern_bytes(50);
  bytes.insert(bytes.end(), body.begin(), body.end());
  const auto path = (dir / "short.idx").string();
  write_bytes(path, bytes, gzip);
  const std::string msg = idx_error(path);
  EXPECT_TRUE(has(msg, path)) << msg;
  EXPECT_TRUE(has(msg, "truncated")) << msg;
  EXPECT_TRUE(has(msg, "need 60 data bytes, found 50")) << msg;

  // A header cut short is truncated too.
  auto header = idx_header({3, 4, 5});
  header.resize(7);
  write_bytes(path, header, gzip);
  EXPECT_TRUE(has(idx_error(path), "truncated IDX header")) << idx_error(path);
}

INSTANTIATE_TEST_SUITE_P(PlainAndGzip, Idx, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "gzip" : "plain"; });

TEST(IdxErrors, BadMagic) {
  const auto dir = test::temp_dir("idx-magic");
  const auto path = (dir / "bad.idx").string();
  write_bytes(path, {0x12, 0x34, 0x08, 0x01, 0, 0, 0, 1, 7}, false);
  std::string msg = idx_error(path);
  EXPECT_TRUE(has(msg, path) && has(msg, "not an IDX file") && has(msg, "12 34 08 01")) << msg;

  // Right shape of header, wrong element type (0x0d = float).
  auto header = idx_header({2}, 0x0d);
  header.insert(header.end(), 8, 0);
  write_bytes(path, header, false);
  msg = idx_error(path);
  EXPECT_TRUE(has(msg, "unsupported IDX element type 0x0d (supported: 0x08 unsigned byte)")) << msg;

  write_bytes(path, {0, 0, 0x08, 0}, false);  // zero dims
  EXPECT_TRUE(has(idx_error(path), "not an IDX file")) << idx_error(path);

  write_bytes(path, {}, false);
  EXPECT_TRUE(has(idx_error(path), "not an IDX file")) << idx_error(path);
}

TEST(IdxErrors, TrailingBytes) {
  const auto dir = test::temp_dir("idx-long");
  const auto path = (dir / "long.idx").string();
  write_idx(path, {4}, pattern_bytes(5), true);  // one byte more than dims say
  const std::string msg = idx_error(path);
  EXPECT_TRUE(has(msg, path) && has(msg, "longer than its dims [4]")) << msg;
}

TEST(IdxErrors, MissingFile) {
  const auto path = (test::temp_dir("idx-missing") / "nope-images.gz").string();
  const std::string msg = idx_error(path);
  EXPECT_EQ(msg, path + ": no such file");
}

}  // namespace
}  // namespace ringtrain
