// Loader and EpochPlanner in one process (ranks of larger worlds are simulated by loaders with
// their own world_size/rank over the same Dataset): each strategy gives each sample at most
// once per epoch, the same batches for the same seed, with prefetch on or off, and from
// several files as from one; evaluation order; dtypes; NaN/Inf; errors of loader threads; raw
// uint8 batches (augmentation on the GPU) that decode to the same batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "data/epoch_plan.hpp"
#include "data/sample_decoder.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/tensor/dtype.hpp"
#include "support/test_context.hpp"
#include "unit/data/augment_reference.hpp"
#include "unit/data/h5_files.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::int64_t>;

// What a batch holds, copied out (a Batch is only valid until the next call).
struct Seen {
  std::int64_t epoch = 0, step = 0;
  Ids indices;
  std::vector<std::int32_t> labels;
  std::vector<float> x;
  bool operator==(const Seen&) const = default;
};

std::vector<Seen> take(Loader& loader, std::int64_t epochs) {
  std::vector<Seen> out;
  for (std::int64_t e = 0; e < epochs; ++e)
    for (std::int64_t s = 0; s < loader.steps_per_epoch(); ++s) {
      const Batch& b = loader.next();
      out.push_back(Seen{b.epoch, b.step, b.indices, b.labels, std::vector<float>(b.x.f32(), b.x.f32() + b.x.numel())});
    }
  return out;
}

std::shared_ptr<const Dataset> open(const std::vector<std::string>& sources, ReadStrategy strategy,
                                    NonFinite nonfinite = NonFinite::error) {
  DatasetSpec spec;
  spec.sources = sources;
  spec.strategy = strategy;
  spec.nonfinite = nonfinite;
  return Dataset::open(test::context(), spec);
}

LoaderOptions options(std::int64_t batch, std::int64_t epochs, int prefetch = 2) {
  LoaderOptions o;
  o.batch_size = batch;
  o.epochs = epochs;
  o.prefetch = prefetch;
  o.seed = 11;
  o.augment = AugmentOptions{2, true};
  o.normalize = Normalization{{0.3}, {0.7}};
  o.shuffle_window = 25;
  o.read_ahead = 1;
  return o;
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

constexpr ReadStrategy kStrategies[] = {ReadStrategy::memory, ReadStrategy::stream};

TEST_F(LoaderTest, ManyFilesGiveTheSameBatchesAsOne) {
  // 120 samples of [2, 4, 5]; chunks of 10 everywhere, so the stream strategy's blocks match too.
  test::write_u8_file(path("one.h5"), 0, 120, 2, 4, 5, 10);
  test::write_u8_file(path("part-a.h5"), 0, 30, 2, 4, 5, 10);
  test::write_u8_file(path("part-b.h5"), 30, 50, 2, 4, 5, 10);
  test::write_u8_file(path("part-c.h5"), 80, 40, 2, 4, 5, 10);
  for (const ReadStrategy st : kStrategies) {
    const auto one = open({path("one.h5")}, st);
    const auto many = open({path("part-a.h5"), path("part-[bc].h5")}, st);  // a list with a glob
    ASSERT_EQ(many->files().size(), 3u);
    EXPECT_EQ(many->files()[2].first, 80);
    EXPECT_EQ(many->size(), 120);
    Loader a(one, options(8, 2));
    Loader b(many, options(8, 2));
    EXPECT_EQ(take(a, 2), take(b, 2)) << read_strategy_name(st);
  }
  // Memory batches do not depend on chunking at all: contiguous files give the same.
  test::write_u8_file(path("flat-a.h5"), 0, 70, 2, 4, 5);
  test::write_u8_file(path("flat-b.h5"), 70, 50, 2, 4, 5);
  Loader a(open({path("one.h5")}, ReadStrategy::memory), options(8, 1));
  Loader b(open({path("flat-*.h5")}, ReadStrategy::memory), options(8, 1));
  EXPECT_EQ(take(a, 1), take(b, 1));
}

TEST_F(LoaderTest, EachSampleAtMostOncePerEpochOnEveryWorldSize) {
  test::write_u8_file(path("d.h5"), 0, 103, 1, 3, 3, 9);
  for (const ReadStrategy st : kStrategies) {
    const auto data = open({path("d.h5")}, st);
    for (const int world : {1, 2, 3, 4}) {
      std::vector<std::vector<Seen>> ranks;
      for (int r = 0; r < world; ++r) {
        LoaderOptions o = options(5, 3);
        o.world_size = world;
        o.rank = r;
        Loader loader(data, o);
        EXPECT_EQ(loader.steps_per_epoch(), 103 / world / 5) << read_strategy_name(st) << " world " << world;
        ranks.push_back(take(loader, 3));
      }
      for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
        std::set<std::int64_t> seen;
        std::size_t count = 0;
        for (const auto& batches : ranks)
          for (const auto& b : batches) {
            if (b.epoch != epoch) continue;
            ASSERT_EQ(b.indices.size(), 5u);
            for (std::size_t k = 0; k < b.indices.size(); ++k) {
              seen.insert(b.indices[k]);
              ASSERT_EQ(b.labels[k], test::label_of(b.indices[k]));
            }
            count += b.indices.size();
          }
        EXPECT_EQ(seen.size(), count) << read_strategy_name(st) << " world " << world << ": a sample came twice";
        EXPECT_EQ(count, static_cast<std::size_t>(103 / world / 5 * 5 * world));
        EXPECT_LE(*seen.rbegin(), 102);
      }
    }
  }
}

TEST_F(LoaderTest, SameSeedSameBatchesOtherEpochsOtherOrder) {
  test::write_u8_file(path("d.h5"), 0, 90, 1, 3, 3, 10);
  for (const ReadStrategy st : kStrategies) {
    const auto data = open({path("d.h5")}, st);
    Loader a(data, options(6, 2));
    Loader b(data, options(6, 2));
    const auto first = take(a, 2);
    EXPECT_EQ(first, take(b, 2)) << read_strategy_name(st);
    Ids e0, e1;
    for (const auto& s : first) {
      Ids& epoch = s.epoch == 0 ? e0 : e1;
      epoch.insert(epoch.end(), s.indices.begin(), s.indices.end());
    }
    EXPECT_NE(e0, e1) << read_strategy_name(st);
    LoaderOptions other = options(6, 1);
    other.seed = 12;
    Loader c(data, other);
    Ids o0;
    for (const auto& s : take(c, 1)) o0.insert(o0.end(), s.indices.begin(), s.indices.end());
    EXPECT_NE(e0, o0) << read_strategy_name(st);
  }
}

TEST_F(LoaderTest, PrefetchOnAndOffGiveIdenticalBatches) {
  test::write_u8_file(path("d.h5"), 0, 97, 3, 6, 6, 8);
  for (const ReadStrategy st : kStrategies) {
    const auto data = open({path("d.h5")}, st);
    Loader sync(data, options(7, 3, 0));
    LoaderOptions ahead_options = options(7, 3, 3);
    ahead_options.read_ahead = 3;
    Loader ahead(data, ahead_options);
    EXPECT_EQ(take(sync, 3), take(ahead, 3)) << read_strategy_name(st);
  }
}

TEST_F(LoaderTest, MemoryGlobalBatchesDoNotDependOnWorldSize) {
  test::write_u8_file(path("d.h5"), 0, 100, 1, 4, 4, 16);
  const auto data = open({path("d.h5")}, ReadStrategy::memory);
  // The global batch of 12 at each step, as world 1, 2 and 4 assemble it (rank after rank).
  auto global_batches = [&](int world) {
    std::vector<std::vector<Seen>> ranks;
    for (int r = 0; r < world; ++r) {
      LoaderOptions o = options(12 / world, 2);
      o.world_size = world;
      o.rank = r;
      Loader loader(data, o);
      ranks.push_back(take(loader, 2));
    }
    std::vector<Seen> out(ranks[0].size());
    for (std::size_t s = 0; s < out.size(); ++s)
      for (const auto& rank : ranks) {
        out[s].indices.insert(out[s].indices.end(), rank[s].indices.begin(), rank[s].indices.end());
        out[s].x.insert(out[s].x.end(), rank[s].x.begin(), rank[s].x.end());
      }
    return out;
  };
  const auto w1 = global_batches(1);
  EXPECT_EQ(w1.size(), 16u);  // 8 steps x 2 epochs
  const auto w2 = global_batches(2);
  const auto w4 = global_batches(4);
  for (std::size_t s = 0; s < w1.size(); ++s) {  // identical samples, augmented identically
    EXPECT_EQ(w2[s].indices, w1[s].indices);
    EXPECT_EQ(w4[s].indices, w1[s].indices);
    EXPECT_EQ(w4[s].x, w1[s].x);
  }
}

TEST_F(LoaderTest, StreamRankParts) {
  // 120 samples in chunks of 10: with a part of 120 / W samples per rank (a whole number of
  // blocks), rank r's samples are exactly the r-th part of the world-of-one sequence.
  test::write_u8_file(path("d.h5"), 0, 120, 1, 2, 2, 10);
  const auto data = open({path("d.h5")}, ReadStrategy::stream);
  auto rank_order = [&](int world, int rank) {
    data::PlanOptions o;
    o.batch = 5;
    o.world_size = world;
    o.rank = rank;
    o.seed = 4;
    o.shuffle_window = 1;
    return data::EpochPlanner(data, o).plan(2)->order;
  };
  const Ids whole = rank_order(1, 0);
  ASSERT_EQ(whole.size(), 120u);
  for (const int world : {2, 4}) {
    const std::size_t part = 120 / static_cast<std::size_t>(world);
    for (int r = 0; r < world; ++r) {
      Ids mine = rank_order(world, r);
      Ids expected(whole.begin() + static_cast<std::ptrdiff_t>(r * part),
                   whole.begin() + static_cast<std::ptrdiff_t>((r + 1) * part));
      std::sort(mine.begin(), mine.end());
      std::sort(expected.begin(), expected.end());
      EXPECT_EQ(mine, expected) << "world " << world << " rank " << r;
    }
  }
  // Blocks are shuffled as wholes: each run of 10 in the order is one chunk's samples.
  for (std::size_t b = 0; b < whole.size(); b += 10) {
    const auto [lo, hi] = std::minmax_element(whole.begin() + static_cast<std::ptrdiff_t>(b),
                                              whole.begin() + static_cast<std::ptrdiff_t>(b + 10));
    EXPECT_EQ(*lo % 10, 0);
    EXPECT_EQ(*hi - *lo, 9);
  }
  // Windows of 25 samples (3 blocks) shuffle across block boundaries.
  data::PlanOptions o;
  o.batch = 5;
  o.shuffle_window = 25;
  const auto plan = data::EpochPlanner(data, o).plan(0);
  EXPECT_EQ(plan->groups.size(), 4u);  // 30 + 30 + 30 + 30
  EXPECT_EQ(plan->groups[0].blocks.size(), 3u);
}

TEST_F(LoaderTest, EvaluationCoversEachShardInOrder) {
  test::write_u8_file(path("d.h5"), 0, 53, 1, 2, 2, 8);
  for (const ReadStrategy st : kStrategies) {
    const auto data = open({path("d.h5")}, st);
    Ids all;
    for (int r = 0; r < 3; ++r) {
      LoaderOptions o = options(10, 2);
      o.training = false;
      o.world_size = 3;
      o.rank = r;
      Loader loader(data, o);
      EXPECT_EQ(loader.steps_per_epoch(), 2);  // 18, 18, 17 samples: batches of 10 and 8 (7)
      const auto batches = take(loader, 2);
      for (const auto& b : batches)
        if (b.epoch == 1) all.insert(all.end(), b.indices.begin(), b.indices.end());
      EXPECT_EQ(batches[0].indices.size(), 10u);
      EXPECT_EQ(batches[1].indices.size(), r < 2 ? 8u : 7u);
      EXPECT_EQ(batches[0].indices, batches[2].indices);  // every evaluation the same
    }
    Ids expected(53);
    for (std::int64_t i = 0; i < 53; ++i) expected[static_cast<std::size_t>(i)] = i;
    EXPECT_EQ(all, expected) << read_strategy_name(st);
  }
}

// Writes samples of type T and checks the loader's floats against the reference decoding.
template <typename T>
void expect_dtype_decodes(const std::string& file, SampleType type, hid_t file_type, hid_t mem_type) {
  {
    test::H5FileWriter wr(file);
    if (type == SampleType::f16) {
      std::vector<std::uint16_t> bits = test::sample_values<std::uint16_t>(0, 20, 12);
      for (auto& b : bits) b = float_to_f16(static_cast<float>(b));
      wr.add("images", file_type, mem_type, {20, 3, 2, 2}, bits, 5);
      std::vector<std::uint8_t> labels(20, 1);
      wr.add("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {20}, labels);
    } else {
      wr.samples<T>(0, {20, 3, 2, 2}, file_type, mem_type, 5);
    }
  }
  const Normalization norm{{0.5, 1.0, -2.0}, {2.0, 0.5, 3.0}};
  for (const ReadStrategy st : kStrategies) {
    const auto data = open({file}, st);
    ASSERT_EQ(data->sample_type(), type);
    LoaderOptions o = options(6, 1, 0);
    o.training = false;
    o.normalize = norm;
    Loader loader(data, o);
    for (const auto& b : take(loader, 1))
      for (std::size_t k = 0; k < b.indices.size(); ++k) {
        auto u = [&](std::int64_t j) {
          const double v = test::sample_value(b.indices[k], j);
          return type == SampleType::u8 ? v / 255.0 : static_cast<double>(static_cast<T>(v));
        };
        const auto want = test::reference_decode(u, 3, 2, 2, 0, AugmentDraw{}, norm.mean, norm.std);
        ASSERT_EQ(std::memcmp(b.x.data() + k * 12, want.data(), 12 * sizeof(float)), 0)
            << sample_type_name(type) << " " << read_strategy_name(st) << " sample " << b.indices[k];
      }
  }
}

TEST_F(LoaderTest, EveryNumericDtypeIsReadAndNormalized) {
  expect_dtype_decodes<std::uint8_t>(path("u8.h5"), SampleType::u8, H5T_STD_U8LE, H5T_NATIVE_UINT8);
  expect_dtype_decodes<std::int16_t>(path("i16.h5"), SampleType::i16, H5T_STD_I16BE, H5T_NATIVE_INT16);
  expect_dtype_decodes<std::int32_t>(path("i32.h5"), SampleType::i32, H5T_STD_I32LE, H5T_NATIVE_INT32);
  const h5::Datatype half = test::half_type();
  expect_dtype_decodes<std::uint16_t>(path("f16.h5"), SampleType::f16, half, half);
  expect_dtype_decodes<float>(path("f32.h5"), SampleType::f32, H5T_IEEE_F32BE, H5T_NATIVE_FLOAT);
  expect_dtype_decodes<double>(path("f64.h5"), SampleType::f64, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE);
}

TEST_F(LoaderTest, NonFiniteSamplesFailOrAreSkipped) {
  std::vector<float> v = test::sample_values<float>(0, 30, 4);
  v[3 * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
  v[7 * 4 + 0] = -std::numeric_limits<float>::infinity();
  const std::string file = path("nan.h5");
  {
    test::H5FileWriter wr(file);
    wr.add("images", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {30, 1, 2, 2}, v, 4);
    std::vector<std::uint8_t> labels(30, 2);
    wr.add("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {30}, labels);
  }
  for (const ReadStrategy st : kStrategies) {
    try {
      open({file}, st);
      ADD_FAILURE() << "no error";
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()), file +
                                           ": dataset 'images': sample 3 holds NaN (data.nonfinite = \"skip\" "
                                           "leaves such samples out)");
    }
    const auto data = open({file}, st, NonFinite::skip);
    EXPECT_EQ(data->excluded(), (Ids{3, 7}));
    Loader loader(data, options(4, 3));
    EXPECT_EQ(loader.steps_per_epoch(), 7);  // 28 usable samples
    for (const auto& b : take(loader, 3))
      for (const auto i : b.indices) EXPECT_TRUE(i != 3 && i != 7) << read_strategy_name(st);
  }
}

TEST_F(LoaderTest, ReadErrorOnALoaderThreadSurfacesAtItsBatch) {
  // Deflated chunks of 10 samples; the chunk of samples 30-39 is overwritten with garbage.
  const std::string file = path("bad-chunk.h5");
  test::write_u8_file(file, 0, 60, 1, 8, 8, 10, true);
  test::overwrite_bytes(file, test::chunk_address(file, "images", 30), 64, '\x5a');
  const auto data = open({file}, ReadStrategy::stream);  // opening reads labels only
  for (const int prefetch : {0, 2}) {
    LoaderOptions o = options(10, 1, prefetch);
    o.training = false;
    Loader loader(data, o);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(loader.next().indices.front(), s * 10);
    try {
      loader.next();
      ADD_FAILURE() << "no error, prefetch " << prefetch;
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(file + ": dataset 'images', samples 30-39: H5Dread", 0), 0) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  // In training order the bad block comes some time during the epoch.
  Loader training(data, options(10, 1, 2));
  EXPECT_THROW(take(training, 1), DataError);
}

TEST_F(LoaderTest, StopsCleanlyWhileItsThreadsWait) {
  test::write_u8_file(path("d.h5"), 0, 200, 1, 4, 4, 10);
  for (const ReadStrategy st : kStrategies) {
    const auto data = open({path("d.h5")}, st);
    { Loader untouched(data, options(4, 5, 8)); }
    Loader partial(data, options(4, 5, 2));
    partial.next();
    partial.next();
  }  // destroyed with full queues and threads blocked on them: must not hang
}

// Raw batches carry the stored bytes and the draws the decoder would have used: decoded on the
// host they are the loader's float batches bit for bit, from a fresh and from a resumed start.
TEST_F(LoaderTest, RawBatchesDecodeToTheSameBatches) {
  test::write_u8_file(path("d.h5"), 0, 120, 3, 5, 6, 10);  // 15 batches of 8 per epoch
  for (const ReadStrategy st : kStrategies)
    for (const int prefetch : {0, 2})
      for (const auto& [start_epoch, start_step] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {1, 3}}) {
        SCOPED_TRACE(
            fmt::format("{} prefetch {} start {}/{}", read_strategy_name(st), prefetch, start_epoch, start_step));
        const auto data = open({path("d.h5")}, st);
        LoaderOptions o = options(8, 3, prefetch);
        o.start_epoch = start_epoch;
        o.start_step = start_step;
        Loader decoded(data, o);
        o.raw = true;
        Loader raw(data, o);
        const data::SampleDecoder decoder(SampleType::u8, data->sample_shape(), o.normalize, o.augment.crop_padding);
        const std::int64_t numel = data->sample_numel();
        std::int64_t batches = 0, flips = 0, offsets = 0;
        for (std::int64_t e = start_epoch; e < 3; ++e)
          for (std::int64_t s = e == start_epoch ? start_step : 0; s < decoded.steps_per_epoch(); ++s) {
            const Batch& want = decoded.next();
            const Batch& got = raw.next();
            ASSERT_EQ(got.epoch, e);
            ASSERT_EQ(got.step, s);
            ASSERT_EQ(got.indices, want.indices);
            ASSERT_EQ(got.labels, want.labels);
            EXPECT_EQ(got.x.raw(), nullptr);
            ASSERT_EQ(got.raw.dtype(), DType::u8);
            ASSERT_TRUE(got.raw.shape() == want.x.shape()) << got.raw.shape().str();
            ASSERT_EQ(got.draws.size(), got.indices.size());
            std::vector<float> x(static_cast<std::size_t>(want.x.numel()));
            for (std::size_t k = 0; k < got.draws.size(); ++k) {
              const AugmentDraw& d = got.draws[k];
              const AugmentDraw expected = draw_augment(o.augment, o.seed, e, got.indices[k]);
              EXPECT_TRUE(d.dy == expected.dy && d.dx == expected.dx && d.flip == expected.flip) << got.indices[k];
              flips += d.flip ? 1 : 0;
              offsets += d.dy != 2 || d.dx != 2 ? 1 : 0;
              const auto at = static_cast<std::int64_t>(k) * numel;
              decoder.decode(got.raw.data<std::byte>() + at, d, x.data() + at);
            }
            ASSERT_EQ(std::memcmp(x.data(), want.x.f32(), want.x.nbytes()), 0) << "epoch " << e << " step " << s;
            ++batches;
          }
        EXPECT_EQ(batches, 45 - start_epoch * 15 - start_step);
        EXPECT_GT(flips, 0);
        EXPECT_GT(offsets, 0);
      }
}

TEST_F(LoaderTest, RawBatchesNeedUint8Samples) {
  {
    test::H5FileWriter wr(path("f.h5"));
    wr.samples<float>(0, {20, 1, 2, 2}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 5);
  }
  for (const ReadStrategy st : kStrategies) {
    LoaderOptions o = options(4, 1);
    o.raw = true;
    try {
      Loader loader(open({path("f.h5")}, st), o);
      ADD_FAILURE() << "no error";
    } catch (const DataError& e) {
      EXPECT_STREQ(e.what(), "loader: raw batches (augmentation on the GPU) need uint8 samples, these are float32");
    }
  }
}

TEST_F(LoaderTest, FewerSamplesThanAGlobalBatch) {
  test::write_u8_file(path("d.h5"), 0, 10, 1, 2, 2, 4);
  for (const ReadStrategy st : kStrategies) {
    LoaderOptions o = options(4, 1);
    o.world_size = 3;
    try {
      Loader loader(open({path("d.h5")}, st), o);
      ADD_FAILURE() << "no error";
    } catch (const DataError& e) {
      EXPECT_STREQ(e.what(), "sampler: 10 samples is fewer than one global batch of 12 (= world 3 x batch 4)");
    }
  }
}

// The names the CLI offers (bench io --strategy) are exactly those that parse, and each strategy
// prints as the name it was parsed from.
TEST(ReadStrategyNames, EveryListedNameParsesAndPrintsBack) {
  const std::vector<std::string> names = read_strategy_names();
  EXPECT_EQ(names, (std::vector<std::string>{"memory", "stream"}));
  for (const std::string& name : names) {
    const std::optional<ReadStrategy> strategy = read_strategy_from_name(name);
    ASSERT_TRUE(strategy.has_value()) << name;
    EXPECT_EQ(read_strategy_name(*strategy), name);
  }
  EXPECT_FALSE(read_strategy_from_name("Memory").has_value());
  EXPECT_FALSE(read_strategy_from_name("").has_value());
}

}  // namespace
}  // namespace ringtrain
