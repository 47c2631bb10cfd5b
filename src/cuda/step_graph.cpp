// StepGraph on CUDA: stream capture of the compute stream in thread-local mode (a call that is
// illegal during capture, such as a synchronous copy or cudaMalloc, fails the capture instead
// of running), instantiation, and replay. A few graphs are kept (fp16 changes the loss scale
// now and then; evaluation allocates, which changes the key); the oldest goes first.
#include <cuda_runtime.h>

#include <deque>
#include <exception>
#include <string>
#include <utility>

#include "cuda/compute_stream.hpp"
#include "check/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"
#include "ringtrain/core/log.hpp"
#include "train/step_graph.hpp"

namespace ringtrain {
namespace {

constexpr std::size_t kMaxGraphs = 4;

class CudaStepGraph final : public StepGraph {
 public:
  ~CudaStepGraph() override {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  }

  void run(const StepGraphKey& key, const std::function<void()>& work) override {
    if (failed_) return work();
    cudaGraphExec_t exec = find(key);
    if (exec == nullptr) {
      const bool repeated = has_last_ && last_key_ == key;
      has_last_ = true;
      last_key_ = key;
      if (!repeated) return work();  // a key's first step runs eagerly: algorithms chosen, buffers made
      exec = capture(work);
      if (exec == nullptr) return work();
      keep(key, exec);
    }
    RT_CUDA_CHECK(cudaGraphLaunch(exec, cuda::compute_stream()));
    ++replays_;
  }

  bool active() const override { return !failed_; }
  std::uint64_t replays() const override { return replays_; }

 private:
  cudaGraphExec_t find(const StepGraphKey& key) const {
    for (const auto& [k, exec] : graphs_)
      if (k == key) return exec;
    return nullptr;
  }

  void keep(const StepGraphKey& key, cudaGraphExec_t exec) {
    if (graphs_.size() == kMaxGraphs) {
      RT_CUDA_CHECK(cudaGraphExecDestroy(graphs_.front().second));
      graphs_.pop_front();
    }
    graphs_.emplace_back(key, exec);
  }

  // The instantiated graph of `work`, or null (logged, graphs off from now on) when capture fails.
  cudaGraphExec_t capture(const std::function<void()>& work) {
    const cudaStream_t stream = cuda::compute_stream();
    RT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    std::string failure;
    try {
      work();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (failure.empty() && ended != cudaSuccess)
      failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
    cudaGraphExec_t exec = nullptr;
    if (failure.empty()) {
      const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
      if (made != cudaSuccess) failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
    }
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    if (failure.empty()) return exec;
    (void)cudaGetLastError();  // capture errors are not sticky; do not let later checks see this one
    failed_ = true;
    log::warn("train.cuda_graph: capturing the training step failed ({}); running without a graph", failure);
    return nullptr;
  }

  std::deque<std::pair<StepGraphKey, cudaGraphExec_t>> graphs_;
  StepGraphKey last_key_;
  bool has_last_ = false;
  bool failed_ = false;
  std::uint64_t replays_ = 0;
};

}  // namespace

std::unique_ptr<StepGraph> cuda::CudaBackend::make_step_graph() const { return std::make_unique<CudaStepGraph>(); }

}  // namespace ringtrain
