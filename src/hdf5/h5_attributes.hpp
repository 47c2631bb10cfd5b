// Scalar and string attributes: written as fixed little-endian types and variable-length UTF-8
// strings (what h5py and h5dump show as plain values). Reads treat the file as untrusted: a
// DataError naming the attribute (callers add the file) when it is missing, not a scalar, of
// another class, wider than the value read, out of range, or an oversized string.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "check/h5_check.hpp"
#include "hdf5/h5_handle.hpp"
#include "ringtrain/core/printable.hpp"

namespace ringtrain::h5 {

template <typename T>
struct AttrType;
template <>
struct AttrType<std::int32_t> {
  static constexpr const char* kName = "int32";
  static hid_t file() { return H5T_STD_I32LE; }
  static hid_t memory() { return H5T_NATIVE_INT32; }
};
template <>
struct AttrType<std::int64_t> {
  static constexpr const char* kName = "int64";
  static hid_t file() { return H5T_STD_I64LE; }
  static hid_t memory() { return H5T_NATIVE_INT64; }
};
template <>
struct AttrType<std::uint64_t> {
  static constexpr const char* kName = "uint64";
  static hid_t file() { return H5T_STD_U64LE; }
  static hid_t memory() { return H5T_NATIVE_UINT64; }
};
template <>
struct AttrType<double> {
  static constexpr const char* kName = "double";
  static hid_t file() { return H5T_IEEE_F64LE; }
  static hid_t memory() { return H5T_NATIVE_DOUBLE; }
};

template <typename T>
void write_attr(hid_t obj, const char* name, T value) {
  Dataspace space(RT_H5_CHECK(H5Screate(H5S_SCALAR)));
  Attribute attr(RT_H5_CHECK(H5Acreate2(obj, name, AttrType<T>::file(), space, H5P_DEFAULT, H5P_DEFAULT)));
  RT_H5_CHECK(H5Awrite(attr, AttrType<T>::memory(), &value));
}

inline Datatype utf8_string_type() {
  Datatype type(RT_H5_CHECK(H5Tcopy(H5T_C_S1)));
  RT_H5_CHECK(H5Tset_size(type, H5T_VARIABLE));
  RT_H5_CHECK(H5Tset_cset(type, H5T_CSET_UTF8));
  return type;
}

// One string (scalar) or a list of them (1-D).
inline void write_string_attr(hid_t obj, const char* name, const std::vector<std::string>& values, bool scalar) {
  Datatype type = utf8_string_type();
  const hsize_t n = values.size();
  Dataspace space(RT_H5_CHECK(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr)));
  Attribute attr(RT_H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)));
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& v : values) ptrs.push_back(v.c_str());
  RT_H5_CHECK(H5Awrite(attr, type, static_cast<const void*>(ptrs.data())));
}

inline Attribute open_attr(hid_t obj, const char* name) {
  RT_REQUIRE(RT_H5_CHECK(H5Aexists(obj, name)) > 0, DataError, "attribute '{}' is missing", name);
  return Attribute(RT_H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)));
}

// H5Aread writes every element of an attribute; reading into one value needs a scalar. (A
// one-element array is refused as well: ringtrain, h5py and h5dump all write single values as
// scalars, and one rule for every attribute keeps files unambiguous.)
inline void require_scalar(hid_t attr, const char* name) {
  Dataspace space(RT_H5_CHECK(H5Aget_space(attr)));
  const H5S_class_t cls = RT_H5_CHECK(H5Sget_simple_extent_type(space));
  if (cls == H5S_SCALAR) return;
  RT_REQUIRE(cls == H5S_SIMPLE, DataError, "attribute '{}' is empty (a null dataspace), expected a scalar", name);
  const int rank = RT_H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  RT_H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  throw DataError(fmt::format("attribute '{}' has shape [{}], expected a scalar", name, fmt::join(dims, ", ")));
}

// Integers are read at 64 bits of their own sign (a conversion that cannot overflow) and then
// range-checked into T: a wider integer or a value T cannot hold is an error, never a wrapped
// or saturated number. Floats are read as doubles (the library only writes doubles).
template <typename T>
T read_attr(hid_t obj, const char* name) {
  static_assert(std::is_same_v<T, double> || std::is_integral_v<T>, "read_attr reads integers and doubles");
  Attribute attr = open_attr(obj, name);
  require_scalar(attr, name);
  Datatype type(RT_H5_CHECK(H5Aget_type(attr)));
  const H5T_class_t cls = RT_H5_CHECK(H5Tget_class(type));
  const std::size_t bytes = H5Tget_size(type);
  RT_REQUIRE(bytes > 0, DataError, "attribute '{}': cannot read the size of its type", name);
  if constexpr (std::is_floating_point_v<T>) {
    RT_REQUIRE(cls == H5T_FLOAT, DataError, "attribute '{}' is not a float", name);
    RT_REQUIRE(bytes <= sizeof(double), DataError, "attribute '{}' is a {}-bit float, wider than 64 bits", name,
               8 * bytes);
    double value = 0.0;
    RT_H5_CHECK(H5Aread(attr, H5T_NATIVE_DOUBLE, &value));
    return value;
  } else {
    RT_REQUIRE(cls == H5T_INTEGER, DataError, "attribute '{}' is not an integer", name);
    RT_REQUIRE(bytes <= sizeof(std::int64_t), DataError, "attribute '{}' is a {}-bit integer, wider than 64 bits", name,
               8 * bytes);
    auto checked = [&](auto value) {
      RT_REQUIRE(std::in_range<T>(value), DataError, "attribute '{}' holds {}, outside the range of {}", name, value,
                 AttrType<T>::kName);
      return static_cast<T>(value);
    };
    if (RT_H5_CHECK(H5Tget_sign(type)) == H5T_SGN_NONE) {
      std::uint64_t value = 0;
      RT_H5_CHECK(H5Aread(attr, H5T_NATIVE_UINT64, &value));
      return checked(value);
    }
    std::int64_t value = 0;
    RT_H5_CHECK(H5Aread(attr, H5T_NATIVE_INT64, &value));
    return checked(value);
  }
}

// Longest fixed-length string attribute read: its size comes from the file and sizes an
// allocation (the configs stored in checkpoints are a few KiB).
constexpr std::size_t kMaxStringAttrBytes = std::size_t{1} << 20;

// A scalar string attribute, fixed or variable length.
inline std::string read_string_attr(hid_t obj, const char* name) {
  Attribute attr = open_attr(obj, name);
  require_scalar(attr, name);
  Datatype type(RT_H5_CHECK(H5Aget_type(attr)));
  RT_REQUIRE(RT_H5_CHECK(H5Tget_class(type)) == H5T_STRING, DataError, "attribute '{}' is not a string", name);
  if (RT_H5_CHECK(H5Tis_variable_str(type)) > 0) {
    Datatype mem = utf8_string_type();
    char* text = nullptr;
    RT_H5_CHECK(H5Aread(attr, mem, static_cast<void*>(&text)));
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  const std::size_t bytes = H5Tget_size(type);
  RT_REQUIRE(bytes > 0 && bytes <= kMaxStringAttrBytes, DataError,
             "attribute '{}' is a string of {} bytes, expected 1 to {}", name, bytes, kMaxStringAttrBytes);
  std::string value(bytes, '\0');
  RT_H5_CHECK(H5Aread(attr, type, value.data()));
  return value.substr(0, value.find('\0'));
}

// A string attribute that names something (a format, an optimizer, a tokenizer): at most 256
// bytes of printable ASCII, so that messages can quote it on one line as it is.
inline std::string read_name_attr(hid_t obj, const char* name) {
  std::string value = read_string_attr(obj, name);
  RT_REQUIRE(value.size() <= 256, DataError, "attribute '{}' is a name of {} bytes, expected at most 256", name,
             value.size());
  RT_REQUIRE(printable(value) == value, DataError, "attribute '{}' holds bytes outside printable ASCII: '{}'", name,
             printable(value));
  return value;
}

}  // namespace ringtrain::h5
