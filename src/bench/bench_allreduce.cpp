// `ringtrain bench allreduce`: time, algbw and busbw (nccl-tests definitions) of an in-place
// allreduce per message size for each communicator backend, plus the number of wrong elements
// of a checked call per size. Rank 0 prints a table per backend, or JSON lines (--json).
// --load-threads N runs N computing threads per rank throughout (compute_load.hpp): the
// backends then share the cores with a compute-bound neighbour, in the same interleaved turns.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fmt/ranges.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/bench_stats.hpp"
#include "bench/compute_load.hpp"
#include "ringtrain/bench/bench.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/name_table.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {
namespace {

// The backends --backends can name: each is a communicator factory, so a new backend is one
// more row here.
struct Backend {
  std::string_view name;
  std::unique_ptr<Communicator> (*make)(const Context& ctx, DType wire_dtype);
};

constexpr Backend kBackends[] = {
    {"ring",  // shared memory when all ranks share a node, MPI messages otherwise
     [](const Context& ctx, DType wire) {
       return make_mpi_communicator(ctx, CommOptions{.algo = AllreduceAlgo::ring, .wire_dtype = wire});
     }},
    {"ring-p2p",  // the ring over MPI messages even within a node
     [](const Context& ctx, DType wire) {
       return make_mpi_communicator(
           ctx, CommOptions{.algo = AllreduceAlgo::ring, .wire_dtype = wire, .shared_memory = false});
     }},
    {"mpi",  // the MPI library's MPI_Allreduce
     [](const Context& ctx, DType wire) {
       return make_mpi_communicator(ctx, CommOptions{.algo = AllreduceAlgo::mpi, .wire_dtype = wire});
     }},
};

constexpr NameTable<DType> kDtypes[] = {{"f32", DType::f32}, {"bf16", DType::bf16}, {"f16", DType::f16}};

// Small integers that differ between ranks, so that every partial sum (at most 3 x ranks) is
// exact in every dtype, bf16 included, and the expected sum is known exactly.
int input_value(std::size_t i, int rank) {
  return static_cast<int>((i + (i >> 10) + static_cast<std::size_t>(rank)) % 4);
}

// Calls f(store, load) with the conversions float <-> the element type of `dtype` (f32, bf16, f16).
template <typename F>
void for_each_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::bf16:
      return f([](float v) { return float_to_bf16(v); }, [](std::uint16_t h) { return bf16_to_float(h); });
    case DType::f16: return f([](float v) { return float_to_f16(v); }, [](std::uint16_t h) { return f16_to_float(h); });
    default: return f([](float v) { return v; }, [](float v) { return v; });
  }
}

// Writes this rank's inputs (also the first touch of the buffer).
void fill_inputs(void* data, std::size_t count, DType dtype, int rank) {
  for_each_element_type(dtype, [&](auto store, auto) {
    using T = decltype(store(0.0f));
    auto* p = static_cast<T*>(data);
    for (std::size_t i = 0; i < count; ++i) p[i] = store(static_cast<float>(input_value(i, rank)));
  });
}

// Elements that differ from the exact sum of all ranks' inputs. input_value(i, r) depends on
// (i + (i >> 10)) % 4 only, so the expected sums are four numbers.
std::size_t count_wrong(const void* data, std::size_t count, DType dtype, int ranks) {
  float expected[4] = {};
  for (std::size_t k = 0; k < 4; ++k)
    for (int r = 0; r < ranks; ++r) expected[k] += static_cast<float>(input_value(k, r));
  std::size_t wrong = 0;
  for_each_element_type(dtype, [&](auto store, auto load) {
    using T = decltype(store(0.0f));
    const auto* p = static_cast<const T*>(data);
    for (std::size_t i = 0; i < count; ++i) wrong += load(p[i]) != expected[(i + (i >> 10)) % 4];
  });
  return wrong;
}

// Calls a backend makes in a row before the next backend's turn. Backends take turns in short
// batches because this machine's speed changes within a second: alternating lets such changes
// hit every backend of a size alike.
constexpr std::size_t kBatch = 5;

struct Row {
  std::size_t bytes, count;
  double time_us, algbw, busbw;
  std::size_t wrong;
};

using Clock = std::chrono::steady_clock;

// The median over iterations of the slowest rank's time. `times` holds this rank's time per
// iteration in its own slot of `iters` (zeros elsewhere), so that a sum gathers every rank's;
// it is zeroed again for the next size.
double median_of_slowest(Communicator& stats, std::vector<double>& times, std::size_t iters, int ranks) {
  stats.allreduce_sum(times.data(), times.size(), DType::f64);
  std::vector<double> slowest(iters, 0.0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(ranks); ++r)
    for (std::size_t i = 0; i < iters; ++i) slowest[i] = std::max(slowest[i], times[r * iters + i]);
  std::fill(times.begin(), times.end(), 0.0);
  return median(slowest);
}

// Fresh integer inputs, one call, and the elements that differ from the exact sum, over all ranks.
std::size_t check(Communicator& comm, Communicator& stats, void* buffer, std::size_t count, DType dtype, int rank,
                  int ranks) {
  fill_inputs(buffer, count, dtype, rank);
  comm.allreduce_sum(buffer, count, dtype);
  double wrong = static_cast<double>(count_wrong(buffer, count, dtype, ranks));
  stats.allreduce_sum(&wrong, 1, DType::f64);
  return static_cast<std::size_t>(wrong);
}

}  // namespace

std::vector<std::string> allreduce_bench_backends() {
  std::vector<std::string> names;
  for (const Backend& b : kBackends) names.emplace_back(b.name);
  return names;
}

std::vector<std::string> allreduce_bench_dtypes() { return names_of(kDtypes); }

void bench_allreduce(Context& ctx, const AllreduceBenchOptions& o) {
  const std::optional<DType> named = value_of_name(kDtypes, o.dtype);
  RT_REQUIRE(named.has_value(), ConfigError, "bench allreduce: unknown --dtype '{}' ({})", o.dtype,
             fmt::join(allreduce_bench_dtypes(), ", "));
  const DType dtype = *named;
  const DType wire = parse_wire_dtype(o.wire_dtype, "--wire-dtype");
  const std::size_t esize = dtype_size(dtype);
  const int rank = ctx.world_rank(), ranks = ctx.world_size();
  // Bookkeeping (iteration times, wrong counts) on its own communicator, outside the timings.
  auto stats = make_mpi_communicator(ctx, AllreduceAlgo::mpi);
  std::vector<std::pair<const Backend*, std::unique_ptr<Communicator>>> comms;
  // Options a backend rejects (bf16 wire for mpi) fail alike on every rank: one clean error.
  run_collectively(ctx, [&] {
    for (const std::string& name : o.backends) {
      const Backend* b =
          std::find_if(std::begin(kBackends), std::end(kBackends), [&](auto& k) { return k.name == name; });
      comms.emplace_back(b, b->make(ctx, wire));
    }
  });
  // One buffer at the largest size for every size and backend, touched before any timing.
  const std::size_t max_count = o.max_bytes / esize;
  auto buffer = std::make_unique_for_overwrite<std::byte[]>(max_count * esize);
  fill_inputs(buffer.get(), max_count, dtype, rank);

  const ComputeLoad load(o.load_threads);
  const auto iters = static_cast<std::size_t>(o.iters);
  std::vector<std::vector<double>> times(comms.size(), std::vector<double>(iters * static_cast<std::size_t>(ranks)));
  std::vector<std::vector<Row>> tables(comms.size());
  for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
    const std::size_t count = bytes / esize;
    if (count == 0) continue;
    for (auto& [backend, comm] : comms)
      for (int i = 0; i < o.warmup; ++i) comm->allreduce_sum(buffer.get(), count, dtype);
    for (std::size_t first = 0; first < iters; first += kBatch) {
      for (std::size_t b = 0; b < comms.size(); ++b) {
        comms[b].second->barrier();
        for (std::size_t i = first; i < std::min(iters, first + kBatch); ++i) {
          const auto t0 = Clock::now();
          comms[b].second->allreduce_sum(buffer.get(), count, dtype);
          times[b][static_cast<std::size_t>(rank) * iters + i] =
              std::chrono::duration<double>(Clock::now() - t0).count();
        }
      }
    }
    for (std::size_t b = 0; b < comms.size(); ++b) {
      const double seconds = median_of_slowest(*stats, times[b], iters, ranks);
      const std::size_t wrong = check(*comms[b].second, *stats, buffer.get(), count, dtype, rank, ranks);
      const double algbw = static_cast<double>(count * esize) / seconds / 1e9;
      tables[b].push_back({count * esize, count, seconds * 1e6, algbw, algbw * 2.0 * (ranks - 1) / ranks, wrong});
      const Row& r = tables[b].back();
      if (o.json)
        log::info("{}", nlohmann::json{{"bench", "allreduce"},
                                       {"backend", comms[b].first->name},
                                       {"comm", comms[b].second->name()},
                                       {"ranks", ranks},
                                       {"bytes", r.bytes},
                                       {"count", r.count},
                                       {"dtype", o.dtype},
                                       {"wire_dtype", o.wire_dtype},
                                       {"iters", o.iters},
                                       {"load_threads", o.load_threads},
                                       {"time_us", r.time_us},
                                       {"algbw_gbs", r.algbw},
                                       {"busbw_gbs", r.busbw},
                                       {"wrong", r.wrong}}
                            .dump());
    }
  }
  if (o.json) return;
  for (std::size_t b = 0; b < comms.size(); ++b) {
    log::info(
        "# allreduce, backend {} ({}), {} ranks, dtype {}, wire {}, time: median of {} iterations (slowest rank){}",
        comms[b].first->name, comms[b].second->name(), ranks, o.dtype, o.wire_dtype, o.iters,
        o.load_threads > 0 ? fmt::format(", {} computing thread(s) per rank beside it", o.load_threads) : "");
    log::info("#{:>13} {:>12} {:>6} {:>11} {:>12} {:>12} {:>8}", "size(B)", "count", "type", "time(us)", "algbw(GB/s)",
              "busbw(GB/s)", "#wrong");
    for (const Row& r : tables[b])
      log::info("{:>14} {:>12} {:>6} {:>11.2f} {:>12.2f} {:>12.2f} {:>8}", r.bytes, r.count, o.dtype, r.time_us,
                r.algbw, r.busbw, r.wrong);
  }
}

}  // namespace ringtrain
