// Checkpoint checksums (see checksum.hpp). Format 2 is XXH3-64 throughout, so a user can check
// a dataset with h5dump, split and xxhsum (docs/CHECKPOINT.md): the block digests are combined
// as the bytes `xxhsum -H3` prints for them (XXH64_canonical_t, big-endian), not as the
// in-memory words, which would make the result depend on the machine's byte order.
#include <algorithm>
#include <vector>
#include <xxhash.h>
#if RINGTRAIN_XXHASH_DISPATCH  // XXH3_64bits becomes the library's run-time choice of SSE2/AVX2/AVX-512
#include <xxh_x86dispatch.h>
#endif

#include "ckpt/checksum.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"

namespace ringtrain::ckpt {

ChecksumScheme checksum_scheme(std::int64_t format_version) {
  return format_version == 1 ? ChecksumScheme::kBlockHash64 : ChecksumScheme::kXxh3;
}

const char* checksum_algorithm(ChecksumScheme scheme) {
  return scheme == ChecksumScheme::kBlockHash64
             ? "ringtrain-blockhash64 (1 MiB blocks)"
             : "xxh3-64 (1 MiB blocks; dataset: xxh3-64 of the blocks' big-endian digests)";
}

std::uint64_t xxh3_64(const void* data, std::size_t bytes) { return XXH3_64bits(data, bytes); }

std::uint64_t block_hash(ChecksumScheme scheme, const void* data, std::int64_t bytes) {
  return scheme == ChecksumScheme::kBlockHash64 ? v1::block_hash(data, bytes)
                                                : xxh3_64(data, static_cast<std::size_t>(bytes));
}

void hash_blocks(ChecksumScheme scheme, const void* data, std::int64_t bytes, std::uint64_t* out) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::int64_t at = 0, k = 0; at < bytes; at += kChecksumBlockBytes, ++k)
    out[k] = block_hash(scheme, p + at, std::min(kChecksumBlockBytes, bytes - at));
}

std::uint64_t combine_block_hashes(ChecksumScheme scheme, const std::uint64_t* hashes, std::int64_t count) {
  if (scheme == ChecksumScheme::kBlockHash64)
    return v1::block_hash(hashes, count * static_cast<std::int64_t>(sizeof(std::uint64_t)));
  std::vector<XXH64_canonical_t> digests(static_cast<std::size_t>(count));
  for (std::int64_t k = 0; k < count; ++k) XXH64_canonicalFromHash(&digests[static_cast<std::size_t>(k)], hashes[k]);
  static_assert(sizeof(XXH64_canonical_t) == sizeof(std::uint64_t));
  return xxh3_64(digests.data(), digests.size() * sizeof(XXH64_canonical_t));
}

std::uint64_t buffer_checksum(ChecksumScheme scheme, const void* data, std::int64_t bytes) {
  std::vector<std::uint64_t> blocks(static_cast<std::size_t>(block_count(bytes)));
  hash_blocks(scheme, data, bytes, blocks.data());
  return combine_block_hashes(scheme, blocks.data(), static_cast<std::int64_t>(blocks.size()));
}

}  // namespace ringtrain::ckpt

namespace ringtrain {

std::uint64_t checkpoint_checksum(const void* data, std::int64_t bytes) {
  return ckpt::buffer_checksum(ckpt::checksum_scheme(kCheckpointFormatVersion), data, bytes);
}

}  // namespace ringtrain
