// Per-sample augmentation (training only: random crop from the zero-padded image, horizontal
// flip) and per-channel normalization. The random choices for a sample are a pure function of
// (seed, epoch, global sample index), so they never depend on thread timing or world size.
#pragma once
#include <cstdint>
#include <vector>

namespace ringtrain {

// Purpose index of the augmentation RNG stream: sample i in epoch e draws from
// Rng(stream_key(seed, kAugmentStream, e, i)). Part of the determinism contract.
inline constexpr std::uint64_t kAugmentStream = 0x6175676d656e74;  // "augment"

struct AugmentOptions {
  // Crop an image of the original size at a random offset from the image padded with this
  // many zeros on every side (0: no crop).
  std::int64_t crop_padding = 0;
  bool flip = false;  // mirror left-right with probability 1/2
  bool enabled() const { return crop_padding > 0 || flip; }
};

// Sample element v of channel c becomes float((u(v) - mean[c]) / std[c]), computed in double,
// where u(v) = v / 255 for uint8 and v otherwise; padding is u = 0. One value applies to every
// channel.
struct Normalization {
  std::vector<double> mean{0.0};
  std::vector<double> std{1.0};
};

// One sample's random choices: the crop's origin in the padded image (each in
// [0, 2 * crop_padding]; crop_padding, crop_padding is the original image) and the flip.
struct AugmentDraw {
  std::int64_t dy = 0;
  std::int64_t dx = 0;
  bool flip = false;
};
AugmentDraw draw_augment(const AugmentOptions& options, std::uint64_t seed, std::int64_t epoch, std::int64_t index);

}  // namespace ringtrain
