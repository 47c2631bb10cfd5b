// libFuzzer target for the dataset readers: a valid image dataset (samples [N, C, H, W] and
// labels [N]) or token dataset (tokens [N] with vocab_size and tokenizer, the root's format
// attributes) is written, edited as the input says (tests/fuzz/h5_craft.hpp: datasets and
// attributes of any type and shape, values out of range, groups and links in their place),
// then opened on one rank with the memory or the stream strategy and read through the loader
// for a few batches, as a training run would. Each step either succeeds or throws a ringtrain
// error of one line that names the file; anything else (a crash, a sanitizer report, another
// exception, an allocation beyond libFuzzer's -malloc_limit_mb) is a finding.
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset_open.hpp"
#include "fuzz/fuzz_support.hpp"
#include "fuzz/h5_craft.hpp"
#include "hdf5/h5_attributes.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/token_loader.hpp"
#include "ringtrain/data/tokens.hpp"
#include "unit/data/h5_files.hpp"

namespace {

using namespace ringtrain;

// Reads up to three batches of a loader made by make_loader: each step a clean read.
template <typename L, typename Make>
void read_batches(const std::string& path, Make&& make_loader) {
  std::unique_ptr<L> loader;
  if (!fuzz::clean_read("loader", path, false, [&] { loader = make_loader(); })) return;
  for (std::int64_t b = 0; b < std::min<std::int64_t>(3, loader->steps_per_epoch()); ++b)
    if (!fuzz::clean_read("batch", path, true, [&] { loader->next(); })) return;
}

void fuzz_images(FuzzedDataProvider& in, const std::string& path, const std::uint8_t* input, std::size_t size) {
  const auto n = in.ConsumeIntegralInRange<hsize_t>(1, 12);
  const std::vector<hsize_t> dims = {n, in.ConsumeIntegralInRange<hsize_t>(1, 3),
                                     in.ConsumeIntegralInRange<hsize_t>(1, 5),
                                     in.ConsumeIntegralInRange<hsize_t>(1, 5)};
  const hsize_t chunk_rows = in.ConsumeIntegralInRange<hsize_t>(0, n);
  {
    test::H5FileWriter writer(path);
    std::vector<std::uint8_t> samples(n * dims[1] * dims[2] * dims[3]);
    for (std::size_t i = 0; i < samples.size(); ++i) samples[i] = static_cast<std::uint8_t>(i * 37);
    std::vector<std::uint8_t> labels(n);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i % 10);
    writer.add("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, dims, samples, chunk_rows);
    writer.add("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {n}, labels, chunk_rows);
    fuzz::H5Craft(in).edit(writer.file(), {{"images", "labels"}, {"format", "format_version", "classes"}}, 4);
  }
  fuzz::keep_for_replay(path, "images", input, size);
  DatasetSpec spec;
  spec.sources = {path};
  spec.strategy = in.ConsumeBool() ? ReadStrategy::memory : ReadStrategy::stream;
  spec.nonfinite = in.ConsumeBool() ? NonFinite::error : NonFinite::skip;
  spec.read_block_bytes = in.ConsumeIntegralInRange<std::int64_t>(1, 4096);
  std::shared_ptr<const Dataset> data;
  if (!fuzz::clean_read("open", path, true, [&] { data = data::open_dataset(MPI_COMM_WORLD, MPI_COMM_WORLD, spec); }))
    return;
  LoaderOptions options;
  options.training = in.ConsumeBool();
  options.batch_size = in.ConsumeIntegralInRange<std::int64_t>(1, 4);
  options.prefetch = 0;
  options.augment.crop_padding = in.ConsumeIntegralInRange<std::int64_t>(0, 2);
  options.augment.flip = in.ConsumeBool();
  read_batches<Loader>(path, [&] { return std::make_unique<Loader>(data, options); });
}

void fuzz_tokens(FuzzedDataProvider& in, const std::string& path, const std::uint8_t* input, std::size_t size) {
  const auto n = in.ConsumeIntegralInRange<hsize_t>(2, 64);
  {
    test::H5FileWriter writer(path);
    h5::write_string_attr(writer.file(), "format", {kTokenFormatName}, true);
    h5::write_attr<std::int32_t>(writer.file(), "format_version", kTokenFormatVersion);
    std::vector<std::uint16_t> tokens(n);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i * 7 % 300);
    writer.add("tokens", H5T_STD_U16LE, H5T_NATIVE_UINT16, {n}, tokens, in.ConsumeIntegralInRange<hsize_t>(0, n));
    {
      h5::Dataset d(RT_H5_CHECK(H5Dopen2(writer.file(), "tokens", H5P_DEFAULT)));
      h5::write_attr<std::int64_t>(d, "vocab_size", 300);
      h5::write_string_attr(d, "tokenizer", {"external"}, true);
    }
    fuzz::H5Craft(in).edit(writer.file(), {{"tokens"}, {"format", "format_version", "vocab_size", "tokenizer"}}, 4);
  }
  fuzz::keep_for_replay(path, "tokens", input, size);
  TokenDatasetSpec spec;
  spec.sources = {path};
  spec.block_size = in.ConsumeIntegralInRange<std::int64_t>(1, 8);
  spec.strategy = in.ConsumeBool() ? ReadStrategy::memory : ReadStrategy::stream;
  spec.read_block_bytes = in.ConsumeIntegralInRange<std::int64_t>(1, 256);
  std::shared_ptr<const TokenDataset> data;
  if (!fuzz::clean_read("open", path, true,
                        [&] { data = data::open_token_dataset(MPI_COMM_WORLD, MPI_COMM_WORLD, spec); }))
    return;
  TokenLoaderOptions options;
  options.training = in.ConsumeBool();
  options.batch_size = in.ConsumeIntegralInRange<std::int64_t>(1, 4);
  options.prefetch = 0;
  read_batches<TokenLoader>(path, [&] { return std::make_unique<TokenLoader>(data, options); });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::start_process(argc, argv, "dataset");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string path = (fuzz::process().dir / "data.h5").string();
  if (in.ConsumeBool())
    fuzz_images(in, path, data, size);
  else
    fuzz_tokens(in, path, data, size);
  return 0;
}
