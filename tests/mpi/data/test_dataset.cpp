// Dataset::open and the loader under mpirun: every rank sees the files' content (also across
// simulated nodes, whose shared copies are completed by the node leaders), the ranks' training
// batches never share a sample and run the same number of steps, and each malformed input
// gives every rank the same one-line DataError (no rank left hanging). Rank 0 writes inputs.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>

#include "data/dataset_open.hpp"
#include "data/epoch_plan.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/loader.hpp"
#include "support/root_checks.hpp"
#include "support/test_context.hpp"
#include "unit/data/h5_files.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using test::on_root;
using test::same_on_all_ranks;

int rank() { return test::context().world_rank(); }
int world() { return test::context().world_size(); }

DatasetSpec spec_of(const std::vector<std::string>& sources, ReadStrategy strategy = ReadStrategy::memory) {
  DatasetSpec spec;
  spec.sources = sources;
  spec.strategy = strategy;
  return spec;
}

std::string open_error(const DatasetSpec& spec) {
  try {
    Dataset::open(test::context(), spec);
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

// Checks the error text on every rank, for both strategies, and that all ranks agree on it.
void expect_open_error(const std::vector<std::string>& sources, const std::vector<std::string>& parts) {
  for (const ReadStrategy st : {ReadStrategy::memory, ReadStrategy::stream}) {
    const std::string msg = open_error(spec_of(sources, st));
    EXPECT_TRUE(same_on_all_ranks(msg)) << "rank " << rank() << ": " << msg;
    for (const auto& part : parts)
      EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// Every sample and label of the dataset against what the files were written with.
void expect_content(const Dataset& ds, std::int64_t n, std::int64_t numel) {
  ASSERT_EQ(ds.size(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(ds.label(i), test::label_of(i)) << "rank " << rank() << ", sample " << i;
    const auto want = test::sample_values<std::uint8_t>(i, 1, numel);
    ASSERT_EQ(std::memcmp(ds.resident_sample(i), want.data(), want.size()), 0) << "rank " << rank() << ", sample " << i;
  }
}

class DatasetOpen : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(DatasetOpen, EveryRankSeesTheFilesContent) {
  ASSERT_TRUE(on_root([&] {
    test::write_u8_file(path("a.h5"), 0, 23, 2, 3, 5, 4);
    test::write_u8_file(path("b.h5"), 23, 14, 2, 3, 5);
  }));
  // Small read blocks force several collective reads per file, with ranks making different
  // numbers of real reads: 210 bytes = 7 samples of 30 bytes, 1 byte = one sample per read.
  for (const std::int64_t block : {std::int64_t{64} << 20, std::int64_t{210}, std::int64_t{1}}) {
    DatasetSpec spec = spec_of({path("a.h5"), path("b.h5")});
    spec.read_block_bytes = block;
    const auto ds = Dataset::open(test::context(), spec);
    EXPECT_EQ(ds->sample_shape(), (Shape{2, 3, 5}));
    EXPECT_EQ(ds->files()[0].chunk_rows, 4);
    EXPECT_EQ(ds->files()[1].chunk_rows, 0);
    expect_content(*ds, 37, 30);
  }
  const auto streamed = Dataset::open(test::context(), spec_of({path("*.h5")}, ReadStrategy::stream));
  ASSERT_EQ(streamed->size(), 37);
  for (std::int64_t i = 0; i < 37; ++i) ASSERT_EQ(streamed->label(i), test::label_of(i));
}

TEST_F(DatasetOpen, NodeLeadersCompleteEachNodesCopy) {
  // Ranks split into two "nodes" by parity: the node-major order interleaves world ranks, and
  // each node's leader receives the other node's part.
  if (world() < 2) GTEST_SKIP();
  ASSERT_TRUE(on_root([&] { test::write_u8_file(path("d.h5"), 0, 41, 1, 4, 4, 8); }));
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank() % 2, rank(), &node);
  {
    const auto ds = data::open_dataset(MPI_COMM_WORLD, node, spec_of({path("d.h5")}));
    expect_content(*ds, 41, 16);
  }
  MPI_Comm_free(&node);
}

TEST_F(DatasetOpen, WiderLabelTypesAccepted) {
  ASSERT_TRUE(on_root([&] {
    test::H5FileWriter wr(path("int64.h5"));
    wr.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {3, 2, 2, 2}, std::vector<std::uint8_t>(24, 1));
    wr.add<std::int64_t>("labels", H5T_STD_I64BE, H5T_NATIVE_INT64, {3}, {2, 0, 1});
  }));
  const auto ds = Dataset::open(test::context(), spec_of({path("int64.h5")}));
  EXPECT_EQ(ds->label(0), 2);
  EXPECT_EQ(ds->label(1), 0);
  EXPECT_EQ(ds->label(2), 1);
}

TEST_F(DatasetOpen, TrainingBatchesOfAllRanksNeverShareASample) {
  ASSERT_TRUE(on_root([&] { test::write_u8_file(path("d.h5"), 0, 211, 1, 3, 3, 16); }));
  for (const ReadStrategy st : {ReadStrategy::memory, ReadStrategy::stream}) {
    const auto ds = Dataset::open(test::context(), spec_of({path("d.h5")}, st));
    LoaderOptions o;
    o.batch_size = 6;
    o.world_size = world();
    o.rank = rank();
    o.seed = 5;
    o.epochs = 2;
    o.augment = AugmentOptions{1, true};
    o.shuffle_window = 40;
    Loader loader(ds, o);
    std::int64_t steps = loader.steps_per_epoch();
    std::int64_t most = 0;
    MPI_Allreduce(&steps, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(steps, most) << "ranks run different numbers of steps";
    for (std::int64_t e = 0; e < 2; ++e) {
      std::vector<std::int64_t> mine;
      for (std::int64_t s = 0; s < steps; ++s) {
        const Batch& b = loader.next();
        mine.insert(mine.end(), b.indices.begin(), b.indices.end());
      }
      std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(world()));
      MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(), static_cast<int>(mine.size()),
                    MPI_INT64_T, MPI_COMM_WORLD);
      EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), all.size())
          << read_strategy_name(st) << ": a sample came twice in epoch " << e;
      if (st == ReadStrategy::memory) {  // the world-of-one global batches, whatever the world size
        data::PlanOptions p;
        p.batch = 6 * world();
        p.seed = 5;
        const auto whole = data::EpochPlanner(ds, p).plan(e);
        const std::vector<std::int64_t> expected(whole->order.begin(),
                                                 whole->order.begin() + static_cast<std::ptrdiff_t>(all.size()));
        // all is rank-major (rank 0's epoch, then rank 1's ...); regroup it step-major.
        std::vector<std::int64_t> step_major;
        for (std::int64_t s = 0; s < steps; ++s)
          for (int r = 0; r < world(); ++r)
            for (std::int64_t k = 0; k < 6; ++k)
              step_major.push_back(all[static_cast<std::size_t>((r * steps + s) * 6 + k)]);
        EXPECT_EQ(step_major, expected);
      }
    }
  }
}

TEST_F(DatasetOpen, MissingFileAndGlobs) {
  expect_open_error({path("absent.h5")}, {path("absent.h5") + ": no such file"});
  expect_open_error({path("none-*.h5")}, {path("none-*.h5") + ": no files match"});
  ASSERT_TRUE(on_root([&] { test::write_u8_file(path("d.h5"), 0, 4, 1, 2, 2); }));
  expect_open_error({path("d.h5"), path("d*.h5")}, {path("d.h5") + ": listed more than once"});
  fs::create_directories(dir_ / "dir.h5");
  expect_open_error({path("dir.h5")}, {path("dir.h5") + ": is a directory, not an HDF5 file"});
}

TEST_F(DatasetOpen, MissingOnOneRankOnlyFailsEveryRank) {
  // Ranks disagree about the file (as on nodes without a shared file system): all must
  // throw the same error rather than some entering the collective open.
  ASSERT_TRUE(on_root([&] { test::write_u8_file(path("good.h5"), 0, 8, 1, 2, 2); }));
  const std::string absent = path("only-on-some-ranks.h5");
  const std::string mine = rank() == world() - 1 ? absent : path("good.h5");
  EXPECT_EQ(open_error(spec_of({mine})), absent + ": no such file") << "rank " << rank();
}

TEST_F(DatasetOpen, NotHdf5TruncatedOrDamaged) {
  ASSERT_TRUE(on_root([&] {
    std::ofstream(path("notes.h5")) << "images,labels\n1,2\n";
    test::write_u8_file(path("truncated.h5"), 0, 300, 1, 8, 8);
    test::truncate_file(path("truncated.h5"), fs::file_size(path("truncated.h5")) / 2);
    test::write_u8_file(path("damaged.h5"), 0, 30, 1, 8, 8);
    test::overwrite_bytes(path("damaged.h5"), 96, 1000, '\x7f');  // the root group's metadata
  }));
  expect_open_error({path("notes.h5")}, {path("notes.h5") + ": not an HDF5 file"});
  expect_open_error({path("truncated.h5")}, {path("truncated.h5") + ": HDF5 cannot open it: truncated file"});
  expect_open_error({path("damaged.h5")}, {path("damaged.h5") + ": HDF5 cannot open it: "});
}

TEST_F(DatasetOpen, SchemasMustAgreeAcrossFiles) {
  ASSERT_TRUE(on_root([&] {
    test::write_u8_file(path("a.h5"), 0, 5, 1, 2, 2);
    test::write_u8_file(path("b-shape.h5"), 5, 5, 1, 2, 3);
    test::H5FileWriter f(path("b-dtype.h5"));
    f.samples<float>(5, {5, 1, 2, 2}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT);
    test::H5FileWriter l(path("b-labels.h5"));
    l.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {2, 1, 2, 2}, std::vector<std::uint8_t>(8, 0));
    l.add<std::int32_t>("labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {2}, {1, 2});
  }));
  expect_open_error({path("a.h5"), path("b-shape.h5")},
                    {path("b-shape.h5") + ": dataset 'images' holds uint8 samples of [1, 2, 3] but " + path("a.h5") +
                     " holds uint8 samples of [1, 2, 2]"});
  expect_open_error({path("a.h5"), path("b-dtype.h5")},
                    {path("b-dtype.h5") + ": dataset 'images' holds float32 samples"});
  expect_open_error({path("a.h5"), path("b-labels.h5")},
                    {path("b-labels.h5") + ": dataset 'labels' is int32 but " + path("a.h5") + " has uint8"});
}

TEST_F(DatasetOpen, MalformedDatasets) {
  ASSERT_TRUE(on_root([&] {
    test::H5FileWriter a(path("no-labels.h5"));
    a.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {4, 1, 2, 2}, std::vector<std::uint8_t>(16, 0));
    test::H5FileWriter b(path("rank3.h5"));
    b.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {4, 2, 2}, std::vector<std::uint8_t>(16, 0));
    b.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {4}, {0, 1, 2, 3});
    test::H5FileWriter c(path("mismatch.h5"));
    c.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {4, 1, 2, 2}, std::vector<std::uint8_t>(16, 0));
    c.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {3}, {0, 1, 2});
    test::H5FileWriter d(path("empty.h5"));
    d.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {0, 1, 2, 2}, {});
    d.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {0}, {});
    test::H5FileWriter e(path("bitfield.h5"));
    e.add<std::uint8_t>("images", H5T_STD_B8LE, H5T_NATIVE_B8, {2, 1, 1, 2}, {1, 2, 3, 4});
    e.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {2}, {0, 1});
    test::H5FileWriter f(path("float-labels.h5"));
    f.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {2, 1, 1, 2}, {1, 2, 3, 4});
    f.add<float>("labels", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2}, {0.f, 1.f});
    // Shapes whose sizes overflow or exceed the per-sample bound (declared, never written).
    test::H5FileWriter g(path("huge-sample.h5"));
    g.declare("images", H5T_IEEE_F32LE, {2, 3, 1 << 15, 1 << 15});
    g.declare("labels", H5T_STD_U8LE, {2});
    test::H5FileWriter h(path("overflow.h5"));
    h.declare("images", H5T_IEEE_F64LE, {2, hsize_t{1} << 30, hsize_t{1} << 30, hsize_t{1} << 30});
    h.declare("labels", H5T_STD_U8LE, {2});
    test::H5FileWriter k(path("too-many.h5"));
    k.declare("images", H5T_IEEE_F32LE, {hsize_t{1} << 62, 1, 1, 2});
    k.declare("labels", H5T_STD_U8LE, {hsize_t{1} << 62});
    for (const char* name : {"half-a.h5", "half-b.h5"}) {  // 2^62 samples each: 2^63 together
      test::H5FileWriter half(path(name));
      half.declare("images", H5T_STD_U8LE, {hsize_t{1} << 62, 1, 1, 1});
      half.declare("labels", H5T_STD_U8LE, {hsize_t{1} << 62});
    }
    test::H5FileWriter z(path("zero-dim.h5"));
    z.declare("images", H5T_STD_U8LE, {2, 1, 0, 2});
    z.declare("labels", H5T_STD_U8LE, {2});
    // Storage that would read as fill values: images never written (a writer that stopped), and
    // a filter this HDF5 cannot decode (h5py's LZF is 32000).
    test::H5FileWriter u(path("unwritten.h5"));
    u.declare("images", H5T_STD_U8LE, {4, 1, 2, 2});
    u.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {4}, {0, 1, 2, 3});
    test::H5FileWriter v(path("virtual.h5"));  // a virtual dataset whose source file is gone
    v.add_virtual("images", H5T_STD_U8LE, {4, 1, 2, 2}, "gone.h5", "images");
    v.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {4}, {0, 1, 2, 3});
    test::H5FileWriter l(path("lzf.h5"));
    l.add<std::uint8_t>("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {4, 1, 2, 2}, std::vector<std::uint8_t>(16, 0));
    l.declare("labels", H5T_STD_U8LE, {4}, 32000);
  }));
  expect_open_error({path("unwritten.h5")},
                    {path("unwritten.h5") + ": dataset 'images' is not all written: some of its chunks were never "
                                            "stored and would read as fill values"});
  expect_open_error({path("virtual.h5")}, {path("virtual.h5") + ": dataset 'images' is virtual and its source file "
                                                                "'gone.h5' is missing"});
  expect_open_error({path("lzf.h5")},
                    {path("lzf.h5") + ": dataset 'labels' is compressed with HDF5 filter 32000", "HDF5_PLUGIN_PATH"});
  expect_open_error({path("huge-sample.h5")},
                    {path("huge-sample.h5") + ": dataset 'images' has samples of [3, 32768, 32768] float32, more "
                                              "than 1.0 GiB each"});
  expect_open_error({path("overflow.h5")},
                    {path("overflow.h5") + ": dataset 'images' has samples of [1073741824, 1073741824, 1073741824] "
                                           "float64, more than 1.0 GiB each"});
  expect_open_error({path("too-many.h5")},
                    {path("too-many.h5") + ": dataset 'images' holds 4611686018427387904 samples of 8 bytes, more "
                                           "than a 64-bit offset reaches"});
  expect_open_error({path("half-a.h5"), path("half-b.h5")},
                    {path("half-b.h5") + ": dataset 'images': 4611686018427387904 samples more than the files before "
                                         "it make over 9223372036854775807 in all"});
  expect_open_error({path("zero-dim.h5")},
                    {path("zero-dim.h5") + ": dataset 'images' has an empty sample shape [1, 0, 2]"});
  expect_open_error({path("no-labels.h5")}, {path("no-labels.h5") + ": dataset 'labels' missing (found: images)"});
  expect_open_error({path("rank3.h5")}, {path("rank3.h5") + ": dataset 'images' has rank 3 [4, 2, 2], expected 4"});
  expect_open_error({path("mismatch.h5")},
                    {path("mismatch.h5") + ": dataset 'images' has 4 samples but 'labels' has 3"});
  expect_open_error({path("empty.h5")}, {path("empty.h5") + ": dataset 'images' is empty (0 samples)"});
  expect_open_error({path("bitfield.h5")}, {path("bitfield.h5") + ": dataset 'images' has unsupported dtype bitfield"});
  expect_open_error(
      {path("float-labels.h5")},
      {path("float-labels.h5") + ": dataset 'labels' has unsupported dtype float32 (supported: integer types)"});
  DatasetSpec spec = spec_of({path("no-labels.h5")});
  spec.labels_key = "meta/labels";  // a missing group on the way is "missing" too
  const std::string msg = open_error(spec);
  EXPECT_NE(msg.find("dataset 'meta/labels' missing (found: images)"), std::string::npos) << msg;
}

TEST_F(DatasetOpen, NonFiniteFoundByAnyRankStopsEveryRank) {
  // NaN near the end: found by the last rank's shard scan; every rank reports it.
  ASSERT_TRUE(on_root([&] {
    std::vector<float> v = test::sample_values<float>(0, 40, 2);
    v[38 * 2 + 1] = std::numeric_limits<float>::infinity();
    test::H5FileWriter wr(path("inf.h5"));
    wr.add("images", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {40, 1, 1, 2}, v, 8);
    wr.add<std::uint8_t>("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {40}, std::vector<std::uint8_t>(40, 1));
  }));
  expect_open_error({path("inf.h5")}, {path("inf.h5") + ": dataset 'images': sample 38 holds Inf"});
  DatasetSpec spec = spec_of({path("inf.h5")}, ReadStrategy::stream);
  spec.nonfinite = NonFinite::skip;
  EXPECT_EQ(Dataset::open(test::context(), spec)->excluded(), (std::vector<std::int64_t>{38}));
}

}  // namespace
}  // namespace ringtrain
