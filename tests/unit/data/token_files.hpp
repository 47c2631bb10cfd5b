// Test helpers for token data: a token pattern that differs between neighbours, writers of
// token dataset files (any dtype, attributes optional or malformed on purpose), raw and llm.c
// token files, and the error text of a call.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "hdf5/h5_attributes.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::test {

// Token i of the test streams: in [0, vocab), different from its neighbours.
inline std::uint32_t token_of(std::int64_t i, std::int64_t vocab) {
  return static_cast<std::uint32_t>((i * 7 + i / 13) % vocab);
}

inline std::vector<std::uint32_t> tokens_from(std::int64_t first, std::int64_t n, std::int64_t vocab) {
  std::vector<std::uint32_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = token_of(first + i, vocab);
  return v;
}

struct TokenFileSpec {
  hid_t file_type = H5T_STD_U16LE;
  std::int64_t vocab_size = 300;   // < 0: no attribute
  std::string tokenizer = "test";  // empty: no attribute
  bool vocab_as_string = false;    // a malformed attribute
  hsize_t chunk = 64;              // 0: contiguous
};

// A token dataset file with `tokens` (any integer values, written through uint32).
inline void write_token_file(const std::string& path, const std::vector<std::uint32_t>& tokens,
                             const TokenFileSpec& spec = {}) {
  h5::ErrorContext where(path);
  h5::File f(RT_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)));
  const hsize_t n = tokens.size();
  h5::Dataspace space(RT_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  h5::PropList dcpl(RT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  if (spec.chunk > 0 && n > 0) {
    const hsize_t chunk = std::min(spec.chunk, n);
    RT_H5_CHECK(H5Pset_chunk(dcpl, 1, &chunk));
  }
  h5::Dataset d(RT_H5_CHECK(H5Dcreate2(f, "tokens", spec.file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  if (n > 0) RT_H5_CHECK(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()));
  if (spec.vocab_as_string) {
    h5::write_string_attr(d, "vocab_size", {std::to_string(spec.vocab_size)}, true);
  } else if (spec.vocab_size >= 0) {
    h5::write_attr<std::int64_t>(d, "vocab_size", spec.vocab_size);
  }
  if (!spec.tokenizer.empty()) h5::write_string_attr(d, "tokenizer", {spec.tokenizer}, true);
}

template <typename T>
std::vector<std::byte> little_endian_bytes(const std::vector<std::uint32_t>& tokens) {
  std::vector<std::byte> out(tokens.size() * sizeof(T));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto v = static_cast<T>(tokens[i]);
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
  return out;
}

inline void write_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// llm.c's shard: 256 int32 header (magic, version, token count), then uint16 tokens.
inline std::vector<std::byte> llmc_shard(const std::vector<std::uint32_t>& tokens, std::int32_t magic = 20240520,
                                         std::int32_t version = 1, std::int64_t count = -1) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(count < 0 ? static_cast<std::int64_t>(tokens.size()) : count);
  std::vector<std::byte> out(header.size() * 4);
  std::memcpy(out.data(), header.data(), out.size());
  const auto body = little_endian_bytes<std::uint16_t>(tokens);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// The message of the Error fn throws, or "(no error)".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace ringtrain::test
