// Loader: batches of an opened Dataset, decoded, augmented and normalized to float (or, with
// LoaderOptions::raw, uint8 samples as stored plus their augmentation draws), in (epoch, step)
// order. With prefetch > 0 a background thread fills a bounded queue of ready batches (and,
// for the stream strategy, another thread reads blocks ahead) while the caller computes; a
// loader thread's error is rethrown by next() at the batch it would have made.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ringtrain/data/augment.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

struct LoaderOptions {
  // Training: shuffled (per strategy), augmented, every rank the same number of full
  // batches. Evaluation: this rank's even shard in index order, the last batch partial.
  bool training = true;
  std::int64_t batch_size = 64;  // per rank
  int world_size = 1;
  int rank = 0;
  std::uint64_t seed = 0;
  std::int64_t epochs = 1;  // deliver epochs [start_epoch, epochs); bounds the work done ahead
  // Where delivery starts (a resumed run): batch start_step of epoch start_epoch.
  std::int64_t start_epoch = 0;
  std::int64_t start_step = 0;
  int prefetch = 2;        // batches prepared ahead (0: on the caller's thread)
  AugmentOptions augment;  // training only
  Normalization normalize;
  std::int64_t shuffle_window = 16384;  // stream: samples shuffled together (whole blocks)
  std::int64_t read_ahead = 2;          // stream: windows read ahead of the ones in use
  // Deliver Batch::raw and Batch::draws instead of Batch::x: no decoding on the host (the GPU
  // augments, see kernels/augment_kernels.hpp). uint8 samples only: the Loader throws a
  // DataError naming the dtype otherwise (the trainer refuses data.augment_on = "gpu" first).
  bool raw = false;
};

struct Batch {
  std::int64_t epoch = 0;
  std::int64_t step = 0;
  Tensor x;                           // [n, C, H, W] float (empty with LoaderOptions::raw)
  Tensor raw;                         // LoaderOptions::raw: [n, C, H, W] uint8 as stored
  std::vector<AugmentDraw> draws;     // LoaderOptions::raw: n, what the decoder would have used
  std::vector<std::int32_t> labels;   // n
  std::vector<std::int64_t> indices;  // n global sample indices
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
};

// What the loader's reading cost so far (stream strategy; the memory strategy reads while
// the Dataset opens).
struct LoaderStats {
  double read_seconds = 0.0;  // in file reads
  std::int64_t read_bytes = 0;
};

// Batches per epoch a Loader with these options delivers, without starting one (the
// optimizer's schedule is sized before the loader's start position is known).
std::int64_t loader_steps_per_epoch(std::shared_ptr<const Dataset> data, const LoaderOptions& options);

class Loader {
 public:
  // DataError when the dataset cannot fill one global batch (training) or the normalization
  // does not fit the samples. Starts its threads; not collective.
  Loader(std::shared_ptr<const Dataset> data, const LoaderOptions& options);
  ~Loader();  // stops and joins its threads
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  std::int64_t steps_per_epoch() const;
  LoaderStats stats() const;
  // The next batch; valid until the next call. Rethrows a loader thread's error.
  const Batch& next();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringtrain
