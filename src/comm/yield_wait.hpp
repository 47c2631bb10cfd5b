// Waiting for peers without holding the core: the communication thread shares its core with
// the compute thread (ranks are bound one per core), so a waiter polls a few times and then
// yields the core after every poll that finds nothing to do.
#pragma once
#include <sched.h>

namespace ringtrain::comm {

// Polls before the first yield: covers a peer that is a few hundred nanoseconds behind
// (the common case when both ranks are running) without a system call per poll.
inline constexpr int kSpinPolls = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Returns once ready() is true. sched_yield rather than a sleep: with nothing else runnable
// on the core it returns at once (no added latency), with the compute thread runnable it
// hands the core over.
template <typename Ready>
void wait_until(Ready&& ready) {
  for (int polls = 0; !ready(); ++polls) {
    if (polls < kSpinPolls)
      cpu_relax();
    else
      sched_yield();
  }
}

}  // namespace ringtrain::comm
