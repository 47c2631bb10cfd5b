// The nn tests' model from config text: build_model on its [model] section, then the check that
// every key was read (so a test's stray key fails the test).
#pragma once
#include <memory>
#include <string>

#include "ringtrain/core/config.hpp"
#include "ringtrain/nn/model.hpp"

namespace ringtrain {

inline std::unique_ptr<Model> build_model_text(const std::string& text, const Shape& input) {
  Config c = Config::parse(text, "test.toml");
  Config m = c.section("model");
  auto model = build_model(m, input);
  c.finish();
  return model;
}

}  // namespace ringtrain
