// OpenFileCache (see header). A linear scan finds a file: the cache holds a handful of them.
#include "data/open_file_cache.hpp"

#include <algorithm>

#include "data/h5_io.hpp"

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

OpenFileCache::OpenFile& OpenFileCache::open(std::size_t index, const std::string& path) {
  ++uses_;
  for (auto& f : open_)
    if (f.index == index) {
      f.last_use = uses_;
      return f;
    }
  if (open_.size() == kOpenFiles)
    open_.erase(std::min_element(open_.begin(), open_.end(),
                                 [](const OpenFile& a, const OpenFile& b) { return a.last_use < b.last_use; }));
  OpenFile f;
  f.index = index;
  f.last_use = uses_;
  f.file = open_read_only(path);
  f.dataset = open_dataset(f.file, path, key_);
  f.mem_type = native_type_of(f.dataset);
  open_.push_back(std::move(f));
  return open_.back();
}

}  // namespace ringtrain::data
