// Checkpoint files and CheckpointDir under mpirun -np 1, 2 and 4: bitwise round trips of
// replicated buffers of every slicing (one element, exactly one block, one block + 1, ...) and
// per-rank rows, the mean rule on another world size, damaged and foreign files (every rank
// gets the same CollectiveError, nobody hangs), edited metadata, format 1 files (a committed
// one, tests/data/ckpt-v1), layout mismatches, and the directory policy (keep N, `latest`,
// stale temporaries, resume auto past a damaged file). Rank 0 alone edits files on disk;
// on_root shares its outcome so a failure there fails every rank.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <semaphore.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <future>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <typeinfo>

#include "ckpt/checksum.hpp"
#include "ckpt/shard_exchange.hpp"
#include "hdf5/h5_attributes.hpp"
#include "check/h5_check.hpp"
#include "hdf5/h5_handle.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"
#include "ringtrain/ckpt/checkpoint_dir.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "support/root_checks.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using test::on_root;
using test::same_on_all_ranks;

constexpr std::int64_t kBlockFloats = ckpt::kChecksumBlockBytes / static_cast<std::int64_t>(sizeof(float));

const Context& ctx() { return test::context(); }
int rank() { return test::context().world_rank(); }
int world() { return test::context().world_size(); }

// What a call did on this rank.
struct Outcome {
  bool threw = false;
  bool collective = false;  // a CollectiveError
  bool corrupt = false;     // its corrupt_file()
  std::string message;
};

Outcome outcome_of(const std::function<void()>& fn) {
  Outcome o;
  try {
    fn();
  } catch (const CollectiveError& e) {
    o.threw = o.collective = true;
    o.corrupt = e.corrupt_file();
    o.message = e.what();
  } catch (const std::exception& e) {
    o.threw = true;
    o.message = fmt::format("{} ({})", e.what(), typeid(e).name());
  }
  return o;
}

// Collective: the same CollectiveError on every rank, with the expected corrupt_file() and
// every needle in its message.
::testing::AssertionResult collective_error(const Outcome& o, bool corrupt, const std::vector<std::string>& needles) {
  const bool same = same_on_all_ranks(o.message);
  if (!o.threw) return ::testing::AssertionFailure() << "no exception";
  if (!o.collective) return ::testing::AssertionFailure() << "not a CollectiveError: " << o.message;
  if (o.corrupt != corrupt)
    return ::testing::AssertionFailure() << "corrupt_file() is " << o.corrupt << ", expected " << corrupt << ": "
                                         << o.message;
  for (const auto& n : needles)
    if (o.message.find(n) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << n << "': " << o.message;
  if (!same) return ::testing::AssertionFailure() << "the message differs between ranks: " << o.message;
  return ::testing::AssertionSuccess();
}

// Float buffers with stable addresses and the CheckpointBuffer list that points at them.
struct Buffers {
  std::deque<std::vector<float>> data;
  std::vector<CheckpointBuffer> list;

  Buffers& add(const std::string& name, std::int64_t numel, bool per_rank = false) {
    data.emplace_back(static_cast<std::size_t>(numel));
    list.push_back(CheckpointBuffer{name, data.back().data(), numel, per_rank});
    return *this;
  }
  std::vector<float>& operator[](const std::string& name) {
    for (std::size_t k = 0; k < list.size(); ++k)
      if (list[k].name == name) return data[k];
    throw std::runtime_error("no buffer " + name);
  }
  // Every byte set to a pattern no writer produces, so unread elements show.
  void poison() {
    for (auto& v : data)
      for (auto& x : v) {
        const std::uint32_t bits = 0xdeadbeefu;
        std::memcpy(&x, &bits, sizeof bits);
      }
  }
};

// A finite float of varied exponent and mantissa, different for every (buffer, element,
// row, step): rows are ranks for per-rank buffers, -1 for replicated ones.
float value_of(std::size_t buffer, std::int64_t i, int row, std::int64_t step) {
  std::uint64_t h = (buffer + 1) * 0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(i) * 0xbf58476d1ce4e5b9ull ^
                    static_cast<std::uint64_t>(row + 7) * 0x94d049bb133111ebull ^
                    static_cast<std::uint64_t>(step) * 0x2545f4914f6cdd1dull;
  h ^= h >> 31;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 29;
  const float mantissa = static_cast<float>(h & 0xffffff) / 16777216.0f - 0.5f;
  return std::ldexp(mantissa, static_cast<int>((h >> 24) % 41) - 20);
}

float expected_value(const Buffers& b, std::size_t k, std::int64_t i, int row, std::int64_t step) {
  return value_of(k, i, b.list[k].per_rank ? row : -1, step);
}

void fill(Buffers& b, std::int64_t step) {
  for (std::size_t k = 0; k < b.list.size(); ++k)
    for (std::int64_t i = 0; i < b.list[k].numel; ++i)
      b.data[k][static_cast<std::size_t>(i)] = expected_value(b, k, i, rank(), step);
}

// The rows of every rank of per-rank buffer k as the file holds them ([world, numel]).
std::vector<float> all_rows(const Buffers& b, std::size_t k, std::int64_t step) {
  std::vector<float> rows;
  for (int r = 0; r < world(); ++r)
    for (std::int64_t i = 0; i < b.list[k].numel; ++i) rows.push_back(expected_value(b, k, i, r, step));
  return rows;
}

// Empty when b holds exactly the values of `step` on this rank, else the first difference.
std::string difference(const Buffers& b, std::int64_t step) {
  for (std::size_t k = 0; k < b.list.size(); ++k)
    for (std::int64_t i = 0; i < b.list[k].numel; ++i) {
      const float want = expected_value(b, k, i, rank(), step);
      const float got = b.data[k][static_cast<std::size_t>(i)];
      if (std::memcmp(&want, &got, sizeof want) != 0)
        return fmt::format("rank {}: '{}'[{}] is {} (expected {})", rank(), b.list[k].name, i, got, want);
    }
  return {};
}

CheckpointMeta sample_meta(std::int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.epoch = 3;
  m.step_in_epoch = 17;
  m.global_batch = 256;
  m.seed = 0xfedcba9876543210ull;  // above INT64_MAX: must survive as unsigned
  m.optimizer_steps = step + 1;
  m.optimizer = "adamw";
  m.data_strategy = "stream";
  m.config = "[train]\nseed = 7\nname = \"r\xc3\xa9sum\xc3\xa9\"\n\n[optim]\nname = \"adamw\"\n";
  m.ringtrain_version = "not this";  // filled in by the writer
  m.world_size = 999;                // likewise
  return m;
}

// The byte offset of a contiguous dataset's raw data in the file (serial HDF5, rank 0).
std::uint64_t data_offset(const std::string& path, const std::string& dataset) {
  h5::File file(RT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
  h5::Dataset dset(RT_H5_CHECK(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT)));
  const haddr_t at = H5Dget_offset(dset);
  if (at == HADDR_UNDEF) throw std::runtime_error(path + ": " + dataset + ": no contiguous data offset");
  return static_cast<std::uint64_t>(at);
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(c);
  f.flush();
  if (!f) throw std::runtime_error(fmt::format("cannot flip byte {} of {}", offset, path));
}

// Flips one byte of element `element` of `dataset` (a mantissa byte, so the value changes).
void flip_element(const std::string& path, const std::string& dataset, std::int64_t element) {
  flip_byte(path, data_offset(path, dataset) + static_cast<std::uint64_t>(element) * sizeof(float) + 1);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// The layout of the round trip: replicated buffers of every interesting slicing, one per-rank.
Buffers round_trip_layout() {
  Buffers b;
  b.add("params", 3 * kBlockFloats + 17)
      .add("optimizer/exp_avg", kBlockFloats)  // exactly one checksum block
      .add("optimizer/exp_avg_sq", kBlockFloats + 1)
      .add("optimizer/velocity", 1000)
      .add("scalar", 1)
      .add("buffers", 3001, true);
  return b;
}

TEST(CheckpointFile, RoundTripIsBitwiseOnEveryRank) {
  const fs::path dir = test::temp_dir("ckpt_roundtrip");
  const std::string path = (dir / "rt.h5").string();
  Buffers out = round_trip_layout();
  fill(out, 0);
  // Values HDF5 must not touch either: signed zero, infinities, a denormal, a NaN payload.
  auto& special = out["optimizer/velocity"];
  const std::uint32_t nan_bits = 0x7fc12345u;
  special[0] = -0.0f;
  special[1] = std::numeric_limits<float>::infinity();
  special[2] = -std::numeric_limits<float>::infinity();
  special[3] = std::numeric_limits<float>::denorm_min();
  std::memcpy(&special[4], &nan_bits, sizeof nan_bits);
  special[5] = std::numeric_limits<float>::max();

  const double before = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  write_checkpoint_file(ctx(), path, sample_meta(1234), out.list);
  const double after = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

  Buffers in = round_trip_layout();
  in.poison();
  const CheckpointMeta got = read_checkpoint_file(ctx(), path, in.list);
  for (std::size_t k = 0; k < out.list.size(); ++k) {
    const auto& a = out.data[k];
    const auto& b = in.data[k];
    std::size_t first = a.size();
    for (std::size_t i = 0; i < a.size() && first == a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) first = i;
    EXPECT_EQ(first, a.size()) << "rank " << rank() << ": '" << out.list[k].name << "' differs first at element "
                               << first << " of " << a.size();
  }

  const CheckpointMeta want = sample_meta(1234);
  EXPECT_EQ(got.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(got.checksum_algorithm, ckpt::checksum_algorithm(ckpt::ChecksumScheme::kXxh3));
  EXPECT_NE(got.meta_checksum, 0u);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.epoch, want.epoch);
  EXPECT_EQ(got.step_in_epoch, want.step_in_epoch);
  EXPECT_EQ(got.global_batch, want.global_batch);
  EXPECT_EQ(got.seed, want.seed);
  EXPECT_EQ(got.optimizer_steps, want.optimizer_steps);
  EXPECT_EQ(got.optimizer, want.optimizer);
  EXPECT_EQ(got.data_strategy, want.data_strategy);
  EXPECT_EQ(got.config, want.config);
  EXPECT_EQ(got.world_size, world());
  EXPECT_FALSE(got.ringtrain_version.empty());
  EXPECT_EQ(got.ringtrain_version, version());
  EXPECT_GE(got.wall_time, before - 5.0);
  EXPECT_LE(got.wall_time, after + 5.0);
  EXPECT_TRUE(same_on_all_ranks(fmt::format("{:.6f}", got.wall_time))) << "wall_time differs between ranks";

  // Rank 0 inspects the file alone: every dataset verified, its stored checksum that of the
  // whole buffer (per-rank: of all ranks' rows), large datasets aligned to 1 MiB.
  ASSERT_TRUE(on_root([&] {
    std::vector<CheckpointDataset> found;
    const CheckpointMeta meta = inspect_checkpoint_file(path, true, &found);
    EXPECT_EQ(meta.step, want.step);
    EXPECT_EQ(meta.seed, want.seed);
    EXPECT_EQ(meta.config, want.config);
    EXPECT_EQ(meta.world_size, world());
    EXPECT_EQ(meta.wall_time, got.wall_time);
    ASSERT_EQ(found.size(), out.list.size());
    for (std::size_t k = 0; k < out.list.size(); ++k) {
      const CheckpointBuffer& b = out.list[k];
      const auto it = std::find_if(found.begin(), found.end(), [&](const auto& d) { return d.name == b.name; });
      ASSERT_NE(it, found.end()) << b.name;
      const std::vector<float> whole = b.per_rank ? all_rows(out, k, 0) : out.data[k];
      const std::vector<std::int64_t> dims =
          b.per_rank ? std::vector<std::int64_t>{world(), b.numel} : std::vector<std::int64_t>{b.numel};
      EXPECT_EQ(it->dims, dims) << b.name;
      EXPECT_TRUE(it->verified) << b.name;
      EXPECT_EQ(it->actual_checksum, it->stored_checksum) << b.name;
      EXPECT_EQ(it->stored_checksum,
                checkpoint_checksum(whole.data(), static_cast<std::int64_t>(whole.size() * sizeof(float))))
          << b.name;
      if (whole.size() * sizeof(float) >= static_cast<std::size_t>(ckpt::kChecksumBlockBytes))
        EXPECT_EQ(data_offset(path, b.name) % ckpt::kChecksumBlockBytes, 0u) << b.name << " is not 1 MiB aligned";
    }
    // Without verification: the metadata alone, nothing verified.
    std::vector<CheckpointDataset> listed;
    EXPECT_EQ(inspect_checkpoint_file(path, false, nullptr).step, want.step);
    inspect_checkpoint_file(path, false, &listed);
    ASSERT_EQ(listed.size(), out.list.size());
    for (const auto& d : listed) EXPECT_FALSE(d.verified) << d.name;
    check_checkpoint_layout(path, out.list);
  }));
}

// ZeRO shards (each rank a piece of every 130-element bucket) to the file's contiguous slices
// and back, in one round and in many small windows: every element lands where it belongs.
TEST(ShardExchange, ShardsToSlicesAndBackInAnyWindow) {
  const int world = test::context().world_size(), rank = test::context().world_rank();
  constexpr std::int64_t kSize = 1000, kBucket = 130;
  std::vector<ArenaRange> shard;
  for (std::int64_t b = 0; b < kSize; b += kBucket) {
    const std::int64_t n = std::min(kBucket, kSize - b), per = (n + world - 1) / world;
    const std::int64_t begin = std::min(n, per * rank), end = std::min(n, per * (rank + 1));
    if (end > begin) shard.push_back({b + begin, end - begin});
  }
  const std::int64_t per_slice = (kSize + world - 1) / world;
  const ArenaRange slice{std::min(kSize, per_slice * rank),
                         std::min(kSize, per_slice * (rank + 1)) - std::min(kSize, per_slice * rank)};
  std::vector<float> packed;
  for (const ArenaRange& r : shard)
    for (std::int64_t i = r.offset; i < r.end(); ++i) packed.push_back(static_cast<float>(i));
  for (const std::int64_t window : {kSize, std::int64_t{37}, std::int64_t{1}}) {
    std::vector<float> sliced(static_cast<std::size_t>(slice.count), -1.0f);
    ckpt::exchange_ranges(MPI_COMM_WORLD, shard, packed.data(), {slice}, sliced.data(), window);
    for (std::int64_t i = 0; i < slice.count; ++i)
      ASSERT_EQ(sliced[static_cast<std::size_t>(i)], static_cast<float>(slice.offset + i)) << "window " << window;
    std::vector<float> back(packed.size(), -1.0f);
    ckpt::exchange_ranges(MPI_COMM_WORLD, {slice}, sliced.data(), shard, back.data(), window);
    EXPECT_EQ(back, packed) << "window " << window;
  }
}

TEST(CheckpointFile, ZeroLengthBuffersRoundTrip) {
  // A model without buffers (no batchnorm) still has a "buffers" entry, of 0 elements.
  const fs::path dir = test::temp_dir("ckpt_empty");
  const std::string path = (dir / "empty.h5").string();
  Buffers out;
  out.add("params", 5).add("empty", 0).add("empty_rows", 0, true);
  fill(out, 3);
  write_checkpoint_file(ctx(), path, sample_meta(3), out.list);
  Buffers in;
  in.add("params", 5).add("empty", 0).add("empty_rows", 0, true);
  in.poison();
  const CheckpointMeta got = read_checkpoint_file(ctx(), path, in.list);
  EXPECT_EQ(got.step, 3);
  EXPECT_EQ(difference(in, 3), "");
  ASSERT_TRUE(on_root([&] {
    std::vector<CheckpointDataset> found;
    inspect_checkpoint_file(path, true, &found);
    EXPECT_EQ(found.size(), 3u);
    check_checkpoint_layout(path, out.list);
  }));
}

TEST(CheckpointFile, PerRankRowsOfAnotherWorldSizeAreAveraged) {
  const fs::path dir = test::temp_dir("ckpt_mean");
  const std::string path = (dir / "w.h5").string();
  Buffers out;
  out.add("params", kBlockFloats + 3).add("state", 7, true);
  fill(out, 0);
  write_checkpoint_file(ctx(), path, sample_meta(8), out.list);

  // Row r of the rewritten dataset: 0.25 i + 3 r - 5, so every mean is exact in float.
  auto row_value = [](std::int64_t r, std::int64_t i) { return 0.25f * static_cast<float>(i) + 3.0f * r - 5.0f; };
  for (const std::int64_t rows : {1, 3, 5}) {
    const std::string copy = (dir / fmt::format("rows{}.h5", rows)).string();
    // Rank 0 replaces "state" with a dataset of `rows` rows (and its checksum), as a run on
    // `rows` ranks would have written it.
    ASSERT_TRUE(on_root([&] {
      fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
      std::vector<float> data;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < 7; ++i) data.push_back(row_value(r, i));
      {
        h5::File file(RT_H5_CHECK(H5Fopen(copy.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)));
        RT_H5_CHECK(H5Ldelete(file, "state", H5P_DEFAULT));
        const hsize_t dims[2] = {static_cast<hsize_t>(rows), 7};
        h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(2, dims, nullptr)));
        h5::Dataset dset(
            RT_H5_CHECK(H5Dcreate2(file, "state", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
        RT_H5_CHECK(H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
        h5::write_attr<std::uint64_t>(
            dset, "checksum", checkpoint_checksum(data.data(), static_cast<std::int64_t>(data.size() * sizeof(float))));
      }
      // The edited file is a valid checkpoint for this layout.
      check_checkpoint_layout(copy, out.list);
      std::vector<CheckpointDataset> found;
      inspect_checkpoint_file(copy, true, &found);
    }));
    Buffers in;
    in.add("params", kBlockFloats + 3).add("state", 7, true);
    in.poison();
    read_checkpoint_file(ctx(), copy, in.list);
    for (std::int64_t i = 0; i < kBlockFloats + 3; ++i)
      ASSERT_EQ(in["params"][static_cast<std::size_t>(i)], out["params"][static_cast<std::size_t>(i)]) << i;
    for (std::int64_t i = 0; i < 7; ++i) {
      // The same world size: this rank's own row; another: the mean of all rows.
      const float want = rows == world() ? row_value(rank(), i) : row_value(0, i) + 1.5f * static_cast<float>(rows - 1);
      EXPECT_EQ(in["state"][static_cast<std::size_t>(i)], want)
          << "rank " << rank() << " of " << world() << ", file of " << rows << " rows, element " << i;
    }
  }
}

TEST(CheckpointFile, AFlippedDataByteFailsTheReadOnEveryRank) {
  const fs::path dir = test::temp_dir("ckpt_flip");
  const std::string path = (dir / "clean.h5").string();
  auto layout = [] {
    Buffers b;
    b.add("params", 3 * kBlockFloats + 17).add("optimizer/velocity", 1000).add("state", 64, true);
    return b;
  };
  Buffers out = layout();
  fill(out, 0);
  write_checkpoint_file(ctx(), path, sample_meta(1), out.list);

  struct Case {
    std::string dataset;
    std::int64_t element;
  };
  // The first and last element of a replicated buffer (read by the first and the last rank),
  // one at the end of a block, and the last row of the per-rank buffer.
  const std::vector<Case> cases = {{"params", 0},
                                   {"params", 2 * kBlockFloats - 1},
                                   {"params", 3 * kBlockFloats + 16},
                                   {"optimizer/velocity", 999},
                                   {"state", static_cast<std::int64_t>(world()) * 64 - 1}};
  for (std::size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(fmt::format("'{}' element {}", cases[c].dataset, cases[c].element));
    const std::string bad = (dir / fmt::format("bad{}.h5", c)).string();
    ASSERT_TRUE(on_root([&] {
      fs::copy_file(path, bad, fs::copy_options::overwrite_existing);
      flip_element(bad, cases[c].dataset, cases[c].element);
    }));
    Buffers in = layout();
    const Outcome read = outcome_of([&] { read_checkpoint_file(ctx(), bad, in.list); });
    EXPECT_TRUE(collective_error(read, true, {"'" + cases[c].dataset + "'", "checksum mismatch"}));
    // resume_checkpoint with this path: the same, and no fallback in explicit mode.
    const Outcome resumed = outcome_of([&] { resume_checkpoint(ctx(), bad, nullptr, in.list); });
    EXPECT_TRUE(collective_error(resumed, true, {"'" + cases[c].dataset + "'"}));
    EXPECT_TRUE(on_root([&] {
      EXPECT_NO_THROW(inspect_checkpoint_file(bad, false, nullptr));  // the metadata is intact
      try {
        inspect_checkpoint_file(bad, true, nullptr);
        ADD_FAILURE() << "inspect with verify accepted " << bad;
      } catch (const CorruptFileError& e) {
        EXPECT_NE(std::string(e.what()).find("'" + cases[c].dataset + "'"), std::string::npos) << e.what();
      }
    }));
  }
  // The clean file still reads (the failures above were the flips).
  Buffers in = layout();
  read_checkpoint_file(ctx(), path, in.list);
  EXPECT_EQ(difference(in, 0), "");
}

TEST(CheckpointFile, TruncatedAndForeignFilesAreCorruptOnEveryRank) {
  const fs::path dir = test::temp_dir("ckpt_foreign");
  const std::string path = (dir / "clean.h5").string();
  auto layout = [] {
    Buffers b;
    b.add("params", 2 * kBlockFloats + 5).add("state", 16, true);
    return b;
  };
  Buffers out = layout();
  fill(out, 0);
  write_checkpoint_file(ctx(), path, sample_meta(1), out.list);

  const std::string truncated = (dir / "truncated.h5").string();
  const std::string text = (dir / "text.h5").string();
  const std::string empty = (dir / "empty.h5").string();
  const std::string plain = (dir / "plain.h5").string();  // HDF5, but not a checkpoint
  ASSERT_TRUE(on_root([&] {
    fs::copy_file(path, truncated, fs::copy_options::overwrite_existing);
    fs::resize_file(truncated, fs::file_size(path) / 2);
    write_text(text, "this is not an HDF5 file\n");
    write_text(empty, "");
    h5::File file(RT_H5_CHECK(H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)));
    const hsize_t n = static_cast<hsize_t>(2 * kBlockFloats + 5);
    h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
    h5::Dataset dset(
        RT_H5_CHECK(H5Dcreate2(file, "params", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  }));
  for (const std::string& bad : {truncated, text, empty, plain}) {
    SCOPED_TRACE(bad);
    Buffers in = layout();
    const Outcome resumed = outcome_of([&] { resume_checkpoint(ctx(), bad, nullptr, in.list); });
    EXPECT_TRUE(collective_error(resumed, true, {bad}));
    const Outcome read = outcome_of([&] { read_checkpoint_file(ctx(), bad, in.list); });
    EXPECT_TRUE(collective_error(read, true, {}));
    EXPECT_TRUE(on_root([&] {
      EXPECT_THROW(inspect_checkpoint_file(bad, false, nullptr), CorruptFileError);
      EXPECT_THROW(inspect_checkpoint_file(bad, true, nullptr), CorruptFileError);
    }));
  }
}

TEST(CheckpointFile, LayoutMismatchNamesTheDatasetAndBothShapes) {
  const fs::path dir = test::temp_dir("ckpt_layout");
  const std::string path = (dir / "ok.h5").string();
  Buffers out;
  out.add("params", 1000).add("optimizer/velocity", 1000).add("state", 8, true);
  fill(out, 0);
  write_checkpoint_file(ctx(), path, sample_meta(1), out.list);

  // The message of the CheckpointMismatch that check_checkpoint_layout throws (rank 0).
  auto mismatch = [&](const std::vector<CheckpointBuffer>& expected) -> std::string {
    try {
      check_checkpoint_layout(path, expected);
    } catch (const CheckpointMismatch& e) {
      return e.what();
    } catch (const std::exception& e) {
      return fmt::format("not a CheckpointMismatch: {}", e.what());
    }
    return "no exception";
  };
  auto contains_all = [](const std::string& text, const std::vector<std::string>& needles) {
    for (const auto& n : needles)
      if (text.find(n) == std::string::npos) return false;
    return true;
  };
  ASSERT_TRUE(on_root([&] {
    EXPECT_NO_THROW(check_checkpoint_layout(path, out.list));
    auto bigger = out.list;
    bigger[0].numel = 1001;
    std::string m = mismatch(bigger);
    EXPECT_TRUE(contains_all(m, {"'params'", "[1000]", "[1001]", path})) << m;
    auto rows = out.list;
    rows[2].numel = 9;
    m = mismatch(rows);
    EXPECT_TRUE(contains_all(m, {"'state'", fmt::format("[{}, 8]", world()), "9"})) << m;
    auto as_rows = out.list;
    as_rows[0].per_rank = true;
    m = mismatch(as_rows);
    EXPECT_TRUE(contains_all(m, {"'params'", "[1000]"})) << m;
    auto fewer = out.list;
    fewer.erase(fewer.begin() + 1);  // the file has optimizer/velocity, the run does not
    m = mismatch(fewer);
    EXPECT_TRUE(contains_all(m, {"'optimizer/velocity'", "written with optim.name = 'adamw'"})) << m;
    auto more = out.list;
    more.push_back(CheckpointBuffer{"optimizer/exp_avg", nullptr, 1000, false});
    m = mismatch(more);
    EXPECT_TRUE(contains_all(m, {"'optimizer/exp_avg'", "written with optim.name = 'adamw'"})) << m;
  }));

  // Through resume_checkpoint: an error on every rank, not taken for damage.
  Buffers wrong;
  wrong.add("params", 1001).add("optimizer/velocity", 1000).add("state", 8, true);
  const Outcome o = outcome_of([&] { resume_checkpoint(ctx(), path, nullptr, wrong.list); });
  EXPECT_TRUE(collective_error(o, false, {"'params'", "[1000]", "[1001]"}));

  // A newer format version: a mismatch too (resume with the newer ringtrain), not damage.
  const std::string newer = (dir / "newer.h5").string();
  ASSERT_TRUE(on_root([&] {
    fs::copy_file(path, newer, fs::copy_options::overwrite_existing);
    {
      h5::File file(RT_H5_CHECK(H5Fopen(newer.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)));
      RT_H5_CHECK(H5Adelete(file, "format_version"));
      h5::write_attr<std::int64_t>(file, "format_version", kCheckpointFormatVersion + 1);
    }
    EXPECT_THROW(inspect_checkpoint_file(newer, false, nullptr), CheckpointMismatch);
  }));
  Buffers in;
  in.add("params", 1000).add("optimizer/velocity", 1000).add("state", 8, true);
  const Outcome v = outcome_of([&] { resume_checkpoint(ctx(), newer, nullptr, in.list); });
  EXPECT_TRUE(collective_error(v, false, {fmt::format("version {}", kCheckpointFormatVersion + 1)}));
}

// The collective read checks each dataset itself, without the layout check a resume runs
// first (the file may change in between): a per-rank dataset that lost its rank dimension was
// indexed as [ranks, numel] (a heap overread, found by tests/fuzz/fuzz_checkpoint), and a
// float64 dataset was converted silently.
TEST(CheckpointFile, TheReadChecksEachDatasetsShapeAndType) {
  const fs::path dir = test::temp_dir("ckpt_read_checks");
  const std::string path = (dir / "ok.h5").string();
  Buffers out;
  out.add("params", 1000).add("state", 8, true);
  fill(out, 0);
  write_checkpoint_file(ctx(), path, sample_meta(1), out.list);
  // A copy of the file with dataset `name` rewritten as `type` of shape `dims` (rank 0 alone).
  auto rewritten = [&](const char* name, hid_t type, const std::vector<hsize_t>& dims) {
    const std::string copy = (dir / fmt::format("{}-{}.h5", name, dims.size())).string();
    EXPECT_TRUE(on_root([&] {
      fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
      h5::File file(RT_H5_CHECK(H5Fopen(copy.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)));
      RT_H5_CHECK(H5Ldelete(file, name, H5P_DEFAULT));
      h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
      h5::Dataset d(RT_H5_CHECK(H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
      std::vector<double> zeros(1000);
      RT_H5_CHECK(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()));
      h5::write_attr<std::uint64_t>(d, "checksum", 0);
    }));
    return copy;
  };
  Buffers in;
  in.add("params", 1000).add("state", 8, true);
  const std::string one_dim = rewritten("state", H5T_IEEE_F32LE, {8});
  EXPECT_TRUE(collective_error(outcome_of([&] { read_checkpoint_file(ctx(), one_dim, in.list); }), false,
                               {"'state'", "[8]", "[ranks, 8]", one_dim}));
  const std::string doubles = rewritten("params", H5T_IEEE_F64LE, {1000});
  EXPECT_TRUE(collective_error(outcome_of([&] { read_checkpoint_file(ctx(), doubles, in.list); }), true,
                               {"'params'", "32-bit floats", doubles}));
}

// Replaces root attribute `name` of `path` by a scalar of type T (rank 0 alone).
template <typename T>
void replace_root_attr(const std::string& path, const char* name, T value) {
  h5::File file(RT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)));
  RT_H5_CHECK(H5Adelete(file, name));
  h5::write_attr<T>(file, name, value);
}

TEST(CheckpointFile, EditedMetadataFailsItsChecksumOnEveryRank) {
  const fs::path dir = test::temp_dir("ckpt_meta");
  const std::string path = (dir / "clean.h5").string();
  Buffers out;
  out.add("params", kBlockFloats + 3).add("state", 8, true);
  fill(out, 0);
  write_checkpoint_file(ctx(), path, sample_meta(5), out.list);

  struct Case {
    std::string name;
    std::function<void(const std::string&)> edit;
    std::string expected;
  };
  // Values the range checks accept: only the checksum can tell them from the written ones.
  const std::vector<Case> cases = {
      {"epoch", [](const std::string& p) { replace_root_attr<std::int64_t>(p, "epoch", 4); }, "'meta_checksum'"},
      {"seed", [](const std::string& p) { replace_root_attr<std::uint64_t>(p, "seed", 1); }, "'meta_checksum'"},
      {"wall_time", [](const std::string& p) { replace_root_attr<double>(p, "wall_time", 0.5); }, "'meta_checksum'"},
      {"config",
       [](const std::string& p) {
         h5::File file(RT_H5_CHECK(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)));
         RT_H5_CHECK(H5Adelete(file, "config"));
         h5::write_string_attr(file, "config", {"[train]\nseed = 8\n"}, true);
       },
       "'meta_checksum'"},
      {"meta_checksum deleted",
       [](const std::string& p) {
         h5::File file(RT_H5_CHECK(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)));
         RT_H5_CHECK(H5Adelete(file, "meta_checksum"));
       },
       "attribute 'meta_checksum' is missing"},
      // Relabelled as format 1 to skip the metadata checksum: the algorithm gives it away.
      {"format_version 1", [](const std::string& p) { replace_root_attr<std::int64_t>(p, "format_version", 1); },
       "attribute 'checksum_algorithm'"},
  };
  for (std::size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(cases[c].name);
    const std::string bad = (dir / fmt::format("bad{}.h5", c)).string();
    ASSERT_TRUE(on_root([&] {
      fs::copy_file(path, bad, fs::copy_options::overwrite_existing);
      cases[c].edit(bad);
    }));
    Buffers in;
    in.add("params", kBlockFloats + 3).add("state", 8, true);
    const Outcome read = outcome_of([&] { read_checkpoint_file(ctx(), bad, in.list); });
    EXPECT_TRUE(collective_error(read, true, {bad, "damaged checkpoint metadata", cases[c].expected}));
    EXPECT_TRUE(on_root([&] {
      try {
        inspect_checkpoint_file(bad, false, nullptr);
        ADD_FAILURE() << "inspect accepted " << bad;
      } catch (const CorruptFileError& e) {
        EXPECT_NE(std::string(e.what()).find(cases[c].expected), std::string::npos) << e.what();
      }
    }));
  }
  // The clean file still reads; its checksum covers the attributes as written.
  Buffers in;
  in.add("params", kBlockFloats + 3).add("state", 8, true);
  EXPECT_EQ(read_checkpoint_file(ctx(), path, in.list).step, 5);
  EXPECT_EQ(difference(in, 0), "");
}

// tests/data/ckpt-v1/ckpt-v1.h5 was written by the format 1 writer (its README says how): it
// loads on any rank count with format 1's checksums, which still catch a damaged byte.
TEST(CheckpointFile, AFormatOneFileStillLoads) {
  const std::string fixture = std::string(RINGTRAIN_TEST_DATA_DIR) + "/ckpt-v1/ckpt-v1.h5";
  auto layout = [] {
    Buffers b;
    b.add("params", 1000).add("optimizer/velocity", 1000).add("state", 8, true);
    return b;
  };
  constexpr std::int64_t kStep = 7;
  Buffers in = layout();
  in.poison();
  const CheckpointMeta got = read_checkpoint_file(ctx(), fixture, in.list);
  // Written on one rank: its row is also the mean every rank of another world size starts from.
  for (std::size_t k = 0; k < in.list.size(); ++k)
    for (std::int64_t i = 0; i < in.list[k].numel; ++i) {
      const float want = value_of(k, i, in.list[k].per_rank ? 0 : -1, kStep);
      ASSERT_EQ(std::memcmp(&want, &in.data[k][static_cast<std::size_t>(i)], sizeof want), 0)
          << "'" << in.list[k].name << "'[" << i << "] on rank " << rank();
    }
  const CheckpointMeta want = sample_meta(kStep);
  EXPECT_EQ(got.format_version, 1);
  EXPECT_EQ(got.checksum_algorithm, "ringtrain-blockhash64 (1 MiB blocks)");
  EXPECT_EQ(got.meta_checksum, 0u);
  EXPECT_EQ(got.step, kStep);
  EXPECT_EQ(got.epoch, want.epoch);
  EXPECT_EQ(got.step_in_epoch, want.step_in_epoch);
  EXPECT_EQ(got.global_batch, want.global_batch);
  EXPECT_EQ(got.seed, want.seed);
  EXPECT_EQ(got.optimizer, want.optimizer);
  EXPECT_EQ(got.config, want.config);
  EXPECT_EQ(got.world_size, 1);

  const fs::path dir = test::temp_dir("ckpt_v1");
  const std::string bad = (dir / "flipped.h5").string();
  ASSERT_TRUE(on_root([&] {
    std::vector<CheckpointDataset> found;
    EXPECT_EQ(inspect_checkpoint_file(fixture, true, &found).format_version, 1);
    ASSERT_EQ(found.size(), 3u);
    for (const auto& d : found) EXPECT_TRUE(d.verified && d.actual_checksum == d.stored_checksum) << d.name;
    check_checkpoint_layout(fixture, layout().list);
    fs::copy_file(fixture, bad, fs::copy_options::overwrite_existing);
    flip_element(bad, "optimizer/velocity", 500);
  }));
  Buffers again = layout();
  const Outcome read = outcome_of([&] { read_checkpoint_file(ctx(), bad, again.list); });
  EXPECT_TRUE(collective_error(read, true, {"'optimizer/velocity'", "checksum mismatch"}));
}

// ---- CheckpointDir and resume_checkpoint ----

Buffers dir_layout() {
  Buffers b;
  b.add("params", 2 * kBlockFloats + 3).add("optimizer/velocity", 100).add("state", 16, true);
  return b;
}

TEST(CheckpointDirectory, SaveKeepsTheNewestAndPublishesLatest) {
  const fs::path base = test::temp_dir("ckpt_dir_keep");
  const std::string dir = (base / "run" / "checkpoints").string();  // does not exist yet
  const CheckpointDir cd(ctx(), dir, 2);
  EXPECT_EQ(cd.dir(), dir);
  Buffers b = dir_layout();
  for (std::int64_t step = 1; step <= 5; ++step) {
    fill(b, step);
    const SavedCheckpoint saved = cd.save(sample_meta(step), b.list);
    EXPECT_EQ(saved.path, dir + "/" + CheckpointDir::file_name(step));
    EXPECT_GE(saved.seconds, 0.0);
    ASSERT_TRUE(on_root([&] {
      ASSERT_TRUE(fs::exists(saved.path));
      EXPECT_EQ(saved.bytes, static_cast<std::int64_t>(fs::file_size(saved.path)));
      EXPECT_EQ(read_text(fs::path(dir) / "latest"), CheckpointDir::file_name(step) + "\n");
      EXPECT_EQ(inspect_checkpoint_file(saved.path, true, nullptr).step, step);
    }));
  }
  ASSERT_TRUE(on_root([&] {
    EXPECT_EQ(names_in(dir), (std::set<std::string>{".lock", "ckpt-000000004.h5", "ckpt-000000005.h5", "latest"}));
    EXPECT_NE(read_text(fs::path(dir) / "latest").find("ckpt-000000005.h5"), std::string::npos);
  }));
  const std::vector<std::string> listed = cd.list();
  EXPECT_EQ(listed, (std::vector<std::string>{dir + "/ckpt-000000005.h5", dir + "/ckpt-000000004.h5"}))
      << "rank " << rank();

  // Resume auto takes the newest, on every rank.
  Buffers in = dir_layout();
  in.poison();
  const auto resumed = resume_checkpoint(ctx(), "auto", &cd, in.list);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->path, dir + "/ckpt-000000005.h5");
  EXPECT_EQ(resumed->meta.step, 5);
  EXPECT_EQ(difference(in, 5), "");
}

TEST(CheckpointDirectory, ConstructorRemovesStaleTemporariesOnly) {
  const fs::path base = test::temp_dir("ckpt_dir_stale");
  const fs::path dir = base / "ckpt";
  ASSERT_TRUE(on_root([&] {
    fs::create_directories(dir);
    write_text(dir / "ckpt-000000009.h5.tmp", "half a checkpoint");
    write_text(dir / "latest.tmp.a1B2c3", "ckpt-0000");  // write_file_atomic's, interrupted
    write_text(dir / "latest.tmp.notes", "the user's");
    write_text(dir / "notes.txt", "the user's");
    write_text(dir / "ckpt-000000009.h5.tmp.data.0", "");  // Open MPI's, of a save that was killed
    write_text(dir / "ckpt-000000009.h5.tmp.metadata.12", "");
    write_text(dir / "ckpt-000000009.h5.tmp.data.notes", "the user's");
  }));
  const CheckpointDir cd(ctx(), dir.string(), 3);
  ASSERT_TRUE(on_root([&] {
    EXPECT_EQ(names_in(dir),
              (std::set<std::string>{".lock", "latest.tmp.notes", "notes.txt", "ckpt-000000009.h5.tmp.data.notes"}));
  }));
  EXPECT_TRUE(cd.list().empty());
  // Nothing to resume from.
  Buffers in = dir_layout();
  EXPECT_FALSE(resume_checkpoint(ctx(), "auto", &cd, in.list).has_value());
}

// One run at a time: a second CheckpointDir on the same directory (another run, here in the
// same process: the lock is per open file, not per process) fails on every rank, naming the
// holder; once the first is gone the directory can be taken again.
TEST(CheckpointDirectory, ASecondRunOnTheDirectoryIsRefusedWhileTheFirstHoldsIt) {
  const fs::path base = test::temp_dir("ckpt_dir_lock");
  const std::string dir = (base / "ckpt").string();
  {
    const CheckpointDir first(ctx(), dir, 2);
    const Outcome o = outcome_of([&] { CheckpointDir second(ctx(), dir, 2); });
    EXPECT_TRUE(collective_error(
        o, false, {"checkpoint.dir: " + dir + " is in use by another run (host ", ", pid ", dir + "/.lock"}));
    ASSERT_TRUE(on_root([&] { EXPECT_NE(read_text(fs::path(dir) / ".lock").find(", since "), std::string::npos); }));
  }
  const CheckpointDir again(ctx(), dir, 2);
  EXPECT_TRUE(again.list().empty());
}

// Save prunes only up to its own step: a later checkpoint (one `auto` skipped as damaged) stays.
TEST(CheckpointDirectory, SavingNeverDeletesALaterStep) {
  const fs::path base = test::temp_dir("ckpt_dir_later");
  const std::string dir = (base / "ckpt").string();
  const CheckpointDir cd(ctx(), dir, 1);
  Buffers b = dir_layout();
  fill(b, 9);
  cd.save(sample_meta(9), b.list);
  for (const std::int64_t step : {3, 4}) {
    fill(b, step);
    cd.save(sample_meta(step), b.list);
  }
  ASSERT_TRUE(on_root([&] {
    EXPECT_EQ(names_in(dir), (std::set<std::string>{".lock", "ckpt-000000004.h5", "ckpt-000000009.h5", "latest"}));
    EXPECT_EQ(read_text(fs::path(dir) / "latest"), "ckpt-000000004.h5\n");
  }));
  // Discarding removes the files and a `latest` that named one of them.
  cd.discard({dir + "/ckpt-000000004.h5"}, "test");
  ASSERT_TRUE(on_root([&] { EXPECT_EQ(names_in(dir), (std::set<std::string>{".lock", "ckpt-000000009.h5"})); }));
  EXPECT_EQ(CheckpointDir::step_of_path(dir + "/ckpt-000000009.h5"), 9);
  EXPECT_EQ(CheckpointDir::step_of_path(dir + "/latest"), -1);
}

// The temporary file of a save is created exclusively: a link planted under its name (or left
// by an interrupted save of the same step) is replaced, never written through.
TEST(CheckpointDirectory, APlantedTemporaryLinkIsReplacedNotWrittenThrough) {
  const fs::path base = test::temp_dir("ckpt_dir_planted");
  const std::string dir = (base / "ckpt").string();
  const CheckpointDir cd(ctx(), dir, 2);
  const fs::path victim = base / "victim.txt";
  ASSERT_TRUE(on_root([&] {
    write_text(victim, "precious");
    fs::create_symlink(victim, fs::path(dir) / "ckpt-000000002.h5.tmp");
  }));
  Buffers b = dir_layout();
  fill(b, 2);
  cd.save(sample_meta(2), b.list);
  ASSERT_TRUE(on_root([&] {
    EXPECT_EQ(read_text(victim), "precious");
    EXPECT_FALSE(fs::is_symlink(fs::path(dir) / "ckpt-000000002.h5"));
    EXPECT_EQ(inspect_checkpoint_file(dir + "/ckpt-000000002.h5", true, nullptr).step, 2);
  }));
}

// A listing that fails (here: the directory is gone) is an error on every rank, not "no
// checkpoint" (which `auto` would take as a fresh start).
TEST(CheckpointDirectory, AFailedListingIsAnErrorNotAnEmptyDirectory) {
  const fs::path base = test::temp_dir("ckpt_dir_list");
  const std::string dir = (base / "ckpt").string();
  const CheckpointDir cd(ctx(), dir, 2);
  ASSERT_TRUE(on_root([&] { fs::remove_all(dir); }));
  const Outcome o = outcome_of([&] { cd.list(); });
  EXPECT_TRUE(collective_error(o, false, {"checkpoint.dir: " + dir + ": cannot list: "}));
  Buffers in = dir_layout();
  const Outcome r = outcome_of([&] { resume_checkpoint(ctx(), "auto", &cd, in.list); });
  EXPECT_TRUE(collective_error(r, false, {"cannot list"}));
}

TEST(CheckpointDirectory, ResumeAutoSkipsADamagedNewestCheckpoint) {
  const fs::path base = test::temp_dir("ckpt_dir_resume");
  const std::string dir = (base / "ckpt").string();
  const CheckpointDir cd(ctx(), dir, 3);
  Buffers b = dir_layout();
  for (const std::int64_t step : {4, 5}) {
    fill(b, step);
    cd.save(sample_meta(step), b.list);
  }
  Buffers in = dir_layout();
  in.poison();
  // "none": nothing loaded, buffers untouched.
  EXPECT_FALSE(resume_checkpoint(ctx(), "none", &cd, in.list).has_value());
  EXPECT_FALSE(resume_checkpoint(ctx(), "none", nullptr, in.list).has_value());
  for (const auto& v : in.data)
    for (const float x : v) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, &x, sizeof bits);
      ASSERT_EQ(bits, 0xdeadbeefu);
    }

  const std::string newest = dir + "/ckpt-000000005.h5";
  const std::string older = dir + "/ckpt-000000004.h5";
  ASSERT_TRUE(on_root([&] { flip_element(newest, "params", kBlockFloats + 2); }));
  const auto resumed = resume_checkpoint(ctx(), "auto", &cd, in.list);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->path, older);
  EXPECT_EQ(resumed->meta.step, 4);
  EXPECT_EQ(difference(in, 4), "");
  EXPECT_TRUE(same_on_all_ranks(resumed->path));

  // Naming the damaged file explicitly is an error, not a fallback.
  const Outcome explicit_bad = outcome_of([&] { resume_checkpoint(ctx(), newest, &cd, in.list); });
  EXPECT_TRUE(collective_error(explicit_bad, true, {newest}));

  // With every checkpoint damaged, auto finds none.
  ASSERT_TRUE(on_root([&] { flip_element(older, "state", 3); }));
  EXPECT_FALSE(resume_checkpoint(ctx(), "auto", &cd, in.list).has_value());
}

TEST(CheckpointDirectory, ResumeAutoInAnEmptyDirectoryFindsNothing) {
  const fs::path base = test::temp_dir("ckpt_dir_empty");
  const CheckpointDir cd(ctx(), (base / "ckpt").string(), 2);
  Buffers in = dir_layout();
  EXPECT_FALSE(resume_checkpoint(ctx(), "auto", &cd, in.list).has_value());
  EXPECT_THROW(resume_checkpoint(ctx(), "auto", nullptr, in.list), ConfigError);
  // An explicit path that does not exist names it.
  const std::string missing = (base / "nope.h5").string();
  const Outcome o = outcome_of([&] { resume_checkpoint(ctx(), missing, &cd, in.list); });
  EXPECT_TRUE(collective_error(o, false, {missing}));
}

TEST(CheckpointDirectory, ResumeAutoStopsAtAMismatchInsteadOfSkippingIt) {
  const fs::path base = test::temp_dir("ckpt_dir_mismatch");
  const CheckpointDir cd(ctx(), (base / "ckpt").string(), 2);
  Buffers b = dir_layout();
  fill(b, 1);
  cd.save(sample_meta(1), b.list);
  Buffers other;
  other.add("params", 2 * kBlockFloats + 4).add("optimizer/velocity", 100).add("state", 16, true);
  const Outcome o = outcome_of([&] { resume_checkpoint(ctx(), "auto", &cd, other.list); });
  EXPECT_TRUE(collective_error(o, false, {"'params'"}));
}

TEST(CheckpointDirectory, UnusableDirectoryFailsOnEveryRank) {
  const fs::path base = test::temp_dir("ckpt_dir_bad");
  const fs::path file = base / "a-file";
  ASSERT_TRUE(on_root([&] { write_text(file, "x"); }));
  for (const fs::path& p : {file / "ckpt", file}) {
    SCOPED_TRACE(p.string());
    const Outcome o = outcome_of([&] { CheckpointDir cd(ctx(), p.string(), 2); });
    EXPECT_TRUE(collective_error(o, false, {p.string()}));
  }
  EXPECT_THROW(CheckpointDir(ctx(), (base / "ckpt").string(), 0), ConfigError);
}

TEST(CheckpointDirectory, AFailedSaveLeavesThePreviousCheckpoint) {
  const fs::path base = test::temp_dir("ckpt_dir_fail");
  const std::string dir = (base / "ckpt").string();
  const CheckpointDir cd(ctx(), dir, 2);
  Buffers b = dir_layout();
  fill(b, 1);
  cd.save(sample_meta(1), b.list);
  // A directory where the temporary file of step 2 would go: that save cannot create it.
  ASSERT_TRUE(on_root([&] { fs::create_directories(fs::path(dir) / "ckpt-000000002.h5.tmp" / "blocker"); }));
  fill(b, 2);
  const Outcome o = outcome_of([&] { cd.save(sample_meta(2), b.list); });
  EXPECT_TRUE(collective_error(o, false, {"step 2", "ckpt-000000001.h5 is intact"}));
  ASSERT_TRUE(on_root([&] {
    EXPECT_EQ(read_text(fs::path(dir) / "latest"), "ckpt-000000001.h5\n");
    EXPECT_FALSE(fs::exists(fs::path(dir) / "ckpt-000000002.h5"));
    EXPECT_EQ(inspect_checkpoint_file(dir + "/ckpt-000000001.h5", true, nullptr).step, 1);
  }));
  Buffers in = dir_layout();
  const auto resumed = resume_checkpoint(ctx(), "auto", &cd, in.list);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->meta.step, 1);
  EXPECT_EQ(difference(in, 1), "");
}

TEST(CheckpointDirectory, SaveNeverPrunesTheCheckpointItJustWrote) {
  // A directory that already holds newer steps (a run restarted from scratch, or from an
  // older checkpoint, in the same directory): the checkpoint just saved must survive pruning
  // and `latest` must name a file that exists.
  const fs::path base = test::temp_dir("ckpt_dir_older");
  const std::string dir = (base / "ckpt").string();
  const CheckpointDir cd(ctx(), dir, 2);
  Buffers b = dir_layout();
  for (const std::int64_t step : {30, 20}) {
    fill(b, step);
    cd.save(sample_meta(step), b.list);
  }
  fill(b, 10);
  const Outcome o = outcome_of([&] { cd.save(sample_meta(10), b.list); });
  EXPECT_FALSE(o.threw) << o.message;
  ASSERT_TRUE(on_root([&] {
    EXPECT_TRUE(fs::exists(fs::path(dir) / "ckpt-000000010.h5")) << "the checkpoint just saved was pruned";
    const std::string latest = read_text(fs::path(dir) / "latest");
    const std::string named = latest.substr(0, latest.find('\n'));
    EXPECT_TRUE(fs::exists(fs::path(dir) / named)) << "latest names " << named << ", which does not exist";
  }));
}

// Open MPI's sharedfp "sm" component names a POSIX semaphore after the file's name alone
// (/dev/shm/sem.OMPIO_<basename>), shared by every job on the node; one left taken by a process
// killed inside MPI_File_open made every later open of a file of that name wait forever (every
// save of that step, by every run on the node: found when a killed test left the one of
// ckpt-000000020.h5.tmp). Context keeps that component out; with such a semaphore in place a
// save of that name must still complete. A hang is caught here (the test fails and the job
// ends) rather than left to ctest's timeout, so the semaphore is always removed.
TEST(CheckpointFile, AStaleOpenMpiSemaphoreOfTheFileNameDoesNotHangTheSave) {
#ifndef OPEN_MPI
  GTEST_SKIP() << "Open MPI's sharedfp components only";
#else
  const fs::path dir = test::temp_dir("ckpt_stale_semaphore");
  const std::string basename = dir.filename().string() + ".h5";
  const std::string semaphore = "/OMPIO_" + basename;
  if (rank() == 0) {
    sem_t* taken = sem_open(semaphore.c_str(), O_CREAT | O_EXCL, 0644, 0);  // value 0: held by nobody alive
    ASSERT_NE(taken, SEM_FAILED) << semaphore << ": " << std::strerror(errno);
    sem_close(taken);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Buffers out = round_trip_layout();
  fill(out, 3);
  auto save = std::async(std::launch::async,
                         [&] { write_checkpoint_file(ctx(), (dir / basename).string(), sample_meta(3), out.list); });
  const bool finished = save.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  if (rank() == 0) sem_unlink(semaphore.c_str());
  if (!finished) {
    ADD_FAILURE() << "the save of " << basename << " waited 60 s on the stale semaphore " << semaphore;
    MPI_Abort(MPI_COMM_WORLD, 1);  // the saving thread cannot be cancelled
  }
  save.get();
#endif
}

// Open MPI's sharedfp "lockedfile" component formats the file's path into a fixed buffer: a path
// of ~250 characters aborted every rank with "buffer overflow detected" at the first save (deep
// experiment trees reach that). Kept out with "sm" (Context); such a path saves and reads back.
TEST(CheckpointFile, ASaveIntoALongPathCompletes) {
  const fs::path dir = test::temp_dir("ckpt_long_path") / std::string(120, 'd') / std::string(120, 'e');
  if (rank() == 0) fs::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string path = (dir / "ckpt-000000020.h5").string();
  ASSERT_GT(path.size(), 300u);
  Buffers out = round_trip_layout();
  fill(out, 20);
  write_checkpoint_file(ctx(), path, sample_meta(20), out.list);
  Buffers in = round_trip_layout();
  in.poison();
  EXPECT_EQ(read_checkpoint_file(ctx(), path, in.list).step, 20);
  EXPECT_EQ(in.data, out.data);
}

// A checkpoint that is there but cannot be read (here its permissions) is not a damaged one:
// check_checkpoint_layout, which `auto` resume opens each candidate with, throws IoError (which
// stops the resume) instead of CorruptFileError (which skips the file for an older one, and the
// resumed run then saved over the newer checkpoint). Checked in a child process that is not
// root (root reads any file): it reports which error it got in its exit status.
TEST(CheckpointDirectory, AnUnreadableCheckpointIsAnErrorNotADamagedFile) {
  const fs::path base = test::temp_dir("ckpt_dir_unreadable");
  const std::string dir = (base / "ckpt").string();
  const CheckpointDir cd(ctx(), dir, 3);
  Buffers b = dir_layout();
  fill(b, 5);
  cd.save(sample_meta(5), b.list);
  ASSERT_TRUE(on_root([&] {
    const std::string path = dir + "/ckpt-000000005.h5";
    // Root: 0600 and a child that is nobody; another user: no permission at all, for itself.
    fs::permissions(path, ::geteuid() == 0 ? fs::perms::owner_read | fs::perms::owner_write : fs::perms::none);
    std::cout.flush();
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
      int status = 4;
      try {
        check_checkpoint_layout(path, dir_layout().list);
        status = 5;  // read it after all
      } catch (const CorruptFileError&) {
        status = 1;
      } catch (const IoError& e) {
        status = std::string(e.what()).find("cannot read: Permission denied") != std::string::npos ? 0 : 2;
      } catch (...) {
        status = 2;
      }
      ::_exit(status);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: taken for a damaged file; 2: another error; 3: setuid failed; 5: read";
  }));
}

// The checkpoint directory removed between saves (or renamed): the failed save's line says why it
// failed first, then that the directory cannot be listed (before, the listing's error replaced
// the whole line, and the save's failure was not said at all).
TEST(CheckpointDirectory, ASaveIntoARemovedDirectorySaysWhyItFailed) {
  const fs::path base = test::temp_dir("ckpt_dir_removed");
  const std::string dir = (base / "ckpt").string();
  const CheckpointDir cd(ctx(), dir, 3);
  Buffers b = dir_layout();
  fill(b, 4);
  cd.save(sample_meta(4), b.list);
  ASSERT_TRUE(on_root([&] { fs::remove_all(dir); }));
  const Outcome o = outcome_of([&] { cd.save(sample_meta(5), b.list); });
  ASSERT_TRUE(o.threw);
  EXPECT_EQ(o.message.rfind("checkpoint at step 5 failed: " + dir + "/ckpt-000000005.h5.tmp: cannot create: ", 0), 0u)
      << o.message;
  EXPECT_NE(o.message.find("(checkpoint.dir: " + dir + ": cannot list: No such file or directory)"), std::string::npos)
      << o.message;
  EXPECT_TRUE(same_on_all_ranks(o.message));
}

}  // namespace
}  // namespace ringtrain
