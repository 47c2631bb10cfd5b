// libFuzzer target for safetensors files, what `model.init_from` reads (files from the PyTorch
// world, made by anyone): a small GPT's own export edited as the input says (an entry's dtype,
// shape, data_offsets or name replaced by other JSON, entries dropped or added, __metadata__
// changed, the header length or the data section cut or grown), or the input's bytes as the
// whole file. The file is then opened, each tensor read as floats, and imported into the GPT.
// Each step either succeeds or throws a ringtrain error of one line that names the file;
// anything else (a crash, a sanitizer report, another exception) is a finding.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "fuzz/fuzz_support.hpp"
#include "ringtrain/core/config.hpp"
#include "ringtrain/nn/gpt_safetensors.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/tensor/safetensors.hpp"

namespace {

using namespace ringtrain;
using nlohmann::json;

// The model files are imported into, and its export split into header and data.
struct Target {
  std::unique_ptr<Config> model_config;  // the [model] table `model` was built from
  std::unique_ptr<Model> model;
  std::vector<float> params;
  json header;
  std::string data;
};

Target& target() {
  static Target t;
  return t;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Any JSON value, nested at most `depth` more levels.
json any_value(FuzzedDataProvider& in, int depth) {
  switch (in.ConsumeIntegralInRange<int>(0, depth > 0 ? 7 : 5)) {
    case 0: return nullptr;
    case 1: return in.ConsumeBool();
    case 2: return in.ConsumeIntegral<std::int64_t>();
    case 3: return in.ConsumeIntegral<std::uint64_t>();
    case 4: return in.ConsumeFloatingPoint<double>();
    case 5: return in.ConsumeRandomLengthString(24);
    case 6: {
      json a = json::array();
      for (int n = in.ConsumeIntegralInRange<int>(0, 4); n > 0; --n) a.push_back(any_value(in, depth - 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int n = in.ConsumeIntegralInRange<int>(0, 3); n > 0; --n)
        o[in.ConsumeRandomLengthString(12)] = any_value(in, depth - 1);
      return o;
    }
  }
}

// A count as files get them wrong: small, at a boundary, or anything.
json a_count(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return in.ConsumeIntegralInRange<std::uint64_t>(0, 4096);
    case 1: return in.PickValueInArray<std::uint64_t>({0, 1, 1ULL << 31, 1ULL << 62, INT64_MAX, UINT64_MAX});
    case 2: return in.ConsumeIntegral<std::int64_t>();
    default: return any_value(in, 2);
  }
}

// One edit of the header: a field of an entry, an entry's name, an entry added or dropped.
void edit_header(FuzzedDataProvider& in, json& header) {
  std::vector<std::string> names;
  for (const auto& item : header.items()) names.push_back(item.key());
  const std::string name =
      names.empty() ? std::string("t") : names[in.ConsumeIntegralInRange<std::size_t>(0, names.size() - 1)];
  json& entry = header[name];
  if (!entry.is_object()) entry = json::object();  // an earlier edit's value: its fields can be set now
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      entry["dtype"] =
          in.ConsumeBool()
              ? json(in.PickValueInArray<const char*>({"F32", "F16", "BF16", "I64", "U8", "F8_E4M3", "F64", "F4", ""}))
              : any_value(in, 3);
      break;
    case 1: {
      json shape = json::array();
      for (int n = in.ConsumeIntegralInRange<int>(0, 4); n > 0; --n) shape.push_back(a_count(in));
      entry["shape"] = in.ConsumeBool() ? shape : any_value(in, 3);
      break;
    }
    case 2:
      entry["data_offsets"] = in.ConsumeBool() ? json::array({a_count(in), a_count(in)}) : any_value(in, 3);
      break;
    case 3: {  // renamed: to arbitrary bytes, without GPT-2's prefix, or onto another entry
      const json moved = entry;
      header.erase(name);
      std::string to = in.ConsumeRandomLengthString(40);
      if (to.empty() && name.rfind("transformer.", 0) == 0) to = name.substr(std::strlen("transformer."));
      header[to] = moved;
      break;
    }
    case 4: header.erase(name); break;
    case 5: header[in.ConsumeRandomLengthString(40)] = any_value(in, 3); break;
    case 6: entry.erase(in.PickValueInArray<const char*>({"dtype", "shape", "data_offsets"})); break;
    default:
      header["__metadata__"] =
          in.ConsumeBool() ? any_value(in, 3) : json{{in.ConsumeRandomLengthString(12), any_value(in, 1)}};
  }
}

// The export edited: header entries, then the header length and the data section.
std::string edited_file(FuzzedDataProvider& in) {
  json header = target().header;
  for (int edits = in.ConsumeIntegralInRange<int>(1, 4); edits > 0; --edits) edit_header(in, header);
  const std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  std::uint64_t length = text.size();
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) length = in.ConsumeIntegral<std::uint64_t>();
  std::string data = target().data;
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: data.resize(in.ConsumeIntegralInRange<std::size_t>(0, data.size())); break;
    case 1: data.append(in.ConsumeIntegralInRange<std::size_t>(1, 64), '\x7f'); break;
    default: break;
  }
  std::string file(8, '\0');
  std::memcpy(file.data(), &length, 8);
  return file + text + data;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Target& t = target();
  Config config = Config::parse(
      "[model]\nfamily = \"gpt\"\nn_layer = 1\nn_head = 1\nn_embd = 4\nblock_size = 4\nvocab_size = 5\n"
      "tie_embeddings = false\nbias = true\n",
      "fuzz-gpt.toml");
  t.model_config = std::make_unique<Config>(config.section("model"));
  Config& model_config = *t.model_config;
  t.model = build_model(model_config, Shape{4});
  t.model->init_params(1);
  t.params.resize(static_cast<std::size_t>(t.model->arena_elements()));
  const std::string exported = (fuzz::scratch_dir("safetensors") / "export.safetensors").string();
  export_gpt_safetensors(model_config, *t.model, exported);
  const std::string bytes = file_bytes(exported);
  std::uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  t.header = json::parse(bytes.substr(8, length));
  t.data = bytes.substr(8 + length);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string file = in.ConsumeBool() ? edited_file(in) : in.ConsumeRemainingBytesAsString();
  const std::string path = (fuzz::scratch_dir("safetensors") / "input.safetensors").string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(file.data(), static_cast<std::streamsize>(file.size()));
  std::optional<SafetensorsFile> opened;
  if (!fuzz::clean_read("header", path, true, [&] { opened.emplace(path); })) return 0;
  for (const SafetensorsFile::Entry& e : opened->tensors())
    fuzz::clean_read("tensor", path, true, [&] { opened->read_f32(e); });
  Target& t = target();
  fuzz::clean_read("import", path, true,
                   [&] { import_gpt_safetensors(path, *t.model_config, *t.model, t.params.data()); });
  return 0;
}
