// Config: typed access, defaults in the resolved config, overrides, and one-line errors for
// syntax errors, unknown keys, wrong types and missing files.
#include <gtest/gtest.h>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Config, TypedValuesDefaultsAndResolvedOutput) {
  Config c = Config::parse("[train]\nepochs = 3\nlr = 0.5\nname = \"x\"\nflag = true\n", "a.toml");
  Config t = c.section("train");
  EXPECT_EQ(t.get_int("epochs", 1), 3);
  EXPECT_DOUBLE_EQ(t.get_double("lr", 0.1), 0.5);
  EXPECT_EQ(t.get_string("name", ""), "x");
  EXPECT_TRUE(t.get_bool("flag", false));
  EXPECT_EQ(t.get_int("batch_size", 64), 64);
  EXPECT_DOUBLE_EQ(c.get_double("train.epochs", 0.0), 3.0);  // integers are numbers too
  EXPECT_NO_THROW(c.finish());
  EXPECT_NE(c.to_toml().find("batch_size = 64"), std::string::npos) << c.to_toml();
}

TEST(Config, OverridesReplaceAndAdd) {
  Config c = Config::parse("[train]\nepochs = 3\n", "a.toml", {"train.epochs=5", "run.dir=runs/x", "optim.lr=1e-3"});
  EXPECT_EQ(c.get_int("train.epochs", 0), 5);
  EXPECT_EQ(c.get_string("run.dir", ""), "runs/x");
  EXPECT_DOUBLE_EQ(c.get_double("optim.lr", 0.0), 1e-3);
}

TEST(Config, SyntaxErrorNamesFileLineAndColumn) {
  const auto msg = error_of([] { Config::parse("[train]\nepochs = = 3\n", "bad.toml"); });
  EXPECT_NE(msg.find("bad.toml:2:"), std::string::npos) << msg;
}

TEST(Config, UnknownKeysAreListed) {
  Config c = Config::parse("[train]\nepochs = 3\nepoch = 4\n[data]\ntrian = \"x\"\n", "a.toml");
  c.get_int("train.epochs", 1);
  const auto msg = error_of([&] { c.finish(); });
  EXPECT_NE(msg.find("train.epoch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.trian"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("train.epochs"), std::string::npos) << msg;
}

TEST(Config, WrongTypeNamesKeyExpectedAndActual) {
  Config c = Config::parse("[train]\nepochs = \"three\"\n", "a.toml");
  const auto msg = error_of([&] { c.get_int("train.epochs", 1); });
  EXPECT_NE(msg.find("train.epochs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("three"), std::string::npos) << msg;
}

TEST(Config, MissingFileAndBadOverride) {
  EXPECT_NE(error_of([] { Config::load_file("/nonexistent/x.toml"); }).find("/nonexistent/x.toml"), std::string::npos);
  EXPECT_NE(error_of([] { Config::parse("", "a.toml", {"novalue"}); }).find("novalue"), std::string::npos);
  EXPECT_NE(error_of([] { Config::parse("train = 3\n", "a.toml", {"train.epochs=1"}); }).find("train"),
            std::string::npos);
}

TEST(Config, MissingRequiredKey) {
  Config c = Config::parse("", "a.toml");
  const auto msg = error_of([&] { c.require_string("data.train"); });
  EXPECT_NE(msg.find("data.train"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ringtrain
