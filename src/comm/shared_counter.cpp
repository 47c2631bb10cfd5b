// SharedCounter (shared_counter.hpp): poll, then futex. The owner raises the value and
// then reads `sleepers`; a waiter increments `sleepers` and then reads the value; both pairs
// are sequentially consistent, so either the waiter sees the new value and does not sleep, or
// the owner sees the sleeper and wakes it. FUTEX_WAIT itself compares the low 32 bits with what
// the waiter last saw, so a raise between the check and the sleep returns at once.
#include "comm/shared_counter.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#include "comm/yield_wait.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {
namespace {

static_assert(std::endian::native == std::endian::little, "the futex word is the counter's low half");

// Polling before sleeping, about 20 us: a peer that is merely a little behind (both running,
// a phase of a round still copying) is met without two system calls and a wake-up, and a wait
// costs its core at most that much. No sched_yield in between: measured beside computing
// threads (bench allreduce --load-threads 2, docs/BENCHMARKS.md), a waiter that yields hands
// its core to a neighbour for a whole time slice at every yield and never earns the wake-up
// preference of a sleeper: the ring fell to 0.03-0.3 GB/s where polling then sleeping keeps
// 0.6-6.5 GB/s, at least MPI_Allreduce's (docs/benchmarks/2026-12-02-ring-neighbour.md).
constexpr auto kPollFor = std::chrono::microseconds(20);

std::uint32_t* futex_word(SharedCounter& c) { return reinterpret_cast<std::uint32_t*>(&c.value); }

long futex(std::uint32_t* word, int op, std::uint32_t value) {
  return ::syscall(SYS_futex, word, op, value, nullptr, nullptr, 0);
}

}  // namespace

void raise_counter(SharedCounter& c, std::uint64_t value) {
  std::atomic_ref<std::uint64_t>(c.value).store(value, std::memory_order_seq_cst);
  if (std::atomic_ref<std::uint32_t>(c.sleepers).load(std::memory_order_seq_cst) == 0) return;
  RT_REQUIRE(futex(futex_word(c), FUTEX_WAKE, INT_MAX) >= 0, Error, "communicator: futex wake: {}",
             std::strerror(errno));
}

void wait_for_counter(SharedCounter& c, std::uint64_t value) {
  std::atomic_ref<std::uint64_t> counter(c.value);
  const auto reached = [&] { return counter.load(std::memory_order_acquire) >= value; };
  for (int polls = 0; polls < kSpinPolls; ++polls) {  // the common case: no clock read at all
    if (reached()) return;
    cpu_relax();
  }
  const auto poll_until = std::chrono::steady_clock::now() + kPollFor;
  while (!reached()) {
    if (std::chrono::steady_clock::now() < poll_until) {
      cpu_relax();
      continue;
    }
    std::atomic_ref<std::uint32_t> sleepers(c.sleepers);
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint64_t seen = counter.load(std::memory_order_seq_cst);
    if (seen < value && futex(futex_word(c), FUTEX_WAIT, static_cast<std::uint32_t>(seen)) != 0)
      RT_REQUIRE(errno == EAGAIN || errno == EINTR, Error, "communicator: futex wait: {}", std::strerror(errno));
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace ringtrain::comm
