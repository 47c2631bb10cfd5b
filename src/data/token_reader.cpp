// TokenReader (see header). Stream reads select exactly the tokens asked for: the datasets are
// read without a chunk cache, so HDF5 reads a part of an uncompressed chunk straight from the
// file rather than the whole chunk.
#include "data/token_reader.hpp"

#include <algorithm>

#include "data/h5_io.hpp"
#include "data/token_check.hpp"

namespace ringtrain::data {
namespace {
// Enough for the files one batch's windows touch; well under descriptor limits.
constexpr std::size_t kOpenFiles = 16;
}  // namespace

TokenReader::TokenReader(std::shared_ptr<const TokenDataset> data) : data_(std::move(data)) {}

TokenReader::~TokenReader() {
  const auto guard = h5::lock();
  open_.clear();
}

TokenReader::OpenFile& TokenReader::open(std::size_t index) {
  ++uses_;
  for (auto& f : open_)
    if (f.index == index) {
      f.last_use = uses_;
      return f;
    }
  if (open_.size() == kOpenFiles)
    open_.erase(std::min_element(open_.begin(), open_.end(),
                                 [](const OpenFile& a, const OpenFile& b) { return a.last_use < b.last_use; }));
  const TokenFile& tf = data_->files()[index];
  OpenFile f;
  f.index = index;
  f.last_use = uses_;
  h5::PropList fapl(RT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  RT_H5_CHECK(H5Pset_fapl_sec2(fapl));
  f.file = h5::File(RT_H5_CHECK(H5Fopen(tf.path.c_str(), H5F_ACC_RDONLY, fapl)));
  f.tokens = open_dataset(f.file, tf.path, data_->spec().tokens_key);
  f.mem_type = native_type_of(f.tokens);
  open_.push_back(std::move(f));
  return open_.back();
}

void TokenReader::read(std::int64_t begin, std::int64_t count, std::int32_t* out) {
  RT_REQUIRE(begin >= 0 && count >= 0 && begin <= data_->size() - count, DataError,
             "tokens [{}, {}) are outside the stream of {} tokens", begin, begin + count, data_->size());
  const SampleType type = data_->token_type();
  const auto tb = static_cast<std::int64_t>(sample_type_size(type));
  if (data_->spec().strategy == ReadStrategy::memory) {
    widen_tokens(type, data_->resident_tokens() + begin * tb, count, out);
    return;
  }
  const auto& files = data_->files();
  // The file holding token `begin`, then the ones after it while the run goes on.
  auto it = std::upper_bound(files.begin(), files.end(), begin,
                             [](std::int64_t v, const TokenFile& f) { return v < f.first; });
  const auto guard = h5::lock();
  for (auto f = it - 1; count > 0; ++f) {
    const std::int64_t row = begin - f->first;
    const std::int64_t n = std::min(count, f->tokens - row);
    h5::ErrorContext where(
        fmt::format("{}: dataset '{}', tokens {}-{}", f->path, data_->spec().tokens_key, row, row + n - 1));
    OpenFile& file = open(static_cast<std::size_t>(f - files.begin()));
    scratch_.resize(static_cast<std::size_t>(n * tb));
    read_rows(file.tokens, file.mem_type, row, n, n, H5P_DEFAULT, 1, scratch_.data());
    check_tokens(type, scratch_.data(), n, data_->vocab_size(), f->path, data_->spec().tokens_key, row);
    widen_tokens(type, scratch_.data(), n, out);
    out += n;
    begin += n;
    count -= n;
  }
}

}  // namespace ringtrain::data
