// ParamLayout: where a model's parameter tensors sit in its flat arenas (parameters, gradients,
// optimizer state, pruning mask). Each tensor starts at a multiple of kAlignElements; the pads
// between tensors hold zeros that no layer reads or writes. What leaves the process (checkpoints,
// the parameter count) is the *logical* parameters: the tensors packed in arena order with no
// pads, so files do not depend on the alignment. Packing maps a buffer of arena elements (the
// whole arena, or a rank's ZeRO shard of it) to its logical elements and back.
#pragma once
#include <cstdint>
#include <vector>

#include "ringtrain/tensor/arena_range.hpp"

namespace ringtrain {

class ParamLayout {
 public:
  // 256 bytes in a 2-byte (bf16/fp16) compute copy, 512 in the f32 master: the alignment
  // cuBLASLt's vectorised and TMA kernels, cuDNN and NCCL want of a pointer.
  static constexpr std::int64_t kAlignElements = 128;
  static std::int64_t aligned(std::int64_t offset) {
    return (offset + kAlignElements - 1) / kAlignElements * kAlignElements;
  }

  ParamLayout() = default;
  // tensors: the arena ranges of the parameter tensors (sorted, disjoint), in an arena of
  // arena_elements.
  ParamLayout(std::vector<ArenaRange> tensors, std::int64_t arena_elements);
  std::int64_t arena_elements() const { return arena_elements_; }
  std::int64_t logical_elements() const { return logical_elements_; }
  // The arena ranges that hold no parameter (sorted): what no layer writes, kept zero.
  std::vector<ArenaRange> pads() const;

  // One copy of a packing: `count` elements from offset `from` of the source buffer to offset
  // `to` of the logical one.
  struct Copy {
    std::int64_t from = 0, to = 0, count = 0;
  };
  // How a source buffer holding the arena elements of some ranges (packed in arena order) maps to
  // the logical parameters: the copies that pack its parameter elements (ascending in both), and
  // the logical ranges those are (sorted, disjoint).
  struct Packing {
    std::vector<Copy> copies;
    std::vector<ArenaRange> logical;
    std::int64_t source_elements = 0;
    std::int64_t elements() const { return total_count(logical); }
    // The source already is its logical elements, packed (no pad among its elements).
    bool identity() const { return elements() == source_elements; }
  };
  // The packing of a buffer holding the arena elements of `owned` (sorted, disjoint).
  Packing packing(const std::vector<ArenaRange>& owned) const;
  Packing packing_of_arena() const { return packing({{0, arena_elements_}}); }

 private:
  std::vector<ArenaRange> tensors_;
  std::vector<std::int64_t> logical_offset_;  // per tensor: where it starts among the logical parameters
  std::int64_t arena_elements_ = 0, logical_elements_ = 0;
};

// Copies the parameter elements of `source` (p.source_elements) to `logical` (p.elements()).
// May work in place (logical == source).
void pack(const ParamLayout::Packing& p, const float* source, float* logical);
// The reverse: fills `source` from `logical`, its pad elements with zeros. May work in place.
void unpack(const ParamLayout::Packing& p, const float* logical, float* source);

}  // namespace ringtrain
