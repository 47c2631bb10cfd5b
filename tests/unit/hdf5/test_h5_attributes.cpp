// read_attr and read_string_attr on attributes a crafted file can hold: arrays where one value
// is read (before, H5Aread wrote every element into one variable), integers wider than 64 bits
// or out of the target's range (before, silently saturated), null dataspaces and huge
// fixed-length strings. Each is a one-line DataError naming the attribute.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hdf5/h5_attributes.hpp"

namespace ringtrain::test {
namespace {

namespace fs = std::filesystem;

class HostileAttributes : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("ringtrain-h5-attr-" + std::to_string(::getpid()) + ".h5")).string();
    // Dense attribute storage (1.8 format and later) holds attributes over 64 KiB.
    h5::PropList fapl(RT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
    RT_H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
    file_ = h5::File(RT_H5_CHECK(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl)));
  }
  void TearDown() override {
    file_ = h5::File();
    fs::remove(path_);
  }

  // An attribute of file type `type` and shape `dims` (empty: scalar) holding `data`, which is
  // of type `mem` (the file type unless given).
  void add(const char* name, hid_t type, const std::vector<hsize_t>& dims, const void* data, hid_t mem = -1) {
    h5::Dataspace space(RT_H5_CHECK(
        dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
    h5::Attribute attr(RT_H5_CHECK(H5Acreate2(file_, name, type, space, H5P_DEFAULT, H5P_DEFAULT)));
    RT_H5_CHECK(H5Awrite(attr, mem < 0 ? type : mem, data));
  }

  template <typename F>
  static std::string error_of(F&& read) {
    try {
      read();
    } catch (const DataError& e) {
      return e.what();
    }
    return "(no error)";
  }

  std::string path_;
  h5::File file_;
};

TEST_F(HostileAttributes, ArraysAreRefusedBeforeTheyAreRead) {
  const std::vector<std::int64_t> steps(1000, 7);
  add("step", H5T_STD_I64LE, {1000}, steps.data());
  EXPECT_EQ(error_of([&] { h5::read_attr<std::int64_t>(file_, "step"); }),
            "attribute 'step' has shape [1000], expected a scalar");

  const std::vector<double> scales(std::size_t{4} * 256, 1.0);
  add("loss_scale", H5T_IEEE_F64LE, {4, 256}, scales.data());
  EXPECT_EQ(error_of([&] { h5::read_attr<double>(file_, "loss_scale"); }),
            "attribute 'loss_scale' has shape [4, 256], expected a scalar");

  std::vector<std::string> names(1000, "sgd");
  h5::write_string_attr(file_, "optimizer", names, false);
  EXPECT_EQ(error_of([&] { h5::read_string_attr(file_, "optimizer"); }),
            "attribute 'optimizer' has shape [1000], expected a scalar");

  const std::int64_t one = 1;
  add("single", H5T_STD_I64LE, {1}, &one);
  EXPECT_EQ(error_of([&] { h5::read_attr<std::int64_t>(file_, "single"); }),
            "attribute 'single' has shape [1], expected a scalar");

  h5::Dataspace null_space(RT_H5_CHECK(H5Screate(H5S_NULL)));
  h5::Attribute null_attr(RT_H5_CHECK(H5Acreate2(file_, "empty", H5T_STD_I64LE, null_space, H5P_DEFAULT, H5P_DEFAULT)));
  EXPECT_EQ(error_of([&] { h5::read_attr<std::int64_t>(file_, "empty"); }),
            "attribute 'empty' is empty (a null dataspace), expected a scalar");
}

TEST_F(HostileAttributes, IntegersOutOfRangeAreErrorsNotWrappedNumbers) {
  h5::Datatype wide(RT_H5_CHECK(H5Tcopy(H5T_STD_I64LE)));
  RT_H5_CHECK(H5Tset_size(wide, 16));
  RT_H5_CHECK(H5Tset_precision(wide, 128));
  const std::vector<std::uint8_t> bytes(16, 0x01);
  add("wide", wide, {}, bytes.data());
  EXPECT_EQ(error_of([&] { h5::read_attr<std::int64_t>(file_, "wide"); }),
            "attribute 'wide' is a 128-bit integer, wider than 64 bits");

  const std::uint64_t huge = (std::uint64_t{1} << 63) + 5;
  add("huge", H5T_STD_U64LE, {}, &huge);
  EXPECT_EQ(error_of([&] { h5::read_attr<std::int64_t>(file_, "huge"); }),
            "attribute 'huge' holds 9223372036854775813, outside the range of int64");
  EXPECT_EQ(h5::read_attr<std::uint64_t>(file_, "huge"), huge);

  const std::int64_t negative = -3;
  add("negative", H5T_STD_I64LE, {}, &negative);
  EXPECT_EQ(error_of([&] { h5::read_attr<std::uint64_t>(file_, "negative"); }),
            "attribute 'negative' holds -3, outside the range of uint64");
  EXPECT_EQ(h5::read_attr<std::int64_t>(file_, "negative"), -3);

  const std::int64_t big = std::int64_t{1} << 40;
  add("big", H5T_STD_I64LE, {}, &big);
  EXPECT_EQ(error_of([&] { h5::read_attr<std::int32_t>(file_, "big"); }),
            "attribute 'big' holds 1099511627776, outside the range of int32");

  // Narrower integers of either sign widen exactly.
  const std::int8_t small = -100;
  add("small", H5T_STD_I8LE, {}, &small);
  EXPECT_EQ(h5::read_attr<std::int64_t>(file_, "small"), -100);
  const std::uint16_t u16 = 65000;
  add("u16", H5T_STD_U16BE, {}, &u16, H5T_NATIVE_UINT16);
  EXPECT_EQ(h5::read_attr<std::int32_t>(file_, "u16"), 65000);

  h5::Datatype wide_float(RT_H5_CHECK(H5Tcopy(H5T_NATIVE_LDOUBLE)));
  if (H5Tget_size(wide_float) > sizeof(double)) {
    const long double x = 1.5L;
    add("long_double", wide_float, {}, &x);
    EXPECT_EQ(error_of([&] { h5::read_attr<double>(file_, "long_double"); }),
              "attribute 'long_double' is a " + std::to_string(8 * H5Tget_size(wide_float)) +
                  "-bit float, wider than 64 bits");
  }
  const float f = 0.25f;
  add("float", H5T_IEEE_F32LE, {}, &f);
  EXPECT_EQ(h5::read_attr<double>(file_, "float"), 0.25);
  EXPECT_EQ(error_of([&] { h5::read_attr<std::int64_t>(file_, "float"); }), "attribute 'float' is not an integer");
}

TEST_F(HostileAttributes, FixedLengthStringsAreCappedBeforeTheyAreAllocated) {
  h5::Datatype huge(RT_H5_CHECK(H5Tcopy(H5T_C_S1)));
  const std::size_t size = h5::kMaxStringAttrBytes + 1;
  RT_H5_CHECK(H5Tset_size(huge, size));
  const std::string text(size, 'x');
  add("config", huge, {}, text.data());
  EXPECT_EQ(error_of([&] { h5::read_string_attr(file_, "config"); }),
            "attribute 'config' is a string of 1048577 bytes, expected 1 to 1048576");

  h5::Datatype fixed(RT_H5_CHECK(H5Tcopy(H5T_C_S1)));
  RT_H5_CHECK(H5Tset_size(fixed, 8));
  const char names[3][8] = {"adamw", "sgd", "lamb"};
  add("names", fixed, {3}, names);
  EXPECT_EQ(error_of([&] { h5::read_string_attr(file_, "names"); }),
            "attribute 'names' has shape [3], expected a scalar");
  add("name", fixed, {}, names[0]);
  EXPECT_EQ(h5::read_string_attr(file_, "name"), "adamw");

  h5::write_string_attr(file_, "scalar", {"a value"}, true);
  EXPECT_EQ(h5::read_string_attr(file_, "scalar"), "a value");
  EXPECT_EQ(error_of([&] { h5::read_string_attr(file_, "absent"); }), "attribute 'absent' is missing");
}

// A name quoted in an error must stay on one line and cannot drive the terminal (found by
// tests/fuzz/fuzz_dataset: a token file's `format` holding a newline split the error line).
TEST_F(HostileAttributes, NamesWithControlCharactersAreRefusedAndQuotedEscaped) {
  h5::write_string_attr(file_, "format", {"ringtrain-tokens\n\x1b[2Jpwned\x9b"}, true);
  EXPECT_EQ(error_of([&] { h5::read_name_attr(file_, "format"); }),
            "attribute 'format' holds bytes outside printable ASCII: 'ringtrain-tokens\\x0a\\x1b[2Jpwned\\x9b'");
  h5::write_string_attr(file_, "long", {std::string(300, 'n')}, true);
  EXPECT_EQ(error_of([&] { h5::read_name_attr(file_, "long"); }),
            "attribute 'long' is a name of 300 bytes, expected at most 256");
  h5::write_string_attr(file_, "tokenizer", {"gpt2 (tiktoken, r50k)"}, true);
  EXPECT_EQ(h5::read_name_attr(file_, "tokenizer"), "gpt2 (tiktoken, r50k)");
}

}  // namespace
}  // namespace ringtrain::test
