// read_idx: the IDX format (magic 00 00 <type> <ndims>, big-endian u32 dims, row-major
// data). zlib's gz* functions read gzip and plain files alike, so one path serves both.
#include "ringtrain/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include <fmt/ranges.h>

#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

constexpr std::uint8_t kTypeUnsignedByte = 0x08;
constexpr int kMaxDims = 8;
// Bounded reads: gzread takes an unsigned count, and growing the buffer as data arrives
// means a corrupt header claiming terabytes ends as "truncated", not as a failed allocation.
constexpr std::size_t kReadChunk = std::size_t{64} << 20;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads up to n bytes; fewer only at end of data.
std::size_t read_some(gzFile f, const std::string& path, std::uint8_t* out, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const auto want = static_cast<unsigned>(std::min(n - done, kReadChunk));
    const int got = gzread(f, out + done, want);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      throw DataError(fmt::format("{}: read failed: {}", path,
                                  code == Z_ERRNO ? std::strerror(errno) : (msg ? msg : "zlib error")));
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

std::string dims_str(const std::vector<std::int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

}  // namespace

IdxArray read_idx(const std::string& path) {
  std::error_code ec;
  RT_REQUIRE(std::filesystem::exists(path, ec), DataError, "{}: no such file", path);
  RT_REQUIRE(!std::filesystem::is_directory(path, ec), DataError, "{}: is a directory, not an IDX file", path);
  GzFile file(gzopen(path.c_str(), "rb"));
  RT_REQUIRE(file, DataError, "{}: cannot open: {}", path, std::strerror(errno));

  std::uint8_t magic[4] = {};
  const std::size_t got_magic = read_some(file.get(), path, magic, 4);
  RT_REQUIRE(got_magic == 4, DataError, "{}: not an IDX file ({} bytes, shorter than the 4-byte header)", path,
             got_magic);
  RT_REQUIRE(magic[0] == 0 && magic[1] == 0 && magic[3] >= 1 && magic[3] <= kMaxDims, DataError,
             "{}: not an IDX file (magic bytes {:02x} {:02x} {:02x} {:02x}, expected 00 00 <type> <1..{} dims>)", path,
             magic[0], magic[1], magic[2], magic[3], kMaxDims);
  RT_REQUIRE(magic[2] == kTypeUnsignedByte, DataError,
             "{}: unsupported IDX element type 0x{:02x} (supported: 0x08 unsigned byte)", path, magic[2]);

  const int ndims = magic[3];
  std::uint8_t raw_dims[4 * kMaxDims] = {};
  const std::size_t dim_bytes = 4 * static_cast<std::size_t>(ndims);
  const std::size_t got_dims = read_some(file.get(), path, raw_dims, dim_bytes);
  RT_REQUIRE(got_dims == dim_bytes, DataError, "{}: truncated IDX header: expected {} bytes of dims, found {}", path,
             dim_bytes, got_dims);

  IdxArray out;
  std::uint64_t expected = 1;
  for (int d = 0; d < ndims; ++d) {
    const std::uint8_t* b = raw_dims + std::ptrdiff_t{4} * d;
    const std::uint64_t dim =
        (std::uint64_t{b[0]} << 24) | (std::uint64_t{b[1]} << 16) | (std::uint64_t{b[2]} << 8) | std::uint64_t{b[3]};
    out.dims.push_back(static_cast<std::int64_t>(dim));
    RT_REQUIRE(!__builtin_mul_overflow(expected, dim, &expected) && expected <= (std::uint64_t{1} << 62), DataError,
               "{}: IDX dims {} are too large", path, dims_str(out.dims));
  }

  std::size_t have = 0;
  while (have < expected) {
    const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(expected - have, kReadChunk));
    out.data.resize(have + step);
    const std::size_t got = read_some(file.get(), path, out.data.data() + have, step);
    have += got;
    if (got < step) break;
  }
  RT_REQUIRE(have == expected, DataError, "{}: truncated IDX file: dims {} need {} data bytes, found {}", path,
             dims_str(out.dims), expected, have);
  out.data.resize(have);
  // Extra bytes mean the dims do not describe the file; reading on would mislabel samples.
  std::uint8_t extra = 0;
  RT_REQUIRE(read_some(file.get(), path, &extra, 1) == 0, DataError,
             "{}: IDX file is longer than its dims {} say ({} data bytes expected)", path, dims_str(out.dims),
             expected);
  return out;
}

}  // namespace ringtrain
