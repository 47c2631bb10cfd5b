// Collective error agreement: run a step on every rank and, if it failed on any rank, make
// every rank throw the same CollectiveError (the lowest failing rank's message). Used for
// set-up (config, data) so that bad input ends all ranks cleanly instead of hanging peers.
#pragma once
#include <functional>

#include "ringtrain/core/error.hpp"

namespace ringtrain {

class Context;

// Raised on all ranks at once; main prints it once (rank 0) and exits without MPI_Abort.
// corrupt_file(): the failing rank's error was a CorruptFileError (callers may then fall
// back to an older file rather than give up).
class CollectiveError : public Error {
 public:
  explicit CollectiveError(const std::string& message, bool corrupt_file = false)
      : Error(message), corrupt_file_(corrupt_file) {}
  bool corrupt_file() const { return corrupt_file_; }

 private:
  bool corrupt_file_ = false;
};

void run_collectively(const Context& ctx, const std::function<void()>& step);

}  // namespace ringtrain
