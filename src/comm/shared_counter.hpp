// A counter in memory shared between processes that one process raises and others wait on
// (the shared-memory collectives' round counters). A waiter polls for a bounded time, then
// sleeps in the kernel (a futex on the counter's low 32 bits) until the owner's raise wakes it.
// Sleeping matters when the cores are oversubscribed (a busy neighbour, more threads than
// cores): a waiter that keeps polling or yielding competes for the core its peer needs to make
// progress, and never gets the scheduler's preference for a thread that wakes up.
// The futex is a shared one (not FUTEX_PRIVATE): waiter and owner are different processes.
#pragma once
#include <cstdint>

namespace ringtrain::comm {

// Its place in the shared segment: both words on one cache line, the counter first.
struct SharedCounter {
  std::uint64_t value;     // only grows; raised by its owner
  std::uint32_t sleepers;  // waiters in the kernel (or about to be): the owner wakes them
};

// Sets the counter to `value` (release, and ordered before the check for sleepers) and wakes
// every waiter asleep on it.
void raise_counter(SharedCounter& c, std::uint64_t value);

// Returns once the counter is at least `value` (acquire).
void wait_for_counter(SharedCounter& c, std::uint64_t value);

}  // namespace ringtrain::comm
