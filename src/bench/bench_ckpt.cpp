// `ringtrain bench ckpt`: checkpoint write and read bandwidth for a model of N parameters
// (one replicated buffer of N floats, written and read exactly as training does) against raw
// file-system bandwidth of the same bytes in the same run and directory. Write: each rank
// pwrites its 1/W of one shared file and fsyncs it, as each checkpoint writer does its slices.
// Read: each rank preads the whole file, as each checkpoint reader reads every rank's slices;
// both files are dropped from the page cache first, so both reads come from storage (a read
// after a restart elsewhere) and the raw read bounds the checkpoint's. Passes alternate raw and
// checkpoint; rank 0 prints medians of the slowest rank's times.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench/bench_stats.hpp"
#include "ringtrain/bench/bench.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/random.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/tensor/tensor.hpp"

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kIoChunk = std::int64_t{8} << 20;

[[noreturn]] void io_fail(const std::string& path, const char* what) {
  throw IoError(fmt::format("{}: {}: {}", path, what, std::strerror(errno)));
}

// This rank's bytes [begin, end) of `path`, written from (or read into) `data` + begin.
void raw_transfer(const std::string& path, std::int64_t begin, std::int64_t end, char* data, bool write) {
  const int fd = ::open(path.c_str(), write ? (O_WRONLY | O_CREAT) : O_RDONLY, 0644);
  if (fd < 0) io_fail(path, "cannot open");
  for (std::int64_t at = begin; at < end;) {
    const auto n = static_cast<std::size_t>(std::min(kIoChunk, end - at));
    const ssize_t done = write ? ::pwrite(fd, data + at, n, at) : ::pread(fd, data + at, n, at);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) {
      ::close(fd);
      io_fail(path, write ? "write failed" : "read failed");
    }
    at += done;
  }
  if (write && ::fsync(fd) != 0) {
    ::close(fd);
    io_fail(path, "fsync failed");
  }
  if (::close(fd) != 0) io_fail(path, "close failed");
}

// Writes back and drops `path`'s pages from the page cache (posix_fadvise DONTNEED), so that
// the next read of it comes from storage.
void evict_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) io_fail(path, "cannot open");
  if (::fdatasync(fd) != 0) {
    ::close(fd);
    io_fail(path, "fdatasync failed");
  }
  const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // returns the error instead of setting errno
  if (rc != 0) {
    ::close(fd);
    errno = rc;
    io_fail(path, "posix_fadvise(DONTNEED) failed");
  }
  if (::close(fd) != 0) io_fail(path, "close failed");
}

// Seconds of the slowest rank for fn, started together.
template <typename F>
double timed(Communicator& comm, const Context& ctx, F&& fn) {
  comm.barrier();
  const auto t0 = Clock::now();
  run_collectively(ctx, fn);
  return max_of(gather(comm, ctx, std::chrono::duration<double>(Clock::now() - t0).count()));
}

}  // namespace

void bench_ckpt(Context& ctx, const CkptBenchOptions& o) {
  ctx.bind(Device::cpu, 0);
  auto comm = make_mpi_communicator(ctx, AllreduceAlgo::mpi);
  const std::string raw_path = o.dir + "/raw.bin";
  const std::string ckpt_path = o.dir + "/bench.h5";
  run_collectively(ctx, [&] {
    if (ctx.world_rank() != 0) return;
    std::error_code ec;
    std::filesystem::create_directories(o.dir, ec);
    RT_REQUIRE(!ec, IoError, "{}: cannot create: {}", o.dir, ec.message());
    const int fd = ::open(raw_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) io_fail(raw_path, "cannot create");
    if (::close(fd) != 0) io_fail(raw_path, "close failed");
  });
  // Random values: nothing a file system or page cache could shortcut.
  Tensor params = Tensor::empty(Shape{o.params});
  Tensor back = Tensor::empty(Shape{o.params});
  Rng rng(stream_key(1, 2, 3, 4));
  for (std::int64_t i = 0; i < o.params; ++i) params.f32()[i] = rng.uniform() - 0.5f;
  const std::int64_t bytes = o.params * static_cast<std::int64_t>(sizeof(float));
  const std::int64_t begin = bytes * ctx.world_rank() / ctx.world_size();
  const std::int64_t end = bytes * (ctx.world_rank() + 1) / ctx.world_size();
  const std::vector<CheckpointBuffer> out = {{"params", params.f32(), o.params, false}};
  const std::vector<CheckpointBuffer> in = {{"params", back.f32(), o.params, false}};
  CheckpointMeta meta;  // a valid checkpoint that trained nothing (read_meta checks the ranges)
  meta.global_batch = 1;
  meta.optimizer = "none";
  meta.data_strategy = "none";
  meta.config = "# ringtrain bench ckpt";

  std::vector<double> raw_write, ckpt_write, raw_read, ckpt_read, write_ratio, read_ratio;
  for (int r = 0; r < o.repeats; ++r) {
    // A new file each time, as every checkpoint is: rank 0 truncates it, then all ranks write.
    const double rw = timed(*comm, ctx, [&] {
      if (ctx.world_rank() == 0 && ::truncate(raw_path.c_str(), 0) != 0) io_fail(raw_path, "cannot truncate");
      comm->barrier();
      raw_transfer(raw_path, begin, end, static_cast<char*>(params.raw()), true);
    });
    const double cw = timed(*comm, ctx, [&] { write_checkpoint_file(ctx, ckpt_path, meta, out); });
    run_collectively(ctx, [&] { evict_from_page_cache(raw_path); });
    const double rr =
        timed(*comm, ctx, [&] { raw_transfer(raw_path, 0, bytes, static_cast<char*>(back.raw()), false); });
    run_collectively(ctx, [&] { evict_from_page_cache(ckpt_path); });
    const double cr = timed(*comm, ctx, [&] { read_checkpoint_file(ctx, ckpt_path, in); });
    RT_REQUIRE(std::memcmp(params.raw(), back.raw(), static_cast<std::size_t>(bytes)) == 0, Error,
               "bench ckpt: {}: the data read back differs from what was written", ckpt_path);
    raw_write.push_back(static_cast<double>(bytes) / rw / 1e6);
    ckpt_write.push_back(static_cast<double>(bytes) / cw / 1e6);
    raw_read.push_back(static_cast<double>(bytes) / rr / 1e6);
    ckpt_read.push_back(static_cast<double>(bytes) / cr / 1e6);
    write_ratio.push_back(ckpt_write.back() / raw_write.back());
    read_ratio.push_back(ckpt_read.back() / raw_read.back());
    log::info(
        "bench ckpt: pass {}/{}: raw write {:.0f} MB/s, checkpoint write {:.0f} MB/s ({:.0f}%), raw read {:.0f} "
        "MB/s, checkpoint read {:.0f} MB/s",
        r + 1, o.repeats, raw_write.back(), ckpt_write.back(), 100.0 * write_ratio.back(), raw_read.back(),
        ckpt_read.back());
  }
  run_collectively(ctx, [&] {
    if (ctx.world_rank() != 0) return;
    std::filesystem::remove(raw_path);
    std::filesystem::remove(ckpt_path);
  });
  log::info(
      "bench ckpt: {} parameters ({:.0f} MB), {} rank{}, medians of {}: checkpoint write {:.0f} MB/s = {:.0f}% "
      "of raw write+fsync {:.0f} MB/s (1/{} of the bytes per rank) | checkpoint read {:.0f} MB/s = {:.0f}% of raw "
      "pread {:.0f} MB/s (all the bytes per rank, both from storage: evicted from the page cache first)",
      o.params, static_cast<double>(bytes) / 1e6, ctx.world_size(), ctx.world_size() > 1 ? "s" : "", o.repeats,
      median(ckpt_write), 100.0 * median(write_ratio), median(raw_write), ctx.world_size(), median(ckpt_read),
      100.0 * median(read_ratio), median(raw_read));
  const nlohmann::json j = {{"bench", "ckpt"},
                            {"params", o.params},
                            {"bytes", bytes},
                            {"dir", o.dir},
                            {"ranks", ctx.world_size()},
                            {"repeats", o.repeats},
                            {"raw_write_MBps", median(raw_write)},
                            {"ckpt_write_MBps", median(ckpt_write)},
                            {"write_vs_raw", median(write_ratio)},
                            {"raw_read_MBps", median(raw_read)},
                            {"ckpt_read_MBps", median(ckpt_read)},
                            {"read_vs_raw", median(read_ratio)},
                            {"read_from", "storage: both files evicted from the page cache before each read"},
                            {"runs_raw_write_MBps", raw_write},
                            {"runs_ckpt_write_MBps", ckpt_write}};
  log::info("{}", j.dump());
}

}  // namespace ringtrain
