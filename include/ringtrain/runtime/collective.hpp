// Collective error agreement: run a step on every rank and, if it failed on any rank, make
// every rank throw the same CollectiveError (the lowest failing rank's message; running out
// of memory names the rank and host). Used for set-up (config, data, the step's buffers) so
// that bad input or a short node ends all ranks cleanly instead of hanging peers.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>

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

// A T constructed on every rank under run_collectively: a failure on any rank (out of memory
// for its buffers, ...) is the same CollectiveError on all of them, never a rank missing from
// the next collective.
template <typename T, typename... Args>
std::unique_ptr<T> make_collectively(const Context& ctx, Args&&... args) {
  std::unique_ptr<T> made;
  run_collectively(ctx, [&] { made = std::make_unique<T>(std::forward<Args>(args)...); });
  return made;
}

// Rank 0's `text` on every rank (collective; the other ranks' argument is ignored).
std::string broadcast_text(const Context& ctx, const std::string& text);

// Collective: every rank's `value` must equal rank 0's (compared by a 64-bit hash). Otherwise
// every rank throws the same CollectiveError naming `what` and the ranks (and hosts) that
// differ: "the resolved config is not the same on every rank: rank 1 (host node2) differs from
// rank 0 (host node1)". For what must be identical everywhere: the config, the dataset catalogue, ...
void require_same_on_all_ranks(const Context& ctx, const std::string& what, const std::string& value);

}  // namespace ringtrain
