// Private: StepGraph, the CUDA graph of a training step's device work (train.cuda_graph): the
// forward, loss and backward queued on the compute stream are captured once per key and replayed
// as one launch. The key holds everything a captured launch bakes in by value or address (batch
// rows, loss scale, the device allocations made so far), so a stale graph is never replayed.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

namespace ringtrain {

// Everything a captured step bakes in by value or address that can change between steps: the
// batch rows, the loss scale (fp16), and the device pool's allocation count (a new allocation
// may have moved or reused a buffer the graph points into).
struct StepGraphKey {
  std::int64_t rows = 0;
  float loss_scale = 1.0f;
  std::uint64_t device_allocations = 0;
  bool operator==(const StepGraphKey&) const = default;
};

class StepGraph {
 public:
  virtual ~StepGraph() = default;
  // Runs `work` (which queues device work on the compute stream and nothing else): eagerly
  // unless the previous call had the same key (warm-up: algorithms are chosen and buffers
  // allocated); then captured and replayed, and replayed whenever the key comes back. When a
  // capture fails the reason is logged once, `work` runs eagerly, and so does every later call.
  virtual void run(const StepGraphKey& key, const std::function<void()>& work) = 0;
  virtual bool active() const = 0;            // false once a capture has failed
  virtual std::uint64_t replays() const = 0;  // graph launches so far
};

}  // namespace ringtrain
