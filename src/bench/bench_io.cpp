// `ringtrain bench io DATASET...`: one pass of the loader over a dataset (open, plus reading
// for the memory strategy, then every batch of one training epoch, decoded to float) against
// the raw read bandwidth of the same files (plain pread of 1/W of their bytes per rank) in
// the same run, alternating raw and loader passes; rank 0 prints medians as one JSON line.
#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "bench/bench_stats.hpp"
#include "ringtrain/bench/bench.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;

// Reads bytes [begin, end) of the files taken back to back, in preads of the buffer's size.
void pread_range(const std::vector<DatasetFile>& files, const std::vector<std::int64_t>& sizes, std::int64_t begin,
                 std::int64_t end, const Tensor& buffer) {
  std::int64_t file_start = 0;
  for (std::size_t f = 0; f < files.size(); file_start += sizes[f], ++f) {
    std::int64_t at = std::max(begin, file_start) - file_start;
    const std::int64_t stop = std::min(end, file_start + sizes[f]) - file_start;
    if (at >= stop) continue;
    const int fd = ::open(files[f].path.c_str(), O_RDONLY);
    if (fd < 0) throw IoError(fmt::format("{}: cannot open: {}", files[f].path, std::strerror(errno)));
    while (at < stop) {
      const auto want = static_cast<std::size_t>(std::min<std::int64_t>(stop - at, buffer.numel()));
      const ssize_t got = ::pread(fd, buffer.raw(), want, at);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const std::string why = got < 0 ? std::strerror(errno) : "unexpected end of file";
        ::close(fd);
        throw IoError(fmt::format("{}: read at byte {} failed: {}", files[f].path, at, why));
      }
      at += got;
    }
    ::close(fd);
  }
}

struct Pass {
  double open_s = 0.0;       // Dataset::open (memory: with allocating and reading the samples)
  double seconds = 0.0;      // open + every batch
  std::int64_t samples = 0;  // this rank's
  double read_s = 0.0;       // in file reads only (memory: at open; stream: while batching)
  std::int64_t read_bytes = 0;
  DatasetOpenStats open;
  std::vector<std::int64_t> order;
};

Pass loader_pass(const Context& ctx, Communicator& comm, const IoBenchOptions& o, const DatasetSpec& spec,
                 bool keep_order) {
  Pass p;
  comm.barrier();
  const auto t0 = Clock::now();
  std::shared_ptr<const Dataset> data;
  run_collectively(ctx, [&] { data = Dataset::open(ctx, spec); });
  p.open_s = std::chrono::duration<double>(Clock::now() - t0).count();
  LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.world_size = ctx.world_size();
  lo.rank = ctx.world_rank();
  lo.prefetch = o.prefetch;
  lo.shuffle_window = o.shuffle_window;
  lo.read_ahead = o.read_ahead;
  std::unique_ptr<Loader> loader;
  run_collectively(ctx, [&] { loader = std::make_unique<Loader>(data, lo); });
  for (std::int64_t s = 0; s < loader->steps_per_epoch(); ++s) {
    const Batch& b = loader->next();
    p.samples += b.size();
    if (keep_order) p.order.insert(p.order.end(), b.indices.begin(), b.indices.end());
  }
  p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  p.open = data->open_stats();
  p.read_s = data->open_stats().read + loader->stats().read_seconds;
  p.read_bytes = data->open_stats().read_bytes + loader->stats().read_bytes;
  return p;
}

}  // namespace

void bench_io(Context& ctx, const IoBenchOptions& o) {
  ctx.bind(Device::cpu, 0);
  auto comm = make_mpi_communicator(ctx, AllreduceAlgo::mpi);
  DatasetSpec spec;
  spec.sources = o.sources;
  spec.images_key = o.images_key;
  spec.labels_key = o.labels_key;
  const std::optional<ReadStrategy> strategy = read_strategy_from_name(o.strategy);
  RT_REQUIRE(strategy.has_value(), ConfigError, "bench io: unknown --strategy '{}' ({})", o.strategy,
             fmt::join(read_strategy_names(), ", "));
  spec.strategy = *strategy;

  // A first pass warms the page cache for both readers and lists the files.
  const Pass warm = loader_pass(ctx, *comm, o, spec, !o.order_out.empty());
  std::shared_ptr<const Dataset> data;
  run_collectively(ctx, [&] { data = Dataset::open(ctx, spec); });
  const std::vector<DatasetFile> files = data->files();
  std::vector<std::int64_t> sizes;
  std::int64_t total_bytes = 0;
  for (const auto& f : files) {
    sizes.push_back(static_cast<std::int64_t>(std::filesystem::file_size(f.path)));
    total_bytes += sizes.back();
  }
  const std::int64_t sample_bytes = data->sample_bytes();
  data.reset();
  if (!o.order_out.empty()) {
    const std::string path = fmt::format("{}.rank{}.i64", o.order_out, ctx.world_rank());
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(warm.order.data()), static_cast<std::streamsize>(warm.order.size() * 8));
    if (!out) throw IoError(fmt::format("{}: cannot write", path));
  }

  const std::int64_t rank_begin = total_bytes * ctx.world_rank() / ctx.world_size();
  const std::int64_t rank_end = total_bytes * (ctx.world_rank() + 1) / ctx.world_size();
  // 4 MiB, 64-byte aligned like the loader's buffers: the kernel's copy out of the page cache
  // is several times slower into some misaligned buffers.
  const Tensor buffer = Tensor::empty(Shape{std::int64_t{4} << 20}, DType::u8);
  std::vector<double> raw_agg, raw_rank, read_agg, read_rank, read_ratio, pass_agg, pass_rank, sps_agg, sps_rank,
      open_s, pass_ratio;
  std::vector<double> open_check, open_allocate, open_read, open_share;  // this rank's
  for (int r = 0; r < o.repeats; ++r) {
    comm->barrier();
    const auto t0 = Clock::now();
    pread_range(files, sizes, rank_begin, rank_end, buffer);
    const double raw_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto raw_all = gather(*comm, ctx, raw_s);
    const Pass p = loader_pass(ctx, *comm, o, spec, false);
    const auto pass_all = gather(*comm, ctx, p.seconds);
    const auto read_all = gather(*comm, ctx, p.read_s);
    double samples = 0.0, read_bytes = 0.0;
    for (const double s : gather(*comm, ctx, static_cast<double>(p.samples))) samples += s;
    for (const double b : gather(*comm, ctx, static_cast<double>(p.read_bytes))) read_bytes += b;
    // Aggregates: everything the ranks moved over the slowest rank's time.
    raw_agg.push_back(static_cast<double>(total_bytes) / max_of(raw_all) / 1e6);
    raw_rank.push_back(static_cast<double>(rank_end - rank_begin) / raw_s / 1e6);
    read_agg.push_back(read_bytes / max_of(read_all) / 1e6);
    read_rank.push_back(static_cast<double>(p.read_bytes) / p.read_s / 1e6);
    read_ratio.push_back(read_agg.back() / raw_agg.back());
    sps_agg.push_back(samples / max_of(pass_all));
    sps_rank.push_back(static_cast<double>(p.samples) / p.seconds);
    pass_agg.push_back(samples * static_cast<double>(sample_bytes) / max_of(pass_all) / 1e6);
    pass_rank.push_back(static_cast<double>(p.samples * sample_bytes) / p.seconds / 1e6);
    pass_ratio.push_back(pass_agg.back() / raw_agg.back());
    open_s.push_back(p.open_s);
    open_check.push_back(p.open.check);
    open_allocate.push_back(p.open.allocate);
    open_read.push_back(p.open.read);
    open_share.push_back(p.open.share);
  }
  // Per-rank medians of every rank, for the record.
  const auto all_raw_rank = gather(*comm, ctx, median(raw_rank));
  const auto all_read_rank = gather(*comm, ctx, median(read_rank));
  const auto all_sps_rank = gather(*comm, ctx, median(sps_rank));
  const auto all_pass_rank = gather(*comm, ctx, median(pass_rank));
  nlohmann::json j = {{"bench", "io"},
                      {"sources", o.sources},
                      {"strategy", o.strategy},
                      {"ranks", ctx.world_size()},
                      {"batch_per_rank", o.batch},
                      {"prefetch", o.prefetch},
                      {"repeats", o.repeats},
                      {"file_bytes", total_bytes},
                      {"raw_read_MBps_aggregate", median(raw_agg)},
                      {"raw_read_MBps_per_rank", all_raw_rank},
                      {"read_MBps_aggregate", median(read_agg)},
                      {"read_MBps_per_rank", all_read_rank},
                      {"read_vs_raw", median(read_ratio)},
                      {"pass_samples_per_s_aggregate", median(sps_agg)},
                      {"pass_samples_per_s_per_rank", all_sps_rank},
                      {"pass_MBps_aggregate", median(pass_agg)},
                      {"pass_MBps_per_rank", all_pass_rank},
                      {"pass_vs_raw", median(pass_ratio)},
                      {"open_s", median(open_s)},
                      {"open_phases_s_rank0",
                       {{"check", median(open_check)},
                        {"allocate", median(open_allocate)},
                        {"read", median(open_read)},
                        {"share", median(open_share)}}},
                      {"runs_raw_MBps_aggregate", raw_agg},
                      {"runs_read_MBps_aggregate", read_agg},
                      {"runs_pass_samples_per_s_aggregate", sps_agg}};
  log::info(
      "bench io: {} strategy, {} rank{}, medians of {}: raw pread {:.0f} MB/s | loader reads {:.0f} MB/s "
      "({:.0f}% of raw) | one pass to float batches: {:.0f} samples/s = {:.0f} MB/s ({:.0f}% of raw, {:.3f} s "
      "open) | aggregates",
      o.strategy, ctx.world_size(), ctx.world_size() > 1 ? "s" : "", o.repeats, median(raw_agg), median(read_agg),
      100.0 * median(read_ratio), median(sps_agg), median(pass_agg), 100.0 * median(pass_ratio), median(open_s));
  log::info("{}", j.dump());
}

}  // namespace ringtrain
