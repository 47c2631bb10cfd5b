// Crafted HDF5 content for the fuzz targets that read HDF5 files: the fuzzer's input chooses
// edits to a valid file (a dataset or a checkpoint) through the HDF5 API, so every file it
// makes is well-formed HDF5 whose *content* is hostile: attributes and datasets of another
// class, width, byte order or shape (arrays where scalars belong, empty or 2^62-element
// shapes, strings, compounds, references), values out of range, objects replaced by groups or
// by links that lead nowhere, outside the file or in a circle. (Bytes mutated below the HDF5
// API test libhdf5's own parser, not ringtrain: see tests/fuzz/README.md.)
#pragma once
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "check/h5_check.hpp"
#include "hdf5/h5_handle.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::fuzz {

// The objects of a file an edit may target, and the attribute names each is read with.
struct CraftTargets {
  std::vector<std::string> datasets;  // paths from the root, e.g. "images" or "optimizer/m"
  std::vector<std::string> attributes;
};

class H5Craft {
 public:
  explicit H5Craft(FuzzedDataProvider& in) : in_(in) {}

  // Applies up to `max_edits` edits chosen by the input to the file open at `file`. An edit
  // HDF5 refuses (a type that cannot hold those values, a chunk larger than its dataset) is
  // skipped: the file stays well-formed either way.
  void edit(hid_t file, const CraftTargets& targets, int max_edits) {
    const int edits = in_.ConsumeIntegralInRange(0, max_edits);
    for (int i = 0; i < edits && in_.remaining_bytes() > 0; ++i) {
      try {
        edit_once(file, targets);
      } catch (const DataError&) {
        H5Eclear2(H5E_DEFAULT);
      }
    }
  }

 private:
  void edit_once(hid_t file, const CraftTargets& t) {
    const std::string dataset = pick(t.datasets);
    const std::string attribute = pick(t.attributes);
    const int kind = in_.ConsumeIntegralInRange(0, 9);
    if (tracing())  // to see what a crashing input does
      std::fprintf(stderr, "h5_craft: edit %d on dataset '%s', attribute '%s'\n", kind, dataset.c_str(),
                   attribute.c_str());
    switch (kind) {
      case 0:
      case 1: {  // an attribute of the root or of a dataset, of any type and shape
        const std::string object = in_.ConsumeBool() ? std::string("/") : dataset;
        if (RT_H5_CHECK(H5Lexists(file, object.c_str(), H5P_DEFAULT)) <= 0) return;
        h5::Handle<H5Oclose> obj(RT_H5_CHECK(H5Oopen(file, object.c_str(), H5P_DEFAULT)));
        replace_attribute(obj, attribute);
        return;
      }
      case 2: {  // an integer attribute of the root set to a value at an edge of its range
        if (RT_H5_CHECK(H5Aexists(file, attribute.c_str())) > 0) RT_H5_CHECK(H5Adelete(file, attribute.c_str()));
        h5::Dataspace space(RT_H5_CHECK(H5Screate(H5S_SCALAR)));
        h5::Attribute attr(
            RT_H5_CHECK(H5Acreate2(file, attribute.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)));
        const std::int64_t value = edge_value();
        RT_H5_CHECK(H5Awrite(attr, H5T_NATIVE_INT64, &value));
        return;
      }
      case 3:
      case 4:  // a dataset of any type, shape and layout in place of one the reader expects
        unlink(file, dataset);
        create_dataset(file, dataset);
        return;
      case 5:  // the same values in another numeric type (wider, narrower, big-endian, float)
        retype_dataset(file, dataset);
        return;
      case 6:  // values overwritten (labels out of range, NaN samples, checksums that differ)
        overwrite_values(file, dataset);
        return;
      case 7:  // a group where a dataset belongs, or a link that leads nowhere or outside
        unlink(file, dataset);
        replace_with_link(file, dataset, pick(t.datasets));
        return;
      case 8: {  // a group that contains the root (a cycle for anything that walks the file)
        h5::PropList lcpl(RT_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
        RT_H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
        const std::string loop = dataset + "_loop/root";
        RT_H5_CHECK(H5Lcreate_hard(file, "/", file, loop.c_str(), lcpl, H5P_DEFAULT));
        return;
      }
      default:  // an object removed
        unlink(file, dataset);
        return;
    }
  }

  static bool tracing() { return std::getenv("RINGTRAIN_FUZZ_TRACE") != nullptr; }
  static void trace(const char* what, hid_t type, hid_t space) {
    if (!tracing()) return;
    std::fprintf(stderr, "h5_craft: %s of type class %d, %zu bytes; space class %d, %lld points\n", what,
                 static_cast<int>(H5Tget_class(type)), H5Tget_size(type),
                 static_cast<int>(H5Sget_simple_extent_type(space)),
                 static_cast<long long>(H5Sget_simple_extent_npoints(space)));
  }

  const std::string& pick(const std::vector<std::string>& names) {
    return names[in_.ConsumeIntegralInRange<std::size_t>(0, names.size() - 1)];
  }

  std::int64_t edge_value() {
    static constexpr std::array<std::int64_t, 8> kEdges = {0, -1, 1, 2, INT32_MAX, INT64_MAX, INT64_MIN, 1000000};
    return in_.ConsumeBool() ? kEdges[in_.ConsumeIntegralInRange<std::size_t>(0, kEdges.size() - 1)]
                             : in_.ConsumeIntegral<std::int64_t>();
  }

  // Removes `path` if it exists (a dangling soft link counts).
  static void unlink(hid_t file, const std::string& path) {
    if (H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0) RT_H5_CHECK(H5Ldelete(file, path.c_str(), H5P_DEFAULT));
    H5Eclear2(H5E_DEFAULT);
  }

  // Any class a file may declare: integers of every width (1 to 16 bytes), sign and byte
  // order, IEEE half/single/double/extended floats, strings, enum, compound, array, opaque,
  // bitfield, variable-length sequences and object references.
  h5::Datatype type() {
    switch (in_.ConsumeIntegralInRange(0, 12)) {
      case 0: {
        const std::array<hid_t, 16> ints = {H5T_STD_I8LE,  H5T_STD_U8LE,  H5T_STD_I16LE, H5T_STD_U16LE,
                                            H5T_STD_I32LE, H5T_STD_U32LE, H5T_STD_I64LE, H5T_STD_U64LE,
                                            H5T_STD_I8BE,  H5T_STD_U8BE,  H5T_STD_I16BE, H5T_STD_U16BE,
                                            H5T_STD_I32BE, H5T_STD_U32BE, H5T_STD_I64BE, H5T_STD_U64BE};
        return copy(ints[in_.ConsumeIntegralInRange<std::size_t>(0, ints.size() - 1)]);
      }
      case 1: {
        const std::array<hid_t, 5> floats = {H5T_IEEE_F32LE, H5T_IEEE_F64LE, H5T_IEEE_F32BE, H5T_IEEE_F64BE,
                                             H5T_NATIVE_LDOUBLE};
        return copy(floats[in_.ConsumeIntegralInRange<std::size_t>(0, floats.size() - 1)]);
      }
      case 2: {  // IEEE binary16 (HDF5 1.10 has no predefined half type)
        h5::Datatype t = copy(H5T_IEEE_F32LE);
        RT_H5_CHECK(H5Tset_fields(t, 15, 10, 5, 0, 10));
        RT_H5_CHECK(H5Tset_size(t, 2));
        RT_H5_CHECK(H5Tset_precision(t, 16));
        RT_H5_CHECK(H5Tset_ebias(t, 15));
        return t;
      }
      case 3: {  // an integer of an odd size (3 bytes, 16 bytes, ...)
        h5::Datatype t = copy(in_.ConsumeBool() ? H5T_STD_I64LE : H5T_STD_U64LE);
        RT_H5_CHECK(H5Tset_size(t, in_.ConsumeIntegralInRange<std::size_t>(1, 16)));
        return t;
      }
      case 4: {  // a fixed-length string
        h5::Datatype t = copy(H5T_C_S1);
        RT_H5_CHECK(H5Tset_size(t, in_.ConsumeIntegralInRange<std::size_t>(1, 64)));
        return t;
      }
      case 5: {
        h5::Datatype t = copy(H5T_C_S1);
        RT_H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
        RT_H5_CHECK(H5Tset_cset(t, in_.ConsumeBool() ? H5T_CSET_UTF8 : H5T_CSET_ASCII));
        return t;
      }
      case 6: {
        h5::Datatype t(RT_H5_CHECK(H5Tenum_create(H5T_NATIVE_INT)));
        const int value = 1;
        RT_H5_CHECK(H5Tenum_insert(t, "one", &value));
        return t;
      }
      case 7: {
        h5::Datatype t(RT_H5_CHECK(H5Tcreate(H5T_COMPOUND, 16)));
        RT_H5_CHECK(H5Tinsert(t, "a", 0, H5T_STD_I64LE));
        RT_H5_CHECK(H5Tinsert(t, "b", 8, H5T_IEEE_F64LE));
        return t;
      }
      case 8: {
        const hsize_t dims = in_.ConsumeIntegralInRange<hsize_t>(1, 4);
        return h5::Datatype(RT_H5_CHECK(H5Tarray_create2(H5T_STD_I64LE, 1, &dims)));
      }
      case 9: return h5::Datatype(RT_H5_CHECK(H5Tcreate(H5T_OPAQUE, in_.ConsumeIntegralInRange<std::size_t>(1, 16))));
      case 10: return copy(H5T_STD_B8LE);
      case 11: return h5::Datatype(RT_H5_CHECK(H5Tvlen_create(H5T_STD_I32LE)));
      default: return copy(H5T_STD_REF_OBJ);
    }
  }

  static h5::Datatype copy(hid_t t) { return h5::Datatype(RT_H5_CHECK(H5Tcopy(t))); }

  // A dimension: mostly small, sometimes (with `large`) 0 or far beyond any real dataset.
  hsize_t dimension(bool large) {
    static constexpr std::array<hsize_t, 6> kLarge = {hsize_t{1} << 20, hsize_t{1} << 31, hsize_t{1} << 32,
                                                      hsize_t{1} << 40, hsize_t{1} << 62, ~hsize_t{0} >> 1};
    if (large && in_.ConsumeIntegralInRange(0, 7) == 0)
      return kLarge[in_.ConsumeIntegralInRange<std::size_t>(0, kLarge.size() - 1)];
    return in_.ConsumeIntegralInRange<hsize_t>(0, 6);
  }

  // Scalar, null (no elements at all) or simple of rank 1 to 5; `large` allows huge dimensions
  // (datasets only: HDF5 keeps an attribute whole in its object header, and libhdf5 1.10
  // overruns a buffer writing one of 2^63 elements).
  h5::Dataspace space(std::vector<hsize_t>* dims, bool large) {
    dims->clear();
    switch (in_.ConsumeIntegralInRange(0, 5)) {
      case 0: return h5::Dataspace(RT_H5_CHECK(H5Screate(H5S_SCALAR)));
      case 1: return h5::Dataspace(RT_H5_CHECK(H5Screate(H5S_NULL)));
      default: {
        const int rank = in_.ConsumeIntegralInRange(1, 5);
        for (int d = 0; d < rank; ++d) dims->push_back(dimension(large));
        return h5::Dataspace(RT_H5_CHECK(H5Screate_simple(rank, dims->data(), nullptr)));
      }
    }
  }

  // Writes values of `type` over every point of `space` to the attribute or dataset `obj`,
  // taken from the input; leaves it unwritten (zeros, or the fill value) when the values would
  // be large. Variable-length strings get strings, references point at the root.
  void write_values(hid_t obj, bool attribute, hid_t type, hid_t space) {
    const hssize_t points = RT_H5_CHECK(H5Sget_select_npoints(space));
    const std::size_t size = H5Tget_size(type);
    if (points <= 0 || size == 0 || static_cast<std::uint64_t>(points) * size > (std::uint64_t{1} << 16)) return;
    const auto n = static_cast<std::size_t>(points);
    auto write = [&](hid_t mem_type, const void* data) {
      RT_H5_CHECK(attribute ? H5Awrite(obj, mem_type, data)
                            : H5Dwrite(obj, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    };
    const H5T_class_t cls = H5Tget_class(type);
    if (cls == H5T_STRING && H5Tis_variable_str(type) > 0) {
      std::vector<std::string> text(n);
      std::vector<const char*> ptrs(n);
      for (std::size_t i = 0; i < n; ++i) {
        text[i] = in_.ConsumeRandomLengthString(32);
        ptrs[i] = text[i].c_str();
      }
      write(type, ptrs.data());
    } else if (cls == H5T_VLEN) {
      std::vector<std::int32_t> values(4, 7);
      std::vector<hvl_t> seqs(n, hvl_t{in_.ConsumeIntegralInRange<std::size_t>(0, 4), values.data()});
      write(type, seqs.data());
    } else if (cls == H5T_REFERENCE) {
      std::vector<hobj_ref_t> refs(n);
      for (auto& r : refs) RT_H5_CHECK(H5Rcreate(&r, obj, "/", H5R_OBJECT, -1));
      write(type, refs.data());
    } else {
      std::vector<std::uint8_t> bytes = in_.ConsumeBytes<std::uint8_t>(n * size);
      bytes.resize(n * size, in_.ConsumeIntegral<std::uint8_t>());
      write(type, bytes.data());
    }
  }

  void replace_attribute(hid_t obj, const std::string& name) {
    if (RT_H5_CHECK(H5Aexists(obj, name.c_str())) > 0) RT_H5_CHECK(H5Adelete(obj, name.c_str()));
    h5::Datatype t = type();
    std::vector<hsize_t> dims;
    h5::Dataspace s = space(&dims, false);
    trace("attribute", t, s);
    h5::Attribute attr(RT_H5_CHECK(H5Acreate2(obj, name.c_str(), t, s, H5P_DEFAULT, H5P_DEFAULT)));
    write_values(attr, true, t, s);
  }

  // Contiguous, compact or chunked (then sometimes compressed); shapes too large to store are
  // declared chunked with nothing written.
  void create_dataset(hid_t file, const std::string& path) {
    h5::Datatype t = type();
    std::vector<hsize_t> dims;
    h5::Dataspace s = space(&dims, true);
    h5::PropList dcpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    const bool large = std::any_of(dims.begin(), dims.end(), [](hsize_t d) { return d > 4096; });
    if (!dims.empty() && (large || in_.ConsumeBool())) {
      std::vector<hsize_t> chunk(dims.size());
      for (std::size_t d = 0; d < dims.size(); ++d)
        chunk[d] = std::clamp<hsize_t>(in_.ConsumeIntegralInRange<hsize_t>(1, 8), 1, std::max<hsize_t>(dims[d], 1));
      RT_H5_CHECK(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()));
      if (in_.ConsumeBool()) RT_H5_CHECK(H5Pset_deflate(dcpl, 1));
    } else if (in_.ConsumeBool()) {
      RT_H5_CHECK(H5Pset_layout(dcpl, H5D_COMPACT));
    }
    h5::PropList lcpl(RT_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
    RT_H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
    trace("dataset", t, s);
    h5::Dataset d(RT_H5_CHECK(H5Dcreate2(file, path.c_str(), t, s, lcpl, dcpl, H5P_DEFAULT)));
    if (!large) write_values(d, false, t, s);
  }

  // Reads a numeric dataset as doubles and writes it back as another numeric type (HDF5
  // converts; values the new type cannot hold are clipped), with its attributes dropped.
  void retype_dataset(hid_t file, const std::string& path) {
    if (RT_H5_CHECK(H5Lexists(file, path.c_str(), H5P_DEFAULT)) <= 0) return;
    std::vector<double> values;
    std::vector<hsize_t> dims;
    {
      h5::Dataset d(RT_H5_CHECK(H5Dopen2(file, path.c_str(), H5P_DEFAULT)));
      h5::Dataspace s(RT_H5_CHECK(H5Dget_space(d)));
      const hssize_t n = RT_H5_CHECK(H5Sget_select_npoints(s));
      if (n <= 0 || n > (1 << 20)) return;
      dims.resize(static_cast<std::size_t>(RT_H5_CHECK(H5Sget_simple_extent_ndims(s))));
      RT_H5_CHECK(H5Sget_simple_extent_dims(s, dims.data(), nullptr));
      values.resize(static_cast<std::size_t>(n));
      RT_H5_CHECK(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
    }
    h5::Datatype t = type();
    const H5T_class_t cls = H5Tget_class(t);
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) return;
    unlink(file, path);
    h5::Dataspace s(RT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
    h5::Dataset d(RT_H5_CHECK(H5Dcreate2(file, path.c_str(), t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    RT_H5_CHECK(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
  }

  // Overwrites a few elements of a dataset with bytes from the input, in its own file type.
  void overwrite_values(hid_t file, const std::string& path) {
    if (RT_H5_CHECK(H5Lexists(file, path.c_str(), H5P_DEFAULT)) <= 0) return;
    h5::Dataset d(RT_H5_CHECK(H5Dopen2(file, path.c_str(), H5P_DEFAULT)));
    h5::Datatype t(RT_H5_CHECK(H5Dget_type(d)));
    h5::Dataspace s(RT_H5_CHECK(H5Dget_space(d)));
    const hssize_t n = RT_H5_CHECK(H5Sget_select_npoints(s));
    const std::size_t size = H5Tget_size(t);
    const H5T_class_t cls = H5Tget_class(t);
    if (n <= 0 || size == 0 || size > 16 || (cls != H5T_INTEGER && cls != H5T_FLOAT)) return;
    const int rank = RT_H5_CHECK(H5Sget_simple_extent_ndims(s));
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    RT_H5_CHECK(H5Sget_simple_extent_dims(s, dims.data(), nullptr));
    std::vector<hsize_t> at(dims.size());
    for (std::size_t k = 0; k < dims.size(); ++k) at[k] = in_.ConsumeIntegralInRange<hsize_t>(0, dims[k] - 1);
    RT_H5_CHECK(H5Sselect_elements(s, H5S_SELECT_SET, 1, at.data()));
    const hsize_t one = 1;
    h5::Dataspace mem(RT_H5_CHECK(H5Screate_simple(1, &one, nullptr)));
    std::vector<std::uint8_t> bytes = in_.ConsumeBytes<std::uint8_t>(size);
    bytes.resize(size, 0xff);
    RT_H5_CHECK(H5Dwrite(d, t, mem, s, H5P_DEFAULT, bytes.data()));
  }

  void replace_with_link(hid_t file, const std::string& path, const std::string& other) {
    h5::PropList lcpl(RT_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
    RT_H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
    switch (in_.ConsumeIntegralInRange(0, 3)) {
      case 0: h5::Group(RT_H5_CHECK(H5Gcreate2(file, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT))); return;
      case 1:  // soft: to another object, to itself, or to nothing
        RT_H5_CHECK(
            H5Lcreate_soft(in_.ConsumeBool() ? other.c_str() : "/nowhere", file, path.c_str(), lcpl, H5P_DEFAULT));
        return;
      case 2: RT_H5_CHECK(H5Lcreate_soft(path.c_str(), file, path.c_str(), lcpl, H5P_DEFAULT)); return;
      default:  // external: into a file that does not exist, or into /proc
        RT_H5_CHECK(H5Lcreate_external(in_.ConsumeBool() ? "/nonexistent/file.h5" : "/proc/self/environ", "/x", file,
                                       path.c_str(), lcpl, H5P_DEFAULT));
        return;
    }
  }

  FuzzedDataProvider& in_;
};

}  // namespace ringtrain::fuzz
