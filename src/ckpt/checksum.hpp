// Private: the dataset checksums of each checkpoint format version, in pieces for code that
// hashes slices of a buffer on several ranks (blocks of kChecksumBlockBytes hashed separately,
// then combined in order), and the metadata checksum's hash. Definitions: docs/CHECKPOINT.md.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ringtrain::ckpt {

inline constexpr std::int64_t kChecksumBlockBytes = std::int64_t{1} << 20;

// How a file's checksums are computed; fixed by its format version.
enum class ChecksumScheme {
  kBlockHash64,  // format 1, read only: ringtrain's own multiply-rotate hash (checksum_v1.cpp)
  kXxh3,         // format 2: XXH3-64 of each block, XXH3-64 of the blocks' big-endian digests
};

// The scheme of a format version in [1, kCheckpointFormatVersion] (read_meta checks the range).
ChecksumScheme checksum_scheme(std::int64_t format_version);
// The root attribute `checksum_algorithm` of files with that scheme.
const char* checksum_algorithm(ChecksumScheme scheme);

inline std::int64_t block_count(std::int64_t bytes) { return (bytes + kChecksumBlockBytes - 1) / kChecksumBlockBytes; }

std::uint64_t block_hash(ChecksumScheme scheme, const void* data, std::int64_t bytes);
// Hashes the blocks of [data, data + bytes) into out[0 .. block_count(bytes)).
void hash_blocks(ChecksumScheme scheme, const void* data, std::int64_t bytes, std::uint64_t* out);
std::uint64_t combine_block_hashes(ChecksumScheme scheme, const std::uint64_t* hashes, std::int64_t count);
// The checksum of a whole byte range: its blocks hashed and combined.
std::uint64_t buffer_checksum(ChecksumScheme scheme, const void* data, std::int64_t bytes);

// XXH3-64 (seed 0) of a byte range, what `xxhsum -H3` prints.
std::uint64_t xxh3_64(const void* data, std::size_t bytes);

// Format 1's block hash, kept only so that files of format version 1 still verify.
namespace v1 {
std::uint64_t block_hash(const void* data, std::int64_t bytes);
}  // namespace v1

}  // namespace ringtrain::ckpt
