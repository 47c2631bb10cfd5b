// Session: what every training-like command (train, bench train, tune batch) sets up the same
// way from a config and its overrides, in collective phases so that bad input on any rank ends
// every rank with the same one-line error: config and binding, communicators, datasets, model,
// optimizer and schedule, pruning, then the check that no key was left unread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ringtrain/core/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/tokens.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/grad_scaler.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/prune/pruner.hpp"
#include "ringtrain/train/run_comms.hpp"
#include "ringtrain/train/train_config.hpp"

namespace ringtrain {

class Context;

struct SessionOptions {
  // Training data: `samples` opens data.train as configured (labels checked against the model,
  // data.test opened too); `shape` only learns the sample shape and count, reading no samples
  // (synthetic inputs: bench train --synthetic, tune batch).
  enum class Data { samples, shape };
  Data data = Data::samples;
  // The learning-rate schedule's horizon; 0: the run's own (epochs x steps per epoch, capped
  // by train.max_steps).
  std::int64_t schedule_steps = 0;
};

struct Session {
  std::string config_path;
  std::unique_ptr<Config> config;  // finished: every key read; sections stay readable
  std::string resolved_config;     // the config with every default, as written to run.dir
  TrainConfig tc;
  RunComms comms;
  // data.format = "images": train, test (null without data.test, or with Data::shape); "tokens":
  // train_tokens, test_tokens likewise.
  std::shared_ptr<const Dataset> train, test;
  std::shared_ptr<const TokenDataset> train_tokens, test_tokens;
  Shape sample_shape;  // the model's input per sample: the image shape, or [data.block_size] token ids
  std::unique_ptr<Model> model;
  std::string init_from;  // model.init_from: the file a new run's parameters come from ("": random)
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<Pruner> pruner;  // null unless [prune] method = "magnitude"
  GradScaler scaler;               // enabled for train.precision = "fp16"
  double clip_grad_norm = 0.0;     // optim.clip_grad_norm (0: none), for session_step_options
  bool gpu_augment = false;        // data.augment_on resolved: raw training batches augmented on the GPU
  std::int64_t num_classes = 0;    // the model's outputs per position (the vocabulary for tokens)
  std::int64_t steps_per_epoch = 0;
  std::int64_t total_steps = 0;  // epochs x steps_per_epoch, capped by train.max_steps

  bool tokens() const { return tc.data.format == DataFormat::tokens; }
  // Samples in the training set: images, or windows of block_size + 1 tokens.
  std::int64_t train_samples() const { return tokens() ? train_tokens->windows() : train->usable_size(); }
};

// Sets up a session; collective. Throws CollectiveError (reported once by rank 0) for bad input.
std::unique_ptr<Session> open_session(Context& ctx, const std::string& config_path, const ConfigOverrides& overrides,
                                      const SessionOptions& options = {});

// The options of the session's data-parallel step: step_options of its config, with its
// optimizer's gradient clipping.
StepOptions session_step_options(const Session& s, const Context& ctx);

// Runs fn, prefixing a DataError's message with the config key it concerns ("data.train: ...").
template <typename F>
auto for_data_key(const std::string& key, F&& fn) {
  try {
    return fn();
  } catch (const DataError& e) {
    throw DataError(key + ": " + e.what());
  }
}

}  // namespace ringtrain
