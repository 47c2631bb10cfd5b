// A magnitude-pruning config for tests: on, with the given final sparsity and schedule (mask
// updates after `start`, every `every` steps, and `end`); the rest default.
#pragma once
#include <cstdint>

#include "ringtrain/prune/pruner.hpp"

namespace ringtrain::test {

inline PruneConfig gradual(double sparsity, std::int64_t start, std::int64_t end, std::int64_t every) {
  PruneConfig c;
  c.enabled = true;
  c.sparsity = sparsity;
  c.start_step = start;
  c.end_step = end;
  c.every_steps = every;
  return c;
}

}  // namespace ringtrain::test
