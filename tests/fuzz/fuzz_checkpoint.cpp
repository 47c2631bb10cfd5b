// libFuzzer target for the checkpoint reader: a valid checkpoint (format 2, written here by
// write_checkpoint_file on one rank, or the format 1 fixture tests/data/ckpt-v1) is edited as
// the input says (tests/fuzz/h5_craft.hpp: attributes and datasets of any type and shape,
// edge values, groups and links in their place), then read the three ways ringtrain reads a
// checkpoint: `ckpt inspect --verify`, the layout check before a resume, and the collective
// read of a resume. Each either succeeds or throws a ringtrain error of one line that names
// the file; anything else (a crash, a sanitizer report, another exception, an allocation
// beyond libFuzzer's -malloc_limit_mb) is a finding.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "fuzz/h5_craft.hpp"
#include "ringtrain/ckpt/checkpoint.hpp"
#include "ringtrain/runtime/context.hpp"

#ifndef RINGTRAIN_SOURCE_DIR
#error "RINGTRAIN_SOURCE_DIR must name the source tree (for the format 1 fixture)"
#endif

namespace {

using namespace ringtrain;

// A checkpoint to start from: its bytes, and the buffers a run that resumes from it holds.
struct BaseCheckpoint {
  std::string bytes;
  std::vector<CheckpointBuffer> buffers;
  std::vector<std::vector<float>> storage;  // what the buffers point at
  fuzz::CraftTargets targets;
};

std::vector<BaseCheckpoint>& bases() {
  static std::vector<BaseCheckpoint> b;
  return b;
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "fuzz_checkpoint: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// Every root attribute a reader looks at, and a dataset's checksum.
fuzz::CraftTargets targets_of(const std::vector<CheckpointBuffer>& buffers) {
  fuzz::CraftTargets t;
  for (const auto& b : buffers) t.datasets.push_back(b.name);
  t.attributes = {"format",
                  "format_version",
                  "ringtrain_version",
                  "step",
                  "epoch",
                  "step_in_epoch",
                  "global_batch",
                  "seed",
                  "world_size",
                  "optimizer_steps",
                  "optimizer",
                  "data_strategy",
                  "rng",
                  "checksum_algorithm",
                  "config",
                  "precision",
                  "loss_scale",
                  "loss_scale_good_steps",
                  "skipped_steps",
                  "wall_time",
                  "meta_checksum",
                  "checksum"};
  return t;
}

// The buffers a file holds, as a run that fits it would pass them (2-D datasets per rank).
BaseCheckpoint base_from(const std::filesystem::path& path) {
  BaseCheckpoint b;
  b.bytes = read_bytes(path);
  std::vector<CheckpointDataset> datasets;
  inspect_checkpoint_file(path, true, &datasets);
  b.storage.resize(datasets.size());
  for (std::size_t i = 0; i < datasets.size(); ++i) {
    const CheckpointDataset& d = datasets[i];
    CheckpointBuffer buf;
    buf.name = d.name;
    buf.per_rank = d.dims.size() == 2;
    buf.numel = d.dims.back();
    b.storage[i].resize(static_cast<std::size_t>(buf.numel));
    buf.data = b.storage[i].data();
    b.buffers.push_back(buf);
  }
  b.targets = targets_of(b.buffers);
  return b;
}

// A format 2 checkpoint with a replicated, a sharded (owned whole by the one rank) and a
// per-rank buffer, as a run writes them.
std::filesystem::path write_v2_checkpoint(const Context& ctx, const std::filesystem::path& dir) {
  std::vector<float> params(300, 0.5f), velocity(260, -0.25f), rows(8, 2.0f);
  std::vector<CheckpointBuffer> buffers = {{"params", params.data(), static_cast<std::int64_t>(params.size())},
                                           {"optimizer/velocity",
                                            velocity.data(),
                                            static_cast<std::int64_t>(velocity.size()),
                                            false,
                                            false,
                                            true,
                                            {{0, static_cast<std::int64_t>(velocity.size())}}},
                                           {"buffers", rows.data(), static_cast<std::int64_t>(rows.size()), true}};
  CheckpointMeta meta;
  meta.step = 12;
  meta.epoch = 1;
  meta.step_in_epoch = 2;
  meta.global_batch = 32;
  meta.seed = 7;
  meta.optimizer_steps = 12;
  meta.optimizer = "sgd";
  meta.data_strategy = "memory";
  meta.config = "[train]\nsteps = 100\n";
  const std::filesystem::path path = dir / "base-v2.h5";
  write_checkpoint_file(ctx, path, meta, buffers);
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const fuzz::FuzzProcess& p = fuzz::start_process(argc, argv, "checkpoint");
  bases().push_back(base_from(write_v2_checkpoint(*p.ctx, p.dir)));
  bases().push_back(base_from(std::filesystem::path(RINGTRAIN_SOURCE_DIR) / "tests/data/ckpt-v1/ckpt-v1.h5"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::FuzzProcess& p = fuzz::process();
  FuzzedDataProvider in(data, size);
  BaseCheckpoint& base = bases()[in.ConsumeIntegralInRange<std::size_t>(0, bases().size() - 1)];
  const std::string path = (p.dir / "edited.h5").string();
  write_bytes(path, base.bytes);
  {
    const h5::ErrorContext where(path);
    h5::File file(RT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)));
    fuzz::H5Craft(in).edit(file, base.targets, 6);
  }
  fuzz::keep_for_replay(path, "checkpoint", data, size);
  std::vector<CheckpointDataset> datasets;
  fuzz::clean_read("ckpt inspect --verify", path, true, [&] { inspect_checkpoint_file(path, true, &datasets); });
  fuzz::clean_read("layout check", path, true, [&] { check_checkpoint_layout(path, base.buffers); });
  fuzz::clean_read("resume read", path, true, [&] { read_checkpoint_file(*p.ctx, path, base.buffers); });
  return 0;
}
