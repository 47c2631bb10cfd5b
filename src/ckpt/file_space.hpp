// Room on storage for a checkpoint file, so that a full disk (or quota) is found before any rank
// writes and cannot strike half way through a collective write, where a rank whose write failed
// can leave HDF5's collective flush and close on the ranks in different collectives (a hang
// until the watchdog). Rank 0 alone calls these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/ckpt/checkpoint.hpp"

namespace ringtrain::ckpt {

// At most the bytes of a checkpoint file of these buffers: the data, up to 1 MiB of alignment
// per dataset, and metadata.
std::int64_t file_bytes_bound(const std::vector<CheckpointBuffer>& buffers, int world);

// Creates `path` exclusively (a name left in its place, by an interrupted save or planted as a
// link to another file, is removed first, never written through) with `bytes` allocated in it.
// IoError "no room for N MB" when they do not fit.
void create_with_room(const std::string& path, std::int64_t bytes);

// Allocates `bytes` in the existing file `path` without changing its size: HDF5 truncates the
// file it creates, which gave back what create_with_room allocated; this takes it again before
// any data is written. IoError "no room" when they do not fit any more; a file system without
// the call (EOPNOTSUPP) holds nothing, and the write itself will tell.
void hold_room(const std::string& path, std::int64_t bytes);

// Gives back what hold_room allocated past the end of the finished file.
void release_unused_room(const std::string& path);

}  // namespace ringtrain::ckpt
