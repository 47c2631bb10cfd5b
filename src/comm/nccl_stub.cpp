// The NCCL backend in a build without CUDA/NCCL: every entry point says so clearly, so that
// callers choose the backend at run time without #ifdef.
#include "comm/nccl_unique_id.hpp"
#include "ringtrain/comm/nccl.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

[[noreturn]] void not_compiled(const char* what) {
  throw NotCompiled(
      fmt::format("{}: this ringtrain was built without CUDA/NCCL (RINGTRAIN_WITH_CUDA=OFF, or "
                  "NCCL not found at configure time)",
                  what));
}

}  // namespace

comm::NcclUniqueIdBytes comm::exchange_nccl_unique_id(const Context&) { not_compiled("nccl unique id"); }

std::unique_ptr<Communicator> make_nccl_communicator(const Context&, const NcclOptions&) {
  not_compiled("comm.backend=nccl");
}

bool nccl_compiled() { return false; }

std::string nccl_version() { not_compiled("nccl version"); }

}  // namespace ringtrain
