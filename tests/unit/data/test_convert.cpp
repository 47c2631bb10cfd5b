// convert_idx_to_hdf5: a synthetic IDX pair converted and read back with the HDF5 C API
// (values, shapes, chunking, attributes), input errors, and the real Fashion-MNIST t10k pair
// when the machine has it.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "check/h5_check.hpp"
#include "hdf5/h5_handle.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/convert.hpp"
#include "ringtrain/data/dataset.hpp"
#include "support/test_context.hpp"
#include "unit/data/data_test_util.hpp"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using test::pattern_bytes;
using test::write_idx;

struct ReadBack {
  std::vector<hsize_t> dims;
  std::vector<hsize_t> chunk;
  std::vector<std::uint8_t> data;
  bool is_uint8 = false;
};

ReadBack read_dataset(hid_t file, const char* name) {
  ReadBack r;
  h5::Dataset d(RT_H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT)));
  h5::Dataspace space(RT_H5_CHECK(H5Dget_space(d)));
  r.dims.resize(static_cast<std::size_t>(RT_H5_CHECK(H5Sget_simple_extent_ndims(space))));
  RT_H5_CHECK(H5Sget_simple_extent_dims(space, r.dims.data(), nullptr));
  h5::Datatype type(RT_H5_CHECK(H5Dget_type(d)));
  r.is_uint8 = H5Tequal(type, H5T_STD_U8LE) > 0;
  h5::PropList dcpl(RT_H5_CHECK(H5Dget_create_plist(d)));
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    r.chunk.resize(r.dims.size());
    RT_H5_CHECK(H5Pget_chunk(dcpl, static_cast<int>(r.chunk.size()), r.chunk.data()));
  }
  hsize_t n = 1;
  for (const auto v : r.dims) n *= v;
  r.data.resize(n);
  RT_H5_CHECK(H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, r.data.data()));
  return r;
}

int read_int_attr(hid_t file, const char* name) {
  h5::Attribute a(RT_H5_CHECK(H5Aopen(file, name, H5P_DEFAULT)));
  int v = 0;
  RT_H5_CHECK(H5Aread(a, H5T_NATIVE_INT, &v));
  return v;
}

// Reads a scalar or 1-D string attribute, fixed or variable length.
std::vector<std::string> read_string_attr(hid_t file, const char* name) {
  h5::Attribute a(RT_H5_CHECK(H5Aopen(file, name, H5P_DEFAULT)));
  h5::Datatype type(RT_H5_CHECK(H5Aget_type(a)));
  EXPECT_EQ(H5Tget_class(type), H5T_STRING) << name;
  h5::Dataspace space(RT_H5_CHECK(H5Aget_space(a)));
  const auto n = static_cast<std::size_t>(RT_H5_CHECK(H5Sget_simple_extent_npoints(space)));
  std::vector<std::string> out;
  if (H5Tis_variable_str(type) > 0) {
    h5::Datatype mem(RT_H5_CHECK(H5Tcopy(H5T_C_S1)));
    RT_H5_CHECK(H5Tset_size(mem, H5T_VARIABLE));
    RT_H5_CHECK(H5Tset_cset(mem, H5Tget_cset(type)));
    std::vector<char*> ptrs(n);
    RT_H5_CHECK(H5Aread(a, mem, ptrs.data()));
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    RT_H5_CHECK(H5Dvlen_reclaim(mem, space, H5P_DEFAULT, ptrs.data()));
  } else {
    const std::size_t size = H5Tget_size(type);
    std::vector<char> buf(n * size);
    RT_H5_CHECK(H5Aread(a, type, buf.data()));
    for (std::size_t i = 0; i < n; ++i) out.emplace_back(buf.data() + i * size, strnlen(buf.data() + i * size, size));
  }
  return out;
}

std::string convert_error(const ConvertOptions& o) {
  try {
    convert_idx_to_hdf5(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Convert, SyntheticPairReadsBackWithCApi) {
  const auto dir = test::temp_dir("convert-synthetic");
  const auto images = pattern_bytes(5 * 3 * 4, 3);
  const std::vector<std::uint8_t> labels = {0, 1, 2, 1, 0};
  write_idx(dir / "img.gz", {5, 3, 4}, images, true);
  write_idx(dir / "lab", {5}, labels, false);

  ConvertOptions o;
  o.images_path = (dir / "img.gz").string();
  o.labels_path = (dir / "lab").string();
  o.output_path = (dir / "new" / "deeper" / "out.h5").string();  // directories made as needed
  o.class_names = {"zero", "one", "two"};
  o.chunk_samples = 2;
  const ConvertResult res = convert_idx_to_hdf5(o);
  EXPECT_EQ(res.samples, 5);
  EXPECT_EQ(res.sample_shape, (std::vector<std::int64_t>{1, 3, 4}));
  EXPECT_FALSE(fs::exists(o.output_path + ".tmp")) << "temporary file left behind";

  h5::ErrorContext where(o.output_path);
  h5::File file(RT_H5_CHECK(H5Fopen(o.output_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
  const ReadBack im = read_dataset(file, "images");
  EXPECT_EQ(im.dims, (std::vector<hsize_t>{5, 1, 3, 4}));
  EXPECT_EQ(im.chunk, (std::vector<hsize_t>{2, 1, 3, 4}));
  EXPECT_TRUE(im.is_uint8);
  EXPECT_EQ(im.data, images);
  const ReadBack lb = read_dataset(file, "labels");
  EXPECT_EQ(lb.dims, (std::vector<hsize_t>{5}));
  EXPECT_EQ(lb.chunk, (std::vector<hsize_t>{2}));
  EXPECT_TRUE(lb.is_uint8);
  EXPECT_EQ(lb.data, labels);

  EXPECT_EQ(read_string_attr(file, "format"), (std::vector<std::string>{"ringtrain-dataset"}));
  EXPECT_EQ(read_int_attr(file, "format_version"), 1);
  EXPECT_EQ(read_string_attr(file, "writer").at(0).rfind("ringtrain ", 0), 0u);
  EXPECT_EQ(read_string_attr(file, "source"), (std::vector<std::string>{o.images_path, o.labels_path}));
  EXPECT_EQ(read_string_attr(file, "classes"), o.class_names);
  EXPECT_EQ(read_int_attr(file, "num_classes"), 3);
}

TEST(Convert, FourDimImagesKeptAndOutputReplaced) {
  const auto dir = test::temp_dir("convert-4d");
  const auto images = pattern_bytes(4 * 3 * 2 * 2, 5);
  write_idx(dir / "img", {4, 3, 2, 2}, images, false);
  write_idx(dir / "lab", {4}, {3, 0, 6, 1}, false);
  ConvertOptions o;
  o.images_path = (dir / "img").string();
  o.labels_path = (dir / "lab").string();
  o.output_path = (dir / "out.h5").string();
  test::write_bytes(o.output_path, {'o', 'l', 'd'}, false);  // an older file is replaced
  const ConvertResult res = convert_idx_to_hdf5(o);
  EXPECT_EQ(res.sample_shape, (std::vector<std::int64_t>{3, 2, 2}));

  h5::ErrorContext where(o.output_path);
  h5::File file(RT_H5_CHECK(H5Fopen(o.output_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
  const ReadBack im = read_dataset(file, "images");
  EXPECT_EQ(im.dims, (std::vector<hsize_t>{4, 3, 2, 2}));
  EXPECT_EQ(im.chunk, (std::vector<hsize_t>{4, 3, 2, 2}));  // chunk clamped to N
  EXPECT_EQ(im.data, images);
  EXPECT_EQ(read_int_attr(file, "num_classes"), 7);  // max label + 1 without class names
  EXPECT_EQ(H5Aexists(file, "classes"), 0);
}

TEST(Convert, InputErrorsLeaveNoOutput) {
  const auto dir = test::temp_dir("convert-errors");
  write_idx(dir / "img", {3, 2, 2}, pattern_bytes(12), false);
  write_idx(dir / "lab4", {4}, {0, 1, 0, 1}, false);
  write_idx(dir / "lab3", {3}, {0, 1, 5}, false);
  ConvertOptions o;
  o.images_path = (dir / "img").string();
  o.labels_path = (dir / "lab4").string();
  o.output_path = (dir / "out.h5").string();

  std::string msg = convert_error(o);
  EXPECT_NE(msg.find("has 4 labels but " + o.images_path + " has 3 images"), std::string::npos) << msg;

  o.labels_path = (dir / "lab3").string();
  o.class_names = {"a", "b"};
  msg = convert_error(o);
  EXPECT_NE(msg.find("label 5 at index 2 has no class name (2 classes given)"), std::string::npos) << msg;

  o.class_names.clear();
  o.images_path = (dir / "missing").string();
  EXPECT_EQ(convert_error(o), o.images_path + ": no such file");

  o.images_path = (dir / "img").string();
  o.output_path = (dir / "img" / "sub" / "out.h5").string();  // under a file: no directory can be made
  msg = convert_error(o);
  EXPECT_NE(msg.find(o.output_path + ": cannot create directory " + (dir / "img" / "sub").string()), std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(dir / "out.h5"));
  EXPECT_FALSE(fs::exists(dir / "out.h5.tmp"));
}

TEST(Convert, FashionMnistT10k) {
  const fs::path src = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(src / "t10k-images-idx3-ubyte.gz") || !fs::exists(src / "t10k-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not found under " << src;
  const auto dir = test::temp_dir("convert-fmnist");
  ConvertOptions o;
  o.images_path = (src / "t10k-images-idx3-ubyte.gz").string();
  o.labels_path = (src / "t10k-labels-idx1-ubyte.gz").string();
  o.output_path = (dir / "test.h5").string();
  o.class_names = fashion_mnist_classes();
  const ConvertResult res = convert_idx_to_hdf5(o);
  EXPECT_EQ(res.samples, 10000);
  EXPECT_EQ(res.sample_shape, (std::vector<std::int64_t>{1, 28, 28}));

  // Through the loader as well (a world of one here).
  DatasetSpec spec;
  spec.sources = {o.output_path};
  const auto ds = Dataset::open(test::context(), spec);
  ASSERT_EQ(ds->size(), 10000);
  EXPECT_EQ(ds->sample_shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(ds->files().front().chunk_rows, 1024);
  std::map<int, int> per_class;
  for (std::int64_t i = 0; i < ds->size(); ++i) ++per_class[ds->label(i)];
  ASSERT_EQ(per_class.size(), 10u);
  for (const auto& [label, count] : per_class) {
    EXPECT_TRUE(label >= 0 && label <= 9) << label;
    EXPECT_EQ(count, 1000) << "class " << label;
  }
  h5::ErrorContext where(o.output_path);
  h5::File file(RT_H5_CHECK(H5Fopen(o.output_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
  EXPECT_EQ(read_string_attr(file, "classes").at(9), "Ankle boot");
}

}  // namespace
}  // namespace ringtrain
