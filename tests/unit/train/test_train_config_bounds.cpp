// Config values whose products size the run (batch x accumulation x ranks, epochs, crop padding)
// are bounded where they are read, so no product can overflow: a huge value is a one-line
// error naming the key, never a wrapped size. Timeouts must be finite.
#include <gtest/gtest.h>

#include <string>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/train/train_config.hpp"

namespace ringtrain {
namespace {

std::string error_of(const std::string& toml) {
  try {
    Config c = Config::parse("[data]\ntrain = \"t.h5\"\n" + toml + "\n", "run.toml");
    read_train_config(c, "run");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TrainConfigBounds, ProductsOfValuesCannotOverflow) {
  EXPECT_EQ(error_of("[train]\nbatch_size = 9223372036854775807"),
            "config: run.toml: key 'train.batch_size': must be in [1, 1048576], got 9223372036854775807");
  EXPECT_NE(error_of("[train]\naccumulation_steps = 4096").find("'train.accumulation_steps': must be in [1, 1024]"),
            std::string::npos);
  EXPECT_NE(error_of("[train]\nepochs = 2000000000").find("'train.epochs': must be in [1, 1000000]"),
            std::string::npos);
  EXPECT_NE(error_of("[data.augment]\ncrop_padding = 100000").find("'data.augment.crop_padding': must be in [0, 4096]"),
            std::string::npos);
  EXPECT_EQ(error_of("[train]\nbatch_size = 1048576\naccumulation_steps = 1024"), "(no error)");
}

TEST(TrainConfigBounds, TimeoutsAreFinite) {
  EXPECT_EQ(error_of("[comm]\ntimeout_s = inf"), "config: run.toml: key 'comm.timeout_s': must be > 0, got inf");
  EXPECT_EQ(error_of("[comm]\ntimeout_s = nan"), "config: run.toml: key 'comm.timeout_s': must be > 0, got nan");
}

}  // namespace
}  // namespace ringtrain
