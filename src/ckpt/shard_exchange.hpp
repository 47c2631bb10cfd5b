// Moving a logical float buffer between two distributions over the ranks: ZeRO shards (each
// rank holds scattered ranges of it, packed) and the checkpoint file's slices (each rank writes
// and reads one contiguous, block-aligned range). A save gathers each rank's slice from the
// owners; a resume sends each owner its elements back. Nothing is ever held whole.
#pragma once
#include <mpi.h>

#include <vector>

#include "ringtrain/tensor/arena_range.hpp"

namespace ringtrain::ckpt {

// Collective over comm: every element of this rank's `to` ranges is taken from the rank whose
// `from` ranges hold it. from, to: sorted, disjoint ranges of the logical buffer; src and dst
// hold them packed in that order. Together the ranks' `from` ranges must cover every `to` range
// exactly once (Error otherwise, on every rank).
void exchange_ranges(MPI_Comm comm, const std::vector<ArenaRange>& from, const float* src,
                     const std::vector<ArenaRange>& to, float* dst);

}  // namespace ringtrain::ckpt
