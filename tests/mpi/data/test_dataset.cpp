// InMemoryDataset::load under mpirun: every rank gets the same content as the source, and
// each malformed file gives every rank the same one-line DataError (no rank left hanging).
// Rank 0 writes the inputs (serial HDF5 driver or the converter), then all ranks proceed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fstream>
#include <functional>

#include "hdf5/h5_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/convert.hpp"
#include "ringtrain/data/dataset.hpp"
#include "support/test_context.hpp"
#include "unit/data/data_test_util.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using test::pattern_bytes;

int rank() { return test::context().world_rank(); }

// Runs fn on rank 0 only, then tells every rank whether it worked, so that a failure there
// fails the test everywhere instead of leaving the other ranks waiting.
::testing::AssertionResult on_root(const std::function<void()>& fn) {
  std::string error;
  if (rank() == 0) {
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (error.empty() && ::testing::Test::HasFatalFailure()) error = "fatal failure on rank 0";
  }
  int length = static_cast<int>(error.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  error.resize(static_cast<std::size_t>(length));
  MPI_Bcast(error.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (error.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rank 0: " << error;
}

// True on every rank when every rank passed the same text.
bool same_on_all_ranks(const std::string& text) {
  std::string root = text;
  int length = static_cast<int>(root.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  root.resize(static_cast<std::size_t>(length));
  MPI_Bcast(root.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  int mine = root == text ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

std::string load_error(const std::string& path, int num_classes = 10) {
  try {
    InMemoryDataset::load(test::context(), DatasetSpec{path}, num_classes);
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

// Checks the error text on every rank and that all ranks agree on it.
void expect_load_error(const std::string& path, const std::vector<std::string>& parts, int num_classes = 10) {
  const std::string msg = load_error(path, num_classes);
  EXPECT_TRUE(same_on_all_ranks(msg)) << "rank " << rank() << ": " << msg;
  for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
}

// Serial HDF5 writer for hand-made (often malformed) files.
class H5Writer {
 public:
  explicit H5Writer(const std::string& path)
      : where_(path), file_(RT_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT))) {}

  template <typename T>
  void add(const char* name, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims,
           const std::vector<T>& data) {
    h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
    h5::Dataset d(RT_H5_CHECK(H5Dcreate2(file_, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    if (!data.empty()) RT_H5_CHECK(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
  }
  void images(const std::vector<hsize_t>& dims) {
    hsize_t n = 1;
    for (const auto d : dims) n *= d;
    add("images", H5T_STD_U8LE, H5T_NATIVE_UINT8, dims, pattern_bytes(n));
  }
  void labels(const std::vector<std::uint8_t>& values) {
    add("labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {values.size()}, values);
  }
  hid_t file() const { return file_; }

 private:
  h5::ErrorContext where_;
  h5::File file_;
};

class DatasetLoad : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(DatasetLoad, LoadsConvertedFileIdenticallyOnEveryRank) {
  const std::int64_t n = 37, h = 5, w = 6;
  const auto images = pattern_bytes(static_cast<std::size_t>(n * h * w), 17);
  std::vector<std::uint8_t> labels(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>((i * 7) % 10);
  const std::string out = path("data.h5");
  ASSERT_TRUE(on_root([&] {
    test::write_idx(dir_ / "img.gz", {n, h, w}, images, true);
    test::write_idx(dir_ / "lab.gz", {n}, labels, true);
    ConvertOptions o;
    o.images_path = (dir_ / "img.gz").string();
    o.labels_path = (dir_ / "lab.gz").string();
    o.output_path = out;
    o.class_names = fashion_mnist_classes();
    o.chunk_samples = 8;
    convert_idx_to_hdf5(o);
  }));

  // Small read blocks force several collective reads per dataset: 210 bytes = 7 image rows
  // of 30 bytes (5 full reads and a partial one), 1 byte = one row per read.
  for (const std::int64_t block : {std::int64_t{64} << 20, std::int64_t{210}, std::int64_t{1}}) {
    DatasetSpec spec{out};
    spec.read_block_bytes = block;
    const InMemoryDataset ds = InMemoryDataset::load(test::context(), spec, 10);
    ASSERT_EQ(ds.size(), n) << "block " << block;
    EXPECT_EQ(ds.sample_shape(), (Shape{1, h, w}));
    EXPECT_EQ(ds.path(), out);
    const std::vector<std::uint8_t> got(ds.image(0), ds.image(0) + n * h * w);
    EXPECT_EQ(got, images) << "rank " << rank() << ", block " << block;
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_EQ(ds.label(i), labels[static_cast<std::size_t>(i)]) << "rank " << rank() << ", index " << i;
    std::string content(reinterpret_cast<const char*>(got.data()), got.size());
    for (std::int64_t i = 0; i < n; ++i) content += std::to_string(ds.label(i)) + ",";
    EXPECT_TRUE(same_on_all_ranks(content)) << "ranks loaded different content";
  }
}

TEST_F(DatasetLoad, WiderLabelTypesAccepted) {
  // Labels of any integer type are read into int32 (here: int64 on disk).
  const std::string file = path("int64.h5");
  ASSERT_TRUE(on_root([&] {
    H5Writer wr(file);
    wr.images({3, 2, 2, 2});
    wr.add<std::int64_t>("labels", H5T_STD_I64BE, H5T_NATIVE_INT64, {3}, {2, 0, 1});
  }));
  const InMemoryDataset ds = InMemoryDataset::load(test::context(), DatasetSpec{file}, 3);
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.sample_shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(ds.label(0), 2);
  EXPECT_EQ(ds.label(1), 0);
  EXPECT_EQ(ds.label(2), 1);
}

TEST_F(DatasetLoad, MissingFile) {
  const std::string file = path("absent.h5");
  expect_load_error(file, {file + ": no such file"});
}

TEST_F(DatasetLoad, MissingOnOneRankOnlyFailsEveryRank) {
  // Ranks disagree about the file (as on nodes without a shared file system): all must
  // throw the same error rather than some entering the collective open.
  const std::string good = path("good.h5");
  ASSERT_TRUE(on_root([&] {
    H5Writer wr(good);
    wr.images({2, 1, 2, 2});
    wr.labels({0, 1});
  }));
  const int last = test::context().world_size() - 1;
  const std::string absent = path("only-on-some-ranks.h5");
  const std::string mine = rank() == last ? absent : good;
  std::string msg = "(no error)";
  try {
    InMemoryDataset::load(test::context(), DatasetSpec{mine}, 10);
  } catch (const DataError& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg, absent + ": no such file") << "rank " << rank();
}

TEST_F(DatasetLoad, NotAnHdf5File) {
  const std::string file = path("notes.txt");
  ASSERT_TRUE(on_root([&] { std::ofstream(file) << "images,labels\n1,2\n"; }));
  expect_load_error(file, {file + ": not an HDF5 file"});
}

TEST_F(DatasetLoad, MissingLabelsListsWhatWasFound) {
  const std::string file = path("no-labels.h5");
  ASSERT_TRUE(on_root([&] {
    H5Writer wr(file);
    wr.images({4, 1, 2, 2});
  }));
  expect_load_error(file, {file + ": dataset 'labels' missing (found: images)"});

  DatasetSpec spec{file};
  spec.labels_key = "meta/labels";  // a missing group on the way is "missing" too
  std::string msg;
  try {
    InMemoryDataset::load(test::context(), spec, 10);
  } catch (const DataError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("dataset 'meta/labels' missing (found: images)"), std::string::npos) << msg;
}

TEST_F(DatasetLoad, ImagesOfWrongRankOrDtype) {
  const std::string rank3 = path("rank3.h5");
  const std::string floats = path("float.h5");
  ASSERT_TRUE(on_root([&] {
    H5Writer a(rank3);
    a.images({4, 2, 2});
    a.labels({0, 1, 2, 3});
    H5Writer b(floats);
    b.add<float>("images", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2, 1, 1, 2}, {0.f, 1.f, 2.f, 3.f});
    b.labels({0, 1});
  }));
  expect_load_error(rank3, {rank3 + ": dataset 'images' has rank 3 [4, 2, 2], expected 4 [N, C, H, W]"});
  expect_load_error(floats, {floats + ": dataset 'images' has unsupported dtype float32 (supported: uint8)"});
}

TEST_F(DatasetLoad, SampleCountMismatch) {
  const std::string file = path("mismatch.h5");
  ASSERT_TRUE(on_root([&] {
    H5Writer wr(file);
    wr.images({4, 1, 2, 2});
    wr.labels({0, 1, 2});
  }));
  expect_load_error(file, {file + ": dataset 'images' has 4 samples but 'labels' has 3"});
}

TEST_F(DatasetLoad, EmptyDataset) {
  const std::string file = path("empty.h5");
  ASSERT_TRUE(on_root([&] {
    H5Writer wr(file);
    wr.images({0, 1, 2, 2});
    wr.labels({});
  }));
  expect_load_error(file, {file + ": dataset 'images' is empty (0 samples)"});
}

TEST_F(DatasetLoad, LabelsOutOfRange) {
  const std::string high = path("high.h5");
  const std::string negative = path("negative.h5");
  ASSERT_TRUE(on_root([&] {
    H5Writer a(high);
    a.images({4, 1, 2, 2});
    a.labels({0, 1, 7, 9});
    H5Writer b(negative);
    b.images({3, 1, 1, 1});
    b.add<std::int16_t>("labels", H5T_STD_I16LE, H5T_NATIVE_INT16, {3}, {1, -2, 0});
  }));
  expect_load_error(high, {high + ": dataset 'labels': value 7 at index 2 is outside [0, 5)"}, 5);
  expect_load_error(negative, {"value -2 at index 1 is outside [0, 10)"});
  // The same file is fine with enough classes.
  EXPECT_EQ(load_error(high, 10), "(no error)");
}

}  // namespace
}  // namespace ringtrain
