// Private: the pieces of checkpoint_checksum, for code that hashes slices of a buffer on
// several ranks: blocks of kChecksumBlockBytes hashed separately, then combined in order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace ringtrain::ckpt {

inline constexpr std::int64_t kChecksumBlockBytes = std::int64_t{1} << 20;
inline constexpr const char* kChecksumAlgorithm = "ringtrain-blockhash64 (1 MiB blocks)";

inline std::int64_t block_count(std::int64_t bytes) { return (bytes + kChecksumBlockBytes - 1) / kChecksumBlockBytes; }

std::uint64_t block_hash(const void* data, std::int64_t bytes);
// Hashes the blocks of [data, data + bytes) into out[0 .. block_count(bytes)).
void hash_blocks(const void* data, std::int64_t bytes, std::uint64_t* out);
std::uint64_t combine_block_hashes(const std::uint64_t* hashes, std::int64_t count);

}  // namespace ringtrain::ckpt
