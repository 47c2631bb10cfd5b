// Context: MPI lifetime, world/node-local ranks and device binding. MPI errors on our
// communicators return codes (checked), so a failure becomes an exception, not a silent abort.
#include "ringtrain/runtime/context.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "check/mpi_check.hpp"
#include "cuda/gpu_backend.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "runtime/cpu_share.hpp"
#include "runtime/mpi_context.hpp"
#include "tensor/blas.hpp"

namespace ringtrain {
namespace {

// Open MPI's MPI-IO (OMPIO) readies a shared file pointer at every MPI_File_open, through the
// first of its sharedfp components that accepts the file. "sm" names a POSIX semaphore after the
// file's name alone (/dev/shm/sem.OMPIO_<basename>), shared by every job on the node: a process
// killed while holding it leaves it taken, and from then on every open of a file of that name
// on that node hangs (every save of that step, by every later run, until the watchdog ends it).
// "lockedfile" formats the path into a fixed buffer: a checkpoint.dir of ~230 characters aborted
// the job with "buffer overflow detected" at its first save. ringtrain never uses a shared file
// pointer, so unless the user chose components (OMPI_MCA_sharedfp set) only "individual", which
// needs neither, is offered (it keeps two empty files per rank beside an open file, <name>.data.<rank>
// and <name>.metadata.<rank>, removed at close; CheckpointDir removes those a killed save left).
// Set before MPI_Init, which reads the MCA parameters.
void avoid_open_mpi_shared_file_pointers() {
#ifdef OPEN_MPI
  if (::setenv("OMPI_MCA_sharedfp", "individual", 0) != 0)
    throw Error(fmt::format("setenv(OMPI_MCA_sharedfp) failed: {}", std::strerror(errno)));
#endif
}

}  // namespace

Context::Context(int* argc, char*** argv) : impl_(std::make_unique<Impl>()) {
  int initialized = 0;
  RT_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    avoid_open_mpi_shared_file_pointers();
    RT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    impl_->we_initialized = true;
  } else {
    RT_MPI_CHECK(MPI_Query_thread(&provided));
  }
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  RT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->world));
  RT_MPI_CHECK(MPI_Comm_set_errhandler(impl_->world, MPI_ERRORS_RETURN));
  RT_MPI_CHECK(MPI_Comm_rank(impl_->world, &world_rank_));
  RT_MPI_CHECK(MPI_Comm_size(impl_->world, &world_size_));
  RT_MPI_CHECK(MPI_Comm_split_type(impl_->world, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &impl_->node));
  RT_MPI_CHECK(MPI_Comm_set_errhandler(impl_->node, MPI_ERRORS_RETURN));
  RT_MPI_CHECK(MPI_Comm_rank(impl_->node, &local_rank_));
  RT_MPI_CHECK(MPI_Comm_size(impl_->node, &local_size_));
  int leader = local_rank_ == 0 ? 1 : 0;
  RT_MPI_CHECK(MPI_Allreduce(&leader, &node_count_, 1, MPI_INT, MPI_SUM, impl_->world));
  log::set_rank(world_rank_, world_size_);
}

Context::~Context() {
  // Finalize is collective: only reached on the normal path (errors go through abort()).
  if (impl_->node != MPI_COMM_NULL) MPI_Comm_free(&impl_->node);
  if (impl_->world != MPI_COMM_NULL) MPI_Comm_free(&impl_->world);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (impl_->we_initialized && !finalized) MPI_Finalize();
}

void Context::bind(Device backend, int threads) {
  RT_REQUIRE(threads >= 0, ConfigError, "runtime.threads: must be >= 0 (0 = automatic), got {}", threads);
  if (backend == Device::cpu) {
    const CpuShare share = this_process_cpu_share(local_size_);
    if (threads == 0) threads = automatic_threads(share);
    // One line per node (its ranks are launched alike), not one per rank.
    const std::string crowded = oversubscription(share, threads);
    if (local_rank_ == 0 && !crowded.empty()) log::warn("{}", crowded);
    blas::set_threads(threads);
    blas::sgemm_library();  // a bad RINGTRAIN_SGEMM fails here, at set-up, on every rank
    binding_ = DeviceBinding{Device::cpu, -1, threads};
    return;
  }
  // No GPU (a login node, a CPU-only build): the CPU backend runs the same model, said once
  // per rank so a misconfigured node is visible in the log.
  const GpuBackend* gpu = compiled_gpu_backend();
  const int count = gpu != nullptr ? gpu->device_count() : 0;
  if (count == 0) {
    const char* why = gpu != nullptr ? "no CUDA device visible on this node" : "this ringtrain was built without CUDA";
    log::warn("the cuda backend (runtime.backend, or a bench command's --backend): {}; falling back to the CPU backend",
              why);
    bind(Device::cpu, threads);
    return;
  }
  // Slurm's --gpu-bind=single/closest (or a site's CUDA_VISIBLE_DEVICES per task) leaves each
  // rank one visible GPU: count is 1, so every rank takes device 0 of what it sees, which is
  // its own GPU. With all of a node's GPUs visible, local ranks spread over them.
  const int device = local_rank_ % count;
  gpu->set_device(device);
  binding_ = DeviceBinding{Device::cuda, device, threads == 0 ? 1 : threads};
}

void Context::abort(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace ringtrain
