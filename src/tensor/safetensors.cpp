// write_safetensors and SafetensorsFile (see header). The reader follows the format's own rules:
// the header at most 100 MB, every dtype one it defines, each tensor's bytes exactly its shape's,
// and the tensors tiling the data without holes or overlaps. Host byte order is little-endian
// (as the format's), which the static_assert holds this file to.
#include "ringtrain/tensor/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/files.hpp"
#include "ringtrain/core/printable.hpp"

namespace ringtrain {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the format's limit
constexpr std::string_view kMetadataKey = "__metadata__";

// Bytes per element of every dtype the format defines (sub-byte ones are refused as unknown).
std::int64_t dtype_bytes(std::string_view dtype) {
  static const std::map<std::string_view, std::int64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::string header_of(const std::vector<SafetensorsTensor>& tensors, const std::map<std::string, std::string>& meta) {
  nlohmann::json header = nlohmann::json::object();
  std::int64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    RT_REQUIRE(!header.contains(t.name) && t.name != kMetadataKey, Error, "safetensors: tensor name '{}' used twice",
               t.name);
    const std::int64_t bytes = t.shape.numel() * 4;
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape.dims()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!meta.empty()) header[std::string(kMetadataKey)] = meta;
  std::string text = header.dump();
  text.append((8 - (text.size() % 8)) % 8, ' ');  // 8 + N a multiple of 8: the data starts aligned
  return text;
}

// What the reader needs from one JSON value: a non-negative integer.
bool read_count(const nlohmann::json& v, std::uint64_t& out) {
  if (!v.is_number_unsigned()) return false;
  out = v.get<std::uint64_t>();
  return out <= static_cast<std::uint64_t>(INT64_MAX);
}

// A header value quoted in a message: its JSON when that is flat (a scalar, or an array of at
// most 16 scalars), else what it is. Never a whole dump: serializing recurses once per level,
// and a crafted header nests a million deep within the format's 100 MB (a stack overflow).
std::string brief(const nlohmann::json& v) {
  constexpr std::size_t kListed = 16;
  const auto flat = [&] {
    if (!v.is_array()) return !v.is_object();
    return v.size() <= kListed && std::none_of(v.begin(), v.end(), [](const auto& x) { return x.is_structured(); });
  };
  if (flat()) return printable(v.dump());
  return fmt::format("{} of {} {}{}", v.is_array() ? "an array" : "an object", v.size(),
                     v.is_array() ? "value" : "member", v.size() == 1 ? "" : "s");
}

// One tensor's header entry, checked against the data section's size.
SafetensorsFile::Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& v,
                                   std::int64_t data_bytes) {
  const auto bad = [&](const std::string& what) {
    return DataError(fmt::format("{}: tensor '{}': {}", path, printable(name), what));
  };
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
    throw bad("not an object with dtype, shape and data_offsets");
  SafetensorsFile::Entry e;
  e.name = name;
  e.dtype = v.at("dtype").is_string() ? v.at("dtype").get<std::string>() : brief(v.at("dtype"));
  const std::int64_t elem = dtype_bytes(e.dtype);
  if (elem == 0) throw bad(fmt::format("unknown dtype '{}'", printable(e.dtype)));
  const nlohmann::json& shape = v.at("shape");
  const nlohmann::json& offsets = v.at("data_offsets");
  std::uint64_t begin = 0, end = 0, bytes = static_cast<std::uint64_t>(elem);
  if (!offsets.is_array() || offsets.size() != 2 || !read_count(offsets[0], begin) || !read_count(offsets[1], end))
    throw bad(fmt::format("data_offsets {} is not two non-negative integers", brief(offsets)));
  if (begin > end || end > static_cast<std::uint64_t>(data_bytes))
    throw bad(
        fmt::format("data_offsets [{}, {}] out of range (the data section holds {} bytes)", begin, end, data_bytes));
  if (!shape.is_array()) throw bad(fmt::format("shape {} is not an array", brief(shape)));
  std::vector<std::int64_t> dims;
  for (const nlohmann::json& d : shape) {
    std::uint64_t x = 0;
    if (!read_count(d, x)) throw bad(fmt::format("shape {} is not a list of non-negative integers", brief(shape)));
    if (__builtin_mul_overflow(bytes, x, &bytes)) bytes = UINT64_MAX;
    dims.push_back(static_cast<std::int64_t>(x));
  }
  if (bytes != end - begin)
    throw bad(fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", brief(shape), e.dtype,
                          bytes == UINT64_MAX ? std::string("too many") : std::to_string(bytes), begin, end,
                          end - begin));
  e.shape = Shape(std::move(dims));
  e.begin = static_cast<std::int64_t>(begin);
  e.end = static_cast<std::int64_t>(end);
  return e;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = header_of(tensors, metadata);
  std::string file(8, '\0');
  const std::uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header;
  for (const SafetensorsTensor& t : tensors)
    file.append(reinterpret_cast<const char*>(t.data), static_cast<std::size_t>(t.shape.numel()) * sizeof(float));
  write_file_atomic(path, file);
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  RT_REQUIRE(in, DataError, "{}: cannot open: {}", path_, std::strerror(errno));
  std::error_code ec;
  RT_REQUIRE(std::filesystem::is_regular_file(path_, ec), DataError, "{}: not a regular file", path_);
  const std::int64_t size = in.tellg();
  std::uint64_t n = 0;
  RT_REQUIRE(size >= 8, DataError, "{}: {} bytes: too short for a safetensors file (8-byte header length first)", path_,
             size);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(&n), 8);
  constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  RT_REQUIRE(std::memcmp(&n, kHdf5Signature, 8) != 0, DataError,
             "{}: an HDF5 file (a ringtrain checkpoint or dataset?), not safetensors; a checkpoint continues with "
             "train.resume, or becomes safetensors with ringtrain ckpt export",
             path_);
  RT_REQUIRE(n <= static_cast<std::uint64_t>(size - 8), DataError,
             "{}: header length {} runs past the end of the file ({} bytes): not a safetensors file or truncated",
             path_, n, size);
  RT_REQUIRE(n <= kMaxHeaderBytes, DataError, "{}: header length {} exceeds the format's limit of {} bytes", path_, n,
             kMaxHeaderBytes);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  RT_REQUIRE(in, DataError, "{}: cannot read the {}-byte header", path_, n);
  data_start_ = 8 + static_cast<std::int64_t>(n);
  const std::int64_t data_bytes = size - data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError(fmt::format("{}: the {}-byte header is not JSON (error at byte {})", path_, n, e.byte));
  }
  RT_REQUIRE(header.is_object(), DataError, "{}: the header is JSON but not an object", path_);
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const nlohmann::json& v = item.value();
    if (name == kMetadataKey) {
      RT_REQUIRE(v.is_object(), DataError, "{}: __metadata__ is not an object", path_);
      for (const auto& [key, value] : v.items()) {
        RT_REQUIRE(value.is_string(), DataError, "{}: __metadata__ '{}' is not a string", path_, printable(key));
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    tensors_.push_back(parse_entry(path_, name, v, data_bytes));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::int64_t covered = 0;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const Entry& e = tensors_[i];
    RT_REQUIRE(e.begin >= covered, DataError, "{}: tensor '{}': data_offsets [{}, {}] overlap those of '{}' [{}, {}]",
               path_, printable(e.name), e.begin, e.end, printable(tensors_[i - 1].name), tensors_[i - 1].begin,
               tensors_[i - 1].end);
    RT_REQUIRE(e.begin == covered, DataError, "{}: data bytes [{}, {}) belong to no tensor (before '{}')", path_,
               covered, e.begin, printable(e.name));
    covered = e.end;
  }
  RT_REQUIRE(covered == data_bytes, DataError, "{}: data bytes [{}, {}) at the end belong to no tensor", path_, covered,
             data_bytes);
}

const SafetensorsFile::Entry* SafetensorsFile::find(std::string_view name) const {
  const auto it = std::find_if(tensors_.begin(), tensors_.end(), [&](const Entry& e) { return e.name == name; });
  return it == tensors_.end() ? nullptr : &*it;
}

std::vector<float> SafetensorsFile::read_f32(const Entry& e) const {
  const std::int64_t elem = dtype_bytes(e.dtype);
  RT_REQUIRE(e.dtype == "F32" || e.dtype == "F16" || e.dtype == "BF16", DataError,
             "{}: tensor '{}': dtype {} cannot be read as floats (F32, F16 or BF16)", path_, printable(e.name),
             e.dtype);
  const std::int64_t count = (e.end - e.begin) / elem;
  std::vector<float> out(static_cast<std::size_t>(count));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(data_start_ + e.begin);
  if (e.dtype == "F32") {
    in.read(reinterpret_cast<char*>(out.data()), e.end - e.begin);
  } else {
    std::vector<std::uint16_t> half(static_cast<std::size_t>(count));
    in.read(reinterpret_cast<char*>(half.data()), e.end - e.begin);
    for (std::size_t i = 0; i < half.size(); ++i)
      out[i] = e.dtype == "F16" ? f16_to_float(half[i]) : bf16_to_float(half[i]);
  }
  RT_REQUIRE(in, DataError, "{}: tensor '{}': cannot read its {} bytes", path_, printable(e.name), e.end - e.begin);
  return out;
}

}  // namespace ringtrain
