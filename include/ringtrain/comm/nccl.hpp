// The NCCL backend of Communicator (GPU ranks): one NCCL communicator per rank over the
// Context's world, collectives on device pointers. Without CUDA/NCCL both functions throw
// NotCompiled, so callers need no #ifdef.
#pragma once
#include <memory>
#include <string>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain {

class Context;

struct NcclOptions {
  // A collective (or the communicator's set-up or teardown) not finished after this many
  // seconds aborts the NCCL communicator and throws CommError: a dead or stuck peer ends
  // the job with a message instead of a hang.
  double timeout_s = 300;
  // NCCL's non-blocking mode: init and enqueue return at once and are polled, so the
  // timeout covers them too. false (blocking NCCL calls) is a fallback for debugging.
  bool nonblocking = true;
};

// Collective over every rank of ctx's world (each rank must call it). Binds this rank's GPU
// (ctx.binding().device when bound to cuda, else local rank mod visible GPUs); failures on
// any rank before NCCL init (no GPU, bad options) end every rank with the same error.
// The communicator's collectives take DEVICE pointers (device or managed memory), wait for
// completion before returning, and see all work issued before the call to the legacy
// default stream or to blocking streams; work on the caller's non-blocking streams must be
// synchronized by the caller first. One call at a time per communicator.
std::unique_ptr<Communicator> make_nccl_communicator(const Context& ctx, const NcclOptions& options = {});

// Whether this build has NCCL (the functions above then work where a GPU is bound).
bool nccl_compiled();

// The NCCL library's run-time version, e.g. "2.28.9".
std::string nccl_version();

}  // namespace ringtrain
