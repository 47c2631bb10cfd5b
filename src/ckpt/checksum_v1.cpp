// The format-1 reader's block hash (checkpoints of format version 1, read only: this build
// writes format 2). Each 1 MiB block is hashed by four multiply-rotate lanes over 64-bit words
// and a splitmix64 finish; a dataset's checksum is the same hash over its block hashes, as
// 64-bit words in memory order (ringtrain ran on little-endian machines only).
#include <bit>
#include <cstring>

#include "ckpt/checksum.hpp"
#include "ringtrain/core/random.hpp"

namespace ringtrain::ckpt::v1 {
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

}  // namespace ringtrain::ckpt::v1
