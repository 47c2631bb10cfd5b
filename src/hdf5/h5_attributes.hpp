// Scalar and string attributes: written as fixed little-endian types and variable-length UTF-8
// strings (what h5py and h5dump show as plain values), read back with a DataError naming the
// attribute when it is missing or of another class.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "check/h5_check.hpp"
#include "hdf5/h5_handle.hpp"

namespace ringtrain::h5 {

template <typename T>
struct AttrType;
template <>
struct AttrType<std::int32_t> {
  static hid_t file() { return H5T_STD_I32LE; }
  static hid_t memory() { return H5T_NATIVE_INT32; }
};
template <>
struct AttrType<std::int64_t> {
  static hid_t file() { return H5T_STD_I64LE; }
  static hid_t memory() { return H5T_NATIVE_INT64; }
};
template <>
struct AttrType<std::uint64_t> {
  static hid_t file() { return H5T_STD_U64LE; }
  static hid_t memory() { return H5T_NATIVE_UINT64; }
};
template <>
struct AttrType<double> {
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
  RT_H5_CHECK(H5Awrite(attr, type, ptrs.data()));
}

inline Attribute open_attr(hid_t obj, const char* name) {
  RT_REQUIRE(RT_H5_CHECK(H5Aexists(obj, name)) > 0, DataError, "attribute '{}' is missing", name);
  return Attribute(RT_H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)));
}

template <typename T>
T read_attr(hid_t obj, const char* name) {
  Attribute attr = open_attr(obj, name);
  Datatype type(RT_H5_CHECK(H5Aget_type(attr)));
  const H5T_class_t cls = RT_H5_CHECK(H5Tget_class(type));
  const H5T_class_t want = std::is_floating_point_v<T> ? H5T_FLOAT : H5T_INTEGER;
  RT_REQUIRE(cls == want, DataError, "attribute '{}' is not {}", name, want == H5T_FLOAT ? "a float" : "an integer");
  T value{};
  RT_H5_CHECK(H5Aread(attr, AttrType<T>::memory(), &value));
  return value;
}

// A scalar string attribute, fixed or variable length.
inline std::string read_string_attr(hid_t obj, const char* name) {
  Attribute attr = open_attr(obj, name);
  Datatype type(RT_H5_CHECK(H5Aget_type(attr)));
  RT_REQUIRE(RT_H5_CHECK(H5Tget_class(type)) == H5T_STRING, DataError, "attribute '{}' is not a string", name);
  if (RT_H5_CHECK(H5Tis_variable_str(type)) > 0) {
    Datatype mem = utf8_string_type();
    char* text = nullptr;
    RT_H5_CHECK(H5Aread(attr, mem, &text));
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  std::string value(H5Tget_size(type), '\0');
  RT_H5_CHECK(H5Aread(attr, type, value.data()));
  return value.substr(0, value.find('\0'));
}

}  // namespace ringtrain::h5
