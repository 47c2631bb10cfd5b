// Helpers shared by the data tests (unit and MPI): writing IDX files byte by byte, plain or
// gzipped, and deterministic sample content that differs per position.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringtrain::test {

// Bytes that differ between neighbours and between samples, so a shifted read shows.
inline std::vector<std::uint8_t> pattern_bytes(std::size_t n, unsigned salt = 0) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((i * 31 + i / 251 + salt) & 0xff);
  return v;
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) throw std::runtime_error("gzopen failed: " + path.string());
    const int n = bytes.empty() ? 0 : gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    if (n != static_cast<int>(bytes.size())) throw std::runtime_error("gzwrite failed: " + path.string());
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("write failed: " + path.string());
}

// IDX header: 00 00 type ndims, then big-endian u32 dims.
inline std::vector<std::uint8_t> idx_header(const std::vector<std::int64_t>& dims, std::uint8_t type = 0x08) {
  std::vector<std::uint8_t> h = {0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (const auto d : dims) {
    const auto u = static_cast<std::uint32_t>(d);
    h.insert(h.end(), {static_cast<std::uint8_t>(u >> 24), static_cast<std::uint8_t>(u >> 16),
                       static_cast<std::uint8_t>(u >> 8), static_cast<std::uint8_t>(u)});
  }
  return h;
}

inline void write_idx(const std::filesystem::path& path, const std::vector<std::int64_t>& dims,
                      const std::vector<std::uint8_t>& data, bool gzip) {
  auto bytes = idx_header(dims);
  bytes.insert(bytes.end(), data.begin(), data.end());
  write_bytes(path, bytes, gzip);
}

}  // namespace ringtrain::test
