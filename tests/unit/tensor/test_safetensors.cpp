// safetensors files: a written file reads back bit for bit (names, shapes, metadata, aligned
// data), F16 and BF16 read as floats, and every kind of hostile file is one DataError line
// naming the file (and the tensor where one is at fault) instead of a crash or a wild read.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/tensor/safetensors.hpp"
#include "support/test_context.hpp"

namespace ringtrain {
namespace {

std::string temp_file(const std::string& name) {
  static const std::filesystem::path dir = test::temp_dir("safetensors");
  return (dir / name).string();
}

// A file from its parts: the header text, the data bytes and (when >= 0) a header length that
// differs from the text's.
std::string raw_file(const std::string& name, const std::string& header, const std::string& data,
                     std::int64_t claimed_length = -1) {
  const std::string path = temp_file(name);
  const std::uint64_t n = claimed_length >= 0 ? static_cast<std::uint64_t>(claimed_length) : header.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
  return path;
}

std::string error_of(const std::string& path) {
  try {
    const SafetensorsFile f(path);
    for (const auto& e : f.tensors()) f.read_f32(e);
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

// One line naming the file and what it is about.
void expect_error(const std::string& path, const std::vector<std::string>& needles) {
  const std::string msg = error_of(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "want '" << n << "' in: " << msg;
}

TEST(Safetensors, RoundTripKeepsNamesShapesValuesAndMetadata) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 1e-30f, -0.0f, 7.0f};
  const std::vector<float> b = {0.1f, 0.2f, 0.3f};
  const std::string path = temp_file("round.safetensors");
  write_safetensors(path, {{"z.weight", Shape{2, 3}, a.data()}, {"a.bias", Shape{3}, b.data()}},
                    {{"format", "pt"}, {"n_layer", "2"}});
  const SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "z.weight");  // data order is the order written
  EXPECT_EQ(f.tensors()[0].shape, (Shape{2, 3}));
  EXPECT_EQ(f.tensors()[0].dtype, "F32");
  EXPECT_EQ(f.find("a.bias")->shape, (Shape{3}));
  EXPECT_EQ(f.find("missing"), nullptr);
  const std::vector<float> ra = f.read_f32(*f.find("z.weight"));
  ASSERT_EQ(ra.size(), a.size());
  EXPECT_EQ(std::memcmp(ra.data(), a.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(f.read_f32(*f.find("a.bias")), b);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"n_layer", "2"}}));
  std::ifstream in(path, std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data section starts 8-byte aligned";
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << "temporary file left: " << entry.path();
}

TEST(Safetensors, HalfPrecisionTensorsReadAsFloats) {
  const std::uint16_t f16[] = {float_to_f16(1.5f), float_to_f16(-0.25f)};
  const std::uint16_t bf16[] = {float_to_bf16(3.0f), float_to_bf16(-1024.0f)};
  std::string data(reinterpret_cast<const char*>(f16), 4);
  data.append(reinterpret_cast<const char*>(bf16), 4);
  const SafetensorsFile f(raw_file("half.safetensors",
                                   R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                                   R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})",
                                   data));
  EXPECT_EQ(f.read_f32(*f.find("h")), (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(f.read_f32(*f.find("b")), (std::vector<float>{3.0f, -1024.0f}));
}

TEST(Safetensors, ScalarsAndEmptyTensorsAreValid) {
  const SafetensorsFile f(raw_file("edge.safetensors",
                                   R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                                   R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]}})",
                                   std::string(4, '\0')));
  EXPECT_EQ(f.read_f32(*f.find("s")).size(), 1u);
  EXPECT_TRUE(f.read_f32(*f.find("e")).empty());
}

TEST(Safetensors, HostileFilesAreOneLineErrors) {
  const std::string four(4, '\0');
  const auto one = [](const std::string& entry) { return R"({"t":)" + entry + "}"; };
  expect_error(temp_file("absent.safetensors"), {"cannot open"});
  std::filesystem::create_directories(temp_file("folder"));
  expect_error(temp_file("folder"), {"not a regular file"});
  {
    const std::string path = temp_file("short.safetensors");
    std::ofstream(path) << "abc";
    expect_error(path, {"too short"});
  }
  expect_error(raw_file("long.safetensors", "{}", "", 1 << 20), {"header length 1048576", "past the end"});
  {
    const std::string path = temp_file("checkpoint.h5");  // a checkpoint given by mistake
    std::ofstream(path, std::ios::binary) << std::string("\x89HDF\r\n\x1a\n", 8) << std::string(64, '\0');
    expect_error(path, {"an HDF5 file", "train.resume", "ckpt export"});
  }
  expect_error(raw_file("huge.safetensors", "{}", "", INT64_MAX), {"past the end"});
  expect_error(raw_file("text.safetensors", "this is not json", ""), {"not JSON"});
  expect_error(raw_file("array.safetensors", "[1, 2]", ""), {"not an object"});
  expect_error(raw_file("dtype.safetensors", one(R"({"dtype":"F7","shape":[1],"data_offsets":[0,4]})"), four),
               {"tensor 't'", "unknown dtype 'F7'"});
  expect_error(raw_file("fields.safetensors", one(R"({"dtype":"F32","shape":[1]})"), four),
               {"tensor 't'", "data_offsets"});
  expect_error(raw_file("mismatch.safetensors", one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), four),
               {"tensor 't'", "shape [2] of F32 needs 8 bytes", "hold 4"});
  expect_error(raw_file("overflow.safetensors",
                        one(R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]})"), four),
               {"tensor 't'", "too many"});
  expect_error(raw_file("negative.safetensors", one(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), four),
               {"tensor 't'", "non-negative"});
  expect_error(raw_file("range.safetensors", one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), four),
               {"tensor 't'", "out of range", "4 bytes"});
  expect_error(raw_file("reversed.safetensors", one(R"({"dtype":"F32","shape":[0],"data_offsets":[4,0]})"), four),
               {"tensor 't'", "out of range"});
  expect_error(raw_file("overlap.safetensors",
                        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        std::string(8, '\0')),
               {"tensor 'b'", "overlap", "'a'"});
  expect_error(
      raw_file("hole.safetensors", one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), std::string(8, '\0')),
      {"[0, 4)", "belong to no tensor"});
  expect_error(
      raw_file("tail.safetensors", one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), std::string(12, '\0')),
      {"[4, 12)", "belong to no tensor"});
  expect_error(raw_file("meta.safetensors", R"({"__metadata__":{"n_layer":2}})", ""), {"__metadata__ 'n_layer'"});
  // Text from the file stays on one line and cannot drive a terminal.
  expect_error(
      raw_file("newline.safetensors",
               one(R"({"dtype":"F7\n\u001b[2J","shape":[1],"data_offsets":[0,4]})").replace(3, 0, "\\n"), four),
      {"tensor 't\\x0a'", "unknown dtype 'F7\\x0a\\x1b[2J'"});
  expect_error(raw_file("meta-key.safetensors", R"({"__metadata__":{"a\nb":1}})", ""), {"__metadata__ 'a\\x0ab'"});
  // Values quoted flat or by what they are, never serialized whole: a crafted header nests a
  // million deep (serializing it recursed until the stack overflowed).
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  expect_error(
      raw_file("deep-dtype.safetensors", one(R"({"dtype":)" + deep + R"(,"shape":[1],"data_offsets":[0,4]})"), four),
      {"tensor 't'", "unknown dtype 'an array of 1 value'"});
  expect_error(
      raw_file("deep-shape.safetensors", one(R"({"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]})"), four),
      {"tensor 't'", "shape an array of 1 value is not a list"});
  expect_error(
      raw_file("deep-offsets.safetensors", one(R"({"dtype":"F32","shape":[1],"data_offsets":)" + deep + "}"), four),
      {"tensor 't'", "data_offsets an array of 1 value is not two"});
  expect_error(raw_file("flat-shape.safetensors", one(R"({"dtype":"F32","shape":[1,"x"],"data_offsets":[0,4]})"), four),
               {"shape [1,\"x\"] is not a list"});
  expect_error(
      raw_file("ints.safetensors", one(R"({"dtype":"I64","shape":[1],"data_offsets":[0,8]})"), std::string(8, '\0')),
      {"tensor 't'", "I64 cannot be read as floats"});
}

}  // namespace
}  // namespace ringtrain
