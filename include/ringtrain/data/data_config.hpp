// DataConfig: the typed, validated [data] section of a run's config (files, keys, reading
// strategy, prefetch, normalization, [data.augment]). Every message names the key and value.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/data/augment.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/tokens.hpp"

namespace ringtrain {

class Config;

// data.augment_on: where the training batches are augmented and normalized. automatic ("auto")
// is the GPU for a run on the cuda backend with uint8 data, else the CPU; the trainer resolves it.
enum class AugmentOn { automatic, cpu, gpu };

// data.format: image samples with one label each, or a token stream for language models.
enum class DataFormat { images, tokens };

struct DataConfig {
  DataFormat format = DataFormat::images;
  std::int64_t block_size = 0;     // tokens: tokens per input window
  std::vector<std::string> train;  // files or globs (required)
  std::vector<std::string> test;   // empty: no evaluation
  std::string images_key = "images";
  std::string labels_key = "labels";
  ReadStrategy strategy = ReadStrategy::memory;
  NonFinite nonfinite = NonFinite::error;
  int prefetch = 2;
  std::int64_t shuffle_window = 16384;  // stream
  std::int64_t read_ahead = 2;          // stream
  Normalization normalize;              // data.mean, data.std
  AugmentOptions augment;               // [data.augment]
  AugmentOn augment_on = AugmentOn::automatic;

  // The dataset spec for one of the file lists above (images, tokens).
  DatasetSpec spec(const std::vector<std::string>& sources) const;
  TokenDatasetSpec token_spec(const std::vector<std::string>& sources) const;
};

// Reads the [data] section (the Config returned by config.section("data")). model_block_size:
// the model's `block_size` (0: none), the default of data.block_size.
DataConfig read_data_config(Config& data, std::int64_t model_block_size = 0);

}  // namespace ringtrain
