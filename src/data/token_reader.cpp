// TokenReader (see header). Stream reads select exactly the tokens asked for: the datasets are
// read without a chunk cache, so HDF5 reads a part of an uncompressed chunk straight from the
// file rather than the whole chunk.
#include "data/token_reader.hpp"

#include <algorithm>

#include "data/h5_io.hpp"
#include "data/token_check.hpp"

namespace ringtrain::data {

TokenReader::TokenReader(std::shared_ptr<const TokenDataset> data)
    : data_(std::move(data)), files_(data_->spec().tokens_key) {
  for (const TokenFile& f : data_->files()) expected_.push_back({f.stamp, {f.tokens}, data_->token_type()});
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
    const auto index = static_cast<std::size_t>(f - files.begin());
    OpenFileCache::OpenFile& file = files_.open(index, f->path, expected_[index]);
    scratch_.resize(static_cast<std::size_t>(n * tb));
    read_rows(file.dataset, file.mem_type, row, n, n, H5P_DEFAULT, 1, scratch_.data());
    check_tokens(type, scratch_.data(), n, data_->vocab_size(), f->path, data_->spec().tokens_key, row);
    widen_tokens(type, scratch_.data(), n, out);
    out += n;
    begin += n;
    count -= n;
  }
}

}  // namespace ringtrain::data
