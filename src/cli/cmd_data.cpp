// `ringtrain data convert`: IDX(.gz) images + labels -> HDF5 (rank 0 converts, others wait).
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/data/convert.hpp"
#include "ringtrain/runtime/collective.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {

Command add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Dataset tools");
  data->require_subcommand(1);
  auto* convert = data->add_subcommand("convert", "Convert IDX(.gz) images and labels to one HDF5 file");
  auto o = std::make_shared<ConvertOptions>();
  auto classes = std::make_shared<std::string>("none");
  convert->add_option("--images", o->images_path, "IDX(.gz) images [N,H,W] or [N,C,H,W]")->required();
  convert->add_option("--labels", o->labels_path, "IDX(.gz) labels [N]")->required();
  convert->add_option("-o,--output", o->output_path, "HDF5 file to write")->required();
  convert->add_option("--classes", *classes, "class names to store: fashion-mnist or none")
      ->check(CLI::IsMember({"fashion-mnist", "none"}));
  convert->add_option("--chunk", o->chunk_samples, "samples per HDF5 chunk")->check(CLI::PositiveNumber);
  return [convert, o, classes](Context& ctx) {
    if (!convert->parsed()) return 0;
    run_collectively(ctx, [&] {
      if (ctx.world_rank() != 0) return;
      if (*classes == "fashion-mnist") o->class_names = fashion_mnist_classes();
      const ConvertResult r = convert_idx_to_hdf5(*o);
      std::string shape;
      for (auto d : r.sample_shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      log::info("wrote {}: {} samples of [{}]", o->output_path, r.samples, shape);
    });
    return 0;
  };
}

}  // namespace ringtrain
