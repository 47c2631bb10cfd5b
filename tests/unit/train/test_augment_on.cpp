// data.augment_on resolved for a run (augment_on_gpu): "auto" is the GPU exactly for a cuda run
// with uint8 data, "cpu" never, and "gpu" on a CPU run or non-uint8 data is a ConfigError
// naming the key and the reason.
#include <gtest/gtest.h>

#include <string>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/train/train_config.hpp"

namespace ringtrain {
namespace {

TrainConfig with_augment_on(const std::string& value) {
  Config c = Config::parse("[data]\ntrain = \"t.h5\"\naugment_on = \"" + value + "\"\n", "run.toml");
  return read_train_config(c, "run");
}

std::string error_of(const TrainConfig& tc, bool on_gpu, SampleType samples) {
  try {
    augment_on_gpu(tc, on_gpu, samples);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AugmentOn, AutoIsTheGpuForACudaRunWithUint8Data) {
  Config c = Config::parse("[data]\ntrain = \"t.h5\"\n", "run.toml");
  const TrainConfig defaults = read_train_config(c, "run");
  for (const TrainConfig& tc : {defaults, with_augment_on("auto")}) {
    EXPECT_TRUE(augment_on_gpu(tc, true, SampleType::u8));
    EXPECT_FALSE(augment_on_gpu(tc, false, SampleType::u8));
    EXPECT_FALSE(augment_on_gpu(tc, true, SampleType::f32));
    EXPECT_FALSE(augment_on_gpu(tc, true, SampleType::i8));
  }
}

TEST(AugmentOn, CpuAndGpuAreHonouredOrRefused) {
  const TrainConfig cpu = with_augment_on("cpu");
  EXPECT_FALSE(augment_on_gpu(cpu, true, SampleType::u8));
  EXPECT_FALSE(augment_on_gpu(cpu, false, SampleType::f16));
  const TrainConfig gpu = with_augment_on("gpu");
  EXPECT_TRUE(augment_on_gpu(gpu, true, SampleType::u8));
  EXPECT_EQ(error_of(gpu, false, SampleType::u8),
            "data.augment_on: \"gpu\" needs a run on the cuda backend; this one runs on the CPU");
  EXPECT_EQ(error_of(gpu, true, SampleType::f32),
            "data.augment_on: \"gpu\" needs uint8 samples; data.train holds float32");
}

}  // namespace
}  // namespace ringtrain
