// OpenFileCache (see header). A linear scan finds a file: the cache holds a handful of them.
#include "data/open_file_cache.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "data/h5_io.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::data {
namespace {
// Enough for the few files a shuffle window or one batch's windows touch at once; well under
// descriptor limits.
constexpr std::size_t kOpenFiles = 16;
}  // namespace

OpenFileCache::OpenFileCache(std::string key) : key_(std::move(key)) {}

OpenFileCache::~OpenFileCache() {
  const auto guard = h5::lock();
  open_.clear();
}

OpenFileCache::OpenFile& OpenFileCache::open(std::size_t index, const std::string& path, const Expected& expected) {
  ++uses_;
  for (auto& f : open_)
    if (f.index == index) {
      f.last_use = uses_;
      check_unchanged(f.file, path, expected.stamp);
      return f;
    }
  if (open_.size() == kOpenFiles)
    open_.erase(std::min_element(open_.begin(), open_.end(),
                                 [](const OpenFile& a, const OpenFile& b) { return a.last_use < b.last_use; }));
  OpenFile f;
  f.index = index;
  f.last_use = uses_;
  f.file = open_read_only(path);
  check_unchanged(f.file, path, expected.stamp);
  f.dataset = open_dataset(f.file, path, key_);
  // Redundant while the stamp holds; it is what keeps a read inside the buffer it was sized for.
  const DatasetShape now = shape_of(f.dataset);
  const std::optional<SampleType> type = classify(now.type);
  const std::vector<std::int64_t> dims(now.dims.begin(), now.dims.end());
  RT_REQUIRE(dims == expected.dims && type == expected.type, DataError,
             "{}: dataset '{}' is now [{}] {} but was [{}] {} when the run opened it: a data file must not change "
             "while a run reads it",
             path, key_, fmt::join(dims, ", "), type ? sample_type_name(*type) : "of another type",
             fmt::join(expected.dims, ", "), sample_type_name(expected.type));
  f.mem_type = native_type_of(f.dataset);
  open_.push_back(std::move(f));
  return open_.back();
}

void OpenFileCache::check_unchanged(hid_t file, const std::string& path, const FileStamp& expected) {
  const FileStamp now = stamp_of(file, path);
  if (now == expected) return;
  const std::string what =
      now.device != expected.device || now.inode != expected.inode ? std::string("it is another file now (replaced)")
      : now.bytes != expected.bytes ? fmt::format("its size went from {} to {} bytes", expected.bytes, now.bytes)
                                    : std::string("it was modified");
  throw DataError(
      fmt::format("{}: the file changed since the run opened it ({}): a data file must not change while a "
                  "run reads it",
                  path, what));
}

}  // namespace ringtrain::data
