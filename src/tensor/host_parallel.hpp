// Private: the CPU backend's own loops (attention's heads, LayerNorm's and GELU's rows, the
// optimizer's elements) spread over this rank's compute threads, runtime.threads as
// blas::threads() holds it: the GEMMs used them already, everything between them ran on one.
// Runs on the OpenMP team oneDNN computes with (GCC's runtime, whose workers block every signal:
// onednn_sgemm.cpp says why); a build without oneDNN (host_parallel_serial.cpp) runs every loop
// on the calling thread.
#pragma once
#include <cstdint>
#include <functional>

namespace ringtrain::host_parallel {

// No cap on the threads beyond the rank's own (for_each's max_workers).
constexpr int kAnyWorkers = 1 << 30;

// How many threads for_each uses for `pieces` pieces: at most blas::threads(), `pieces` and
// `max_workers`; 1 inside a for_each already (no nesting) and in a build without oneDNN. A
// caller with scratch per worker sizes it by this.
int workers(std::int64_t pieces, int max_workers = kAnyWorkers);

// Calls body(piece, worker) once for each piece in [0, pieces), handed out one at a time to
// workers 0 .. workers(pieces, max_workers) - 1, and returns when all are done. Which worker
// runs a piece changes from run to run, so a piece's results must depend on the piece alone
// (`worker` only picks scratch memory): then they are the same for any thread count. The first
// exception a piece throws is rethrown here, after the others finished.
void for_each(std::int64_t pieces, const std::function<void(std::int64_t piece, int worker)>& body,
              int max_workers = kAnyWorkers);

// Elements per piece of an element-wise loop: 64 KiB of floats, enough work to outweigh handing
// a piece out (a few atomic operations), and 128 pieces for the GPT example's MLP activations.
constexpr std::int64_t kElementGrain = std::int64_t{1} << 14;

// Rows of `width` elements per piece of a row-wise loop: about kElementGrain elements, at least 1.
std::int64_t rows_per_piece(std::int64_t width);

// for_each over [0, n) in ranges of `grain` (the last one shorter): body(begin, end).
void for_ranges(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace ringtrain::host_parallel
