// Batch-size search logic behind `ringtrain tune batch`: byte sizes, the linear memory model
// that bounds the search (checked before a batch size is allocated), and the knee rule that
// picks the recommended per-rank batch. Pure logic: no I/O, no MPI, so it is unit-tested.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringtrain {

// "2GiB", "512MiB", "1.5GB", "64k", "1000000" (bytes) -> bytes. Binary (KiB, MiB, GiB, TiB)
// and decimal (kB, MB, GB, TB; K/M/G/T alone are binary) units, case-insensitive, optional
// space. Throws ConfigError naming the text when it is not a positive size.
std::int64_t parse_byte_size(std::string_view text);

// The value of `key` in a /proc/meminfo or /proc/self/status text ("MemAvailable:  123 kB"),
// in bytes; -1 when the key is absent or malformed.
std::int64_t proc_kib_field_bytes(std::string_view text, std::string_view key);

// Default --memory-limit: this share of the node's available memory, split over its ranks.
constexpr double kDefaultMemoryShare = 0.8;
std::int64_t default_memory_limit(std::int64_t available_bytes, int local_ranks);

// Bytes the training state holds at a per-rank batch: a fixed part (parameters, gradients,
// optimizer state, step buffers) plus a part per sample (activations and their gradients,
// layer workspaces such as Conv2d's columns, the batch itself). Linear because the model
// sizes every buffer as batch x a per-sample shape.
struct MemoryModel {
  double fixed_bytes = 0.0;
  double per_sample_bytes = 0.0;

  double at(std::int64_t batch) const { return fixed_bytes + per_sample_bytes * static_cast<double>(batch); }
  // From a measurement: `fixed` held before any batch buffer exists, `total` after steps at `batch`.
  static MemoryModel fit(double fixed, double total, std::int64_t batch);
};

// Why the search stops at a batch size; `none`: try it. search_stop checks the first three
// before anything is allocated for it; out_of_memory is found by trying (on a GPU: the size
// ran out of device memory on some rank, so it fits on none).
enum class SearchStop { none, max_batch, dataset, memory_limit, out_of_memory };
// max_by_dataset: the largest per-rank batch whose global batch the training set still fills.
SearchStop search_stop(std::int64_t batch, std::int64_t max_batch, std::int64_t max_by_dataset, double estimated_bytes,
                       std::int64_t memory_limit);

// A timed batch size: per-rank throughput from the slowest rank's median step time.
struct BatchPoint {
  std::int64_t batch = 0;
  double samples_per_s = 0.0;
};

// The knee: the smallest batch that no larger batch beats by kKneeMinGain or more in
// throughput (so doubling it, or doubling again, gains less); the largest tried when every
// smaller one is beaten.
constexpr double kKneeMinGain = 0.05;
struct KneeChoice {
  std::size_t index = 0;  // into the points
  std::string reason;     // one sentence for the user
};
// points: ascending, each batch twice the previous; at least one.
KneeChoice choose_knee(const std::vector<BatchPoint>& points);

// Relative throughput gain from `before` to `after` (0.05 = 5%).
double throughput_gain(const BatchPoint& before, const BatchPoint& after);

}  // namespace ringtrain
