// DataParallelStep: one synchronous data-parallel optimizer step on this rank's batch:
// forward, loss, backward, gradient allreduce-average over the communicator, optimizer
// update. The trainer runs it every step; tests run it with different world sizes.
#pragma once
#include <cstdint>

#include "ringtrain/nn/layers.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {

class Communicator;
class Model;
class Optimizer;

struct StepResult {
  double loss = 0.0;         // mean over the global batch (all ranks)
  double correct = 0.0;      // correct predictions in the global batch
  double compute_s = 0.0;    // forward, backward, optimizer
  double comm_s = 0.0;       // gradient and statistics allreduce
};

class DataParallelStep {
 public:
  DataParallelStep(Model& model, Optimizer& optimizer, Communicator& comm, std::int64_t batch,
                   std::int64_t num_classes);
  // x: [batch, ...] this rank's inputs; labels: batch entries. Throws CollectiveError (on
  // every rank at once) when the global loss is not finite; the update is then skipped.
  StepResult run(const Tensor& x, const std::int32_t* labels, const StepInfo& info, float lr);

 private:
  Model& model_;
  Optimizer& optimizer_;
  Communicator& comm_;
  SoftmaxCrossEntropy loss_;
  Tensor dlogits_;
};

}  // namespace ringtrain
