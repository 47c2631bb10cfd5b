// read_data_config: defaults, a file or a list of files, strategies, normalization per channel,
// [data.augment], data.augment_on, and one-line errors naming the key and the value.
#include <gtest/gtest.h>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/data_config.hpp"

namespace ringtrain {
namespace {

DataConfig parse(const std::string& text) {
  Config c = Config::parse(text, "run.toml");
  Config data = c.section("data");
  DataConfig d = read_data_config(data);
  c.finish();
  return d;
}

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DataConfig, Defaults) {
  const DataConfig d = parse("[data]\ntrain = \"a.h5\"\n");
  EXPECT_EQ(d.train, (std::vector<std::string>{"a.h5"}));
  EXPECT_TRUE(d.test.empty());
  EXPECT_EQ(d.strategy, ReadStrategy::memory);
  EXPECT_EQ(d.nonfinite, NonFinite::error);
  EXPECT_EQ(d.prefetch, 2);
  EXPECT_EQ(d.normalize.mean, (std::vector<double>{0.0}));
  EXPECT_EQ(d.normalize.std, (std::vector<double>{1.0}));
  EXPECT_FALSE(d.augment.enabled());
  EXPECT_EQ(d.augment_on, AugmentOn::automatic);
  EXPECT_EQ(d.spec(d.train).images_key, "images");
}

TEST(DataConfig, ListsStrategiesAndAugmentation) {
  const DataConfig d = parse(
      "[data]\ntrain = [\"a.h5\", \"shards/*.h5\"]\ntest = \"\"\nstrategy = \"stream\"\nprefetch = 0\n"
      "nonfinite = \"skip\"\nmean = [0.5, 0.4, 0.3]\nstd = 0.25\nshuffle_window = 4096\nread_ahead = 3\n"
      "images_key = \"x\"\n[data.augment]\ncrop_padding = 4\nflip = true\n");
  EXPECT_EQ(d.train, (std::vector<std::string>{"a.h5", "shards/*.h5"}));
  EXPECT_TRUE(d.test.empty());
  EXPECT_EQ(d.strategy, ReadStrategy::stream);
  EXPECT_EQ(d.prefetch, 0);
  EXPECT_EQ(d.nonfinite, NonFinite::skip);
  EXPECT_EQ(d.normalize.mean, (std::vector<double>{0.5, 0.4, 0.3}));
  EXPECT_EQ(d.normalize.std, (std::vector<double>{0.25}));
  EXPECT_EQ(d.shuffle_window, 4096);
  EXPECT_EQ(d.read_ahead, 3);
  EXPECT_EQ(d.augment.crop_padding, 4);
  EXPECT_TRUE(d.augment.flip);
  EXPECT_EQ(d.augment_on, AugmentOn::automatic);
  EXPECT_EQ(parse("[data]\ntrain = \"a.h5\"\naugment_on = \"gpu\"\n").augment_on, AugmentOn::gpu);
  EXPECT_EQ(parse("[data]\ntrain = \"a.h5\"\naugment_on = \"cpu\"\n").augment_on, AugmentOn::cpu);
  EXPECT_EQ(parse("[data]\ntrain = \"a.h5\"\naugment_on = \"auto\"\n").augment_on, AugmentOn::automatic);
  const DatasetSpec spec = d.spec(d.train);
  EXPECT_EQ(spec.images_key, "x");
  EXPECT_EQ(spec.strategy, ReadStrategy::stream);
  EXPECT_EQ(spec.nonfinite, NonFinite::skip);
}

TEST(DataConfig, Errors) {
  const std::string train = "[data]\ntrain = \"a.h5\"\n";
  EXPECT_EQ(error_of("[data]\ntest = \"b.h5\"\n"), "config: run.toml: missing required key 'data.train'");
  EXPECT_EQ(error_of("[data]\ntrain = []\n"), "config: run.toml: key 'data.train': no file given");
  EXPECT_EQ(error_of("[data]\ntrain = [\"a.h5\", 3]\n"),
            "config: run.toml: key 'data.train': expected a string or an array of strings, got array [ 'a.h5', 3 ]");
  EXPECT_EQ(error_of(train + "strategy = \"disk\"\n"),
            "config: run.toml: key 'data.strategy': 'disk' is not one of \"memory\", \"stream\"");
  EXPECT_EQ(error_of(train + "nonfinite = \"zero\"\n"),
            "config: run.toml: key 'data.nonfinite': 'zero' is not one of \"error\", \"skip\"");
  EXPECT_EQ(error_of(train + "prefetch = -1\n"), "config: run.toml: key 'data.prefetch': must be in [0, 1024], got -1");
  EXPECT_EQ(error_of(train + "std = [1.0, 0.0]\n"), "config: run.toml: key 'data.std': must be > 0, got 0");
  EXPECT_EQ(error_of(train + "mean = \"zero\"\n"),
            "config: run.toml: key 'data.mean': expected a number or an array of numbers, got string 'zero'");
  EXPECT_EQ(error_of(train + "[data.augment]\ncrop_padding = -2\n"),
            "config: run.toml: key 'data.augment.crop_padding': must be in [0, 4096], got -2");
  EXPECT_EQ(error_of(train + "augment_on = \"host\"\n"),
            "config: run.toml: key 'data.augment_on': 'host' is not one of \"auto\", \"cpu\", \"gpu\"");
  EXPECT_EQ(error_of(train + "augment_on = true\n"),
            "config: run.toml: key 'data.augment_on': expected a string, got boolean true");
  EXPECT_EQ(error_of(train + "[data.augment]\nrotate = true\n"), "config: run.toml: unknown key 'data.augment.rotate'");
}

TEST(DataConfig, TokenWindowsDefaultToTheModelsBlockAndFitInIt) {
  Config c = Config::parse("[data]\ntrain = \"a.h5\"\nformat = \"tokens\"\n", "run.toml");
  Config data = c.section("data");
  EXPECT_EQ(read_data_config(data, 32).block_size, 32);
  Config longer = Config::parse("[data]\ntrain = \"a.h5\"\nformat = \"tokens\"\nblock_size = 64\n", "run.toml");
  Config longer_data = longer.section("data");
  try {
    read_data_config(longer_data, 32);
    FAIL() << "windows longer than the model's positions were accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "data.block_size = 64 is longer than model.block_size = 32: the model has no positions past 32");
  }
}

}  // namespace
}  // namespace ringtrain
