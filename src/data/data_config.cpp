// read_data_config: the [data] keys, each declared once below with its default, range and doc.
// A file list may be one string or an array; `test = ""` means no test set.
#include "ringtrain/data/data_config.hpp"

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

const StringListKey kTrain({.name = "data.train",
                            .doc = "a file, a glob (`\"shards/train-*.h5\"`, matches sorted) or a list of them; every "
                                   "file holds samples `[N,C,H,W]` (uint/int 8-64 bit or IEEE float16/32/64) and "
                                   "integer `labels` `[N]`, with the same names, dtypes and sample shape; the sample "
                                   "index runs through the files in order",
                            .required = true},
                           {});
const StringListKey kTest(
    {.name = "data.test",
     .doc = "the test set, as `data.train` (empty or `\"\"`: none; then no accuracy is evaluated)"},
    {});
const EnumKey<DataFormat> kFormat(
    {.name = "data.format",
     .doc = "what the files hold: `images` (samples and integer labels, one per sample) or `tokens` (a token "
            "stream, see `ringtrain data convert --text/--tokens`, cut into windows of `data.block_size` + 1 tokens: "
            "inputs and next-token targets, for language models)"},
    DataFormat::images, {{"images", DataFormat::images}, {"tokens", DataFormat::tokens}});
const IntKey kBlockSize({.name = "data.block_size",
                         .doc = "tokens per input window (the model's input length)",
                         .range = {1, std::int64_t{1} << 20},
                         .default_doc = "the model's `block_size`",
                         .read_when = {"data.format", {"tokens"}}},
                        0);
const StringKey kImagesKey({.name = "data.images_key",
                            .doc = "name of the samples dataset inside the files",
                            .read_when = {"data.format", {"images"}}},
                           "images");
const StringKey kLabelsKey({.name = "data.labels_key",
                            .doc = "name of the labels dataset inside the files",
                            .read_when = {"data.format", {"images"}}},
                           "labels");
const EnumKey<ReadStrategy> kStrategy(
    {.name = "data.strategy",
     .doc = "`memory` (the dataset fits in each node's shared memory): each rank reads its contiguous 1/W of the data "
            "once, in large reads, into one shared copy per node; epochs come from memory. `stream`, for data larger "
            "than memory: read while training, HDF5 chunk by chunk in a shuffled chunk order (what the number of "
            "ranks changes: docs/ARCHITECTURE.md)"},
    ReadStrategy::memory,
    {{std::string(read_strategy_name(ReadStrategy::memory)), ReadStrategy::memory},
     {std::string(read_strategy_name(ReadStrategy::stream)), ReadStrategy::stream}});
const EnumKey<NonFinite> kNonFinite({.name = "data.nonfinite",
                                     .doc = "NaN or Inf in float samples (checked when the data is opened): stop with "
                                            "an error, or `skip` those samples",
                                     .read_when = {"data.format", {"images"}}},
                                    NonFinite::error, {{"error", NonFinite::error}, {"skip", NonFinite::skip}});
const IntKey kPrefetch({.name = "data.prefetch",
                        .doc = "batches decoded, augmented and normalized ahead on a background thread (0: on the "
                               "training thread)",
                        .range = Range::between(0, 1024)},
                       2);
const IntKey kShuffleWindow({.name = "data.shuffle_window",
                             .doc = "`stream`: samples shuffled together (whole chunks)",
                             .range = Range::at_least(1)},
                            16384);
const IntKey kReadAhead(
    {.name = "data.read_ahead", .doc = "`stream`: shuffle windows read ahead", .range = Range::at_least(1)}, 2);
const NumberListKey kMean({.name = "data.mean",
                           .doc = "one value or one per channel: inputs are `(x - mean) / std`, `x` = uint8 value / "
                                  "255, other dtypes as stored",
                           .read_when = {"data.format", {"images"}}},
                          {0.0});
const NumberListKey kStd({.name = "data.std",
                          .doc = "one value or one per channel (see `data.mean`); the count is checked against the "
                                 "samples' channels",
                          .range = Range::above(0),
                          .read_when = {"data.format", {"images"}}},
                         {1.0});
const EnumKey<AugmentOn> kAugmentOn(
    {.name = "data.augment_on",
     .doc = "where training batches are cropped, flipped and normalized: `cpu` (loader threads, f32 batches uploaded), "
            "`gpu` (uint8 batches uploaded, a quarter of the bytes, augmented on the device into the activation dtype; "
            "the same values bit for bit), `auto` (`gpu` on the `cuda` backend with uint8 data, else `cpu`). `gpu` on "
            "a CPU run or non-uint8 data is an error. Evaluation always decodes on the host",
     .read_when = {"data.format", {"images"}}},
    AugmentOn::automatic, {{"auto", AugmentOn::automatic}, {"cpu", AugmentOn::cpu}, {"gpu", AugmentOn::gpu}});
const IntKey kCropPadding({.name = "data.augment.crop_padding",
                           .doc = "training only: a crop of the original size at a random offset from the image "
                                  "zero-padded by this many pixels, drawn from (seed, epoch, sample index)",
                           .range = Range::between(0, 4096),
                           .read_when = {"data.format", {"images"}}},
                          0);
const BoolKey kFlip({.name = "data.augment.flip",
                     .doc = "training only: left-right mirror with probability 1/2, drawn like the crop",
                     .read_when = {"data.format", {"images"}}},
                    false);

// The files of a list, without empty entries; the training list must name at least one.
std::vector<std::string> file_list(Config& data, const StringListKey& key) {
  std::vector<std::string> files = data.get(key);
  std::erase(files, "");
  RT_REQUIRE(!key.required() || !files.empty(), ConfigError, "config: {}: key '{}': no file given", data.source(),
             key.name());
  return files;
}

}  // namespace

DatasetSpec DataConfig::spec(const std::vector<std::string>& sources) const {
  DatasetSpec s;
  s.sources = sources;
  s.images_key = images_key;
  s.labels_key = labels_key;
  s.strategy = strategy;
  s.nonfinite = nonfinite;
  return s;
}

TokenDatasetSpec DataConfig::token_spec(const std::vector<std::string>& sources) const {
  TokenDatasetSpec s;
  s.sources = sources;
  s.block_size = block_size;
  s.strategy = strategy;
  return s;
}

DataConfig read_data_config(Config& data, std::int64_t model_block_size) {
  DataConfig d;
  d.train = file_list(data, kTrain);
  d.test = file_list(data, kTest);
  d.format = data.get(kFormat);
  d.strategy = data.get(kStrategy);
  d.prefetch = static_cast<int>(data.get(kPrefetch));
  d.shuffle_window = data.get(kShuffleWindow);
  d.read_ahead = data.get(kReadAhead);
  if (d.format == DataFormat::tokens) {
    d.block_size = data.get(kBlockSize, model_block_size);
    RT_REQUIRE(d.block_size > 0, ConfigError,
               "data.block_size: required for token data (the model has no `block_size` to default to)");
    RT_REQUIRE(model_block_size <= 0 || d.block_size <= model_block_size, ConfigError,
               "data.block_size = {} is longer than model.block_size = {}: the model has no positions past {}",
               d.block_size, model_block_size, model_block_size);
    return d;
  }
  d.images_key = data.get(kImagesKey);
  d.labels_key = data.get(kLabelsKey);
  d.nonfinite = data.get(kNonFinite);
  d.normalize.mean = data.get(kMean);
  d.normalize.std = data.get(kStd);
  d.augment_on = data.get(kAugmentOn);
  d.augment.crop_padding = data.get(kCropPadding);
  d.augment.flip = data.get(kFlip);
  return d;
}

}  // namespace ringtrain
