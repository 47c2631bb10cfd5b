// Moving a logical float buffer between two distributions over the ranks: ZeRO shards (each
// rank holds scattered ranges of it, packed) and the checkpoint file's slices (each rank writes
// and reads one contiguous, block-aligned range). A save gathers each rank's slice from the
// owners; a resume sends each owner its elements back. Nothing is ever held whole.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "ringtrain/tensor/arena_range.hpp"

namespace ringtrain::ckpt {

// Elements of the logical buffer moved per round by default: the send and receive buffers stay
// within this (64 MiB of f32) however large the buffer, so a checkpoint of a model that barely
// fits does not run out of memory while it is written.
inline constexpr std::int64_t kExchangeWindow = std::int64_t{16} << 20;

// Collective over comm: every element of this rank's `to` ranges is taken from the rank whose
// `from` ranges hold it. from, to: sorted, disjoint ranges of the logical buffer; src and dst
// hold them packed in that order. Together the ranks' `from` ranges must cover every `to` range
// exactly once (Error otherwise, on every rank). Moved `window` elements of the buffer at a time
// (the same on every rank).
void exchange_ranges(MPI_Comm comm, const std::vector<ArenaRange>& from, const float* src,
                     const std::vector<ArenaRange>& to, float* dst, std::int64_t window = kExchangeWindow);

}  // namespace ringtrain::ckpt
