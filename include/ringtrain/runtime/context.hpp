// The per-process runtime: MPI init/finalize (RAII), world and node-local rank, and the
// binding of this rank to its compute resources (CPU threads for OpenBLAS, or a GPU).
#pragma once
#include <memory>

#include "ringtrain/core/device.hpp"

namespace ringtrain {

struct DeviceBinding {
  Device backend = Device::cpu;
  int device = -1;  // GPU ordinal for cuda, -1 for cpu
  int threads = 1;  // compute threads (OpenBLAS) this rank may use
};

class Context {
 public:
  // Initializes MPI (thread level MULTIPLE requested: the comm thread and the HDF5 layer
  // may call MPI while the trainer does) and finds world/local ranks. Not copyable.
  Context(int* argc, char*** argv);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  bool thread_multiple() const { return thread_multiple_; }
  const DeviceBinding& binding() const { return binding_; }

  // Binds this rank: Device::cpu splits the node's cores among local ranks (threads=0:
  // automatic); Device::cuda takes local_rank mod visible GPUs, and falls back to the CPU with a
  // warning when there is none (no device, no driver, or a build without CUDA): check
  // binding().backend for what was bound.
  void bind(Device backend, int threads);

  // Abort the whole job (all ranks) with an exit code; never returns.
  [[noreturn]] void abort(int code) const;

  struct Impl;  // MPI handles; defined in src/runtime/mpi_context.hpp
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int node_count_ = 1;
  bool thread_multiple_ = false;
  DeviceBinding binding_;
};

}  // namespace ringtrain
