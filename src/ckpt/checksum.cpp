// checkpoint_checksum: each 1 MiB block is hashed by four independent multiply-rotate lanes
// over 64-bit words (fast enough to verify at memory speed), and the dataset's checksum is a
// hash of its block hashes, so ranks can hash their own block-aligned slices in parallel.
#include <bit>
#include <cstring>

#include "ckpt/checksum.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"
#include "ringtrain/core/random.hpp"

namespace ringtrain::ckpt {
namespace {

constexpr std::uint64_t kOdd1 = 0x9fb21c651e98df25ull;
constexpr std::uint64_t kOdd2 = 0xd6e8feb86659fd93ull;

std::uint64_t lane_step(std::uint64_t acc, std::uint64_t word) { return std::rotl(acc ^ (word * kOdd1), 29) * kOdd2; }

}  // namespace

std::uint64_t block_hash(const void* data, std::int64_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t lane[4] = {kOdd1, kOdd2, kOdd1 ^ kOdd2, ~kOdd1};
  std::int64_t at = 0;
  for (; at + 32 <= bytes; at += 32) {
    std::uint64_t w[4];
    std::memcpy(w, p + at, 32);
    for (int i = 0; i < 4; ++i) lane[i] = lane_step(lane[i], w[i]);
  }
  std::uint64_t tail[4] = {0, 0, 0, 0};
  if (bytes > at) std::memcpy(tail, p + at, static_cast<std::size_t>(bytes - at));
  for (int i = 0; i < 4; ++i) lane[i] = lane_step(lane[i], tail[i]);
  std::uint64_t h = static_cast<std::uint64_t>(bytes);
  for (const std::uint64_t l : lane) h = splitmix64(h ^ l);
  return h;
}

std::uint64_t combine_block_hashes(const std::uint64_t* hashes, std::int64_t count) {
  return block_hash(hashes, count * static_cast<std::int64_t>(sizeof(std::uint64_t)));
}

void hash_blocks(const void* data, std::int64_t bytes, std::uint64_t* out) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::int64_t at = 0, k = 0; at < bytes; at += kChecksumBlockBytes, ++k)
    out[k] = block_hash(p + at, std::min(kChecksumBlockBytes, bytes - at));
}

}  // namespace ringtrain::ckpt

namespace ringtrain {

std::uint64_t checkpoint_checksum(const void* data, std::int64_t bytes) {
  std::vector<std::uint64_t> blocks(static_cast<std::size_t>(ckpt::block_count(bytes)));
  ckpt::hash_blocks(data, bytes, blocks.data());
  return ckpt::combine_block_hashes(blocks.data(), static_cast<std::int64_t>(blocks.size()));
}

}  // namespace ringtrain
