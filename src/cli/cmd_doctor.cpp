// `ringtrain doctor [--json] [--require-gpu]`: what this installation and launch look like
// (library versions, visible GPUs) and checks with a verdict each (ok, warn, fail, skip),
// over every launched rank. Exit status 1 when a check fails; no GPU is a skip unless required.
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif
#include <hdf5.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/number_checks.hpp"
#include "cli/cuda_versions.hpp"
#include "cuda/gpu_backend.hpp"
#include "check/h5_check.hpp"
#include "monitor/nvml_loader.hpp"
#include "nn/layer_maker.hpp"
#include "check/mpi_check.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/nccl.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/core/version.hpp"
#include "ringtrain/runtime/context.hpp"
#include "ringtrain/runtime/slurm.hpp"
#include "tensor/blas.hpp"

namespace ringtrain {
namespace {

struct DoctorOptions {
  bool json = false;
  bool require_gpu = false;
  int selftest_mib = 64;  // 0: no allreduce self-test
  int selftest_iterations = 5;
};

enum class Verdict { ok, warn, fail, skip };
const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::ok: return "ok";
    case Verdict::warn: return "warn";
    case Verdict::fail: return "fail";
    case Verdict::skip: return "skip";
  }
  return "?";
}

struct Check {
  std::string name;
  Verdict verdict;
  std::string detail;
};

// What each rank contributes to the checks that differ across ranks and nodes.
struct RankFacts {
  int gpus = 0;        // visible to this rank
  int local_size = 0;  // ranks on this rank's node
  int driver = 0;      // CUDA version the driver supports (0: none)
  int node_hash = 0;   // node name, hashed: which ranks share a node
  int gpu_hash = 0;    // PCI id of the GPU this rank binds (local rank mod visible), 0: none
};
constexpr std::size_t kFactFields = 5;

int hash31(const std::string& s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return static_cast<int>(h & 0x7fffffffu) | 1;  // never 0, which means "none"
}

std::string cuda_version_text(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }
std::string dotted(int v, int major_div, int minor_div) {
  return fmt::format("{}.{}.{}", v / major_div, v % major_div / minor_div, v % minor_div);
}

std::string compiler() {
#if defined(__clang__)
  return fmt::format("Clang {}", __clang_version__);
#elif defined(__GNUC__)
  return fmt::format("GCC {}", __VERSION__);
#else
  return __VERSION__;
#endif
}

const char* thread_level_name(int level) {
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  return "MPI_THREAD_SINGLE";
}

// "yes", "no" or "unknown" (MPI libraries other than Open MPI have no standard query).
std::string cuda_aware_mpi() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1 ? "yes" : "no (compiled in, off at run time)";
#elif defined(MPIX_CUDA_AWARE_SUPPORT)
  return "no";
#else
  return "unknown";
#endif
}

struct Versions {
  CudaVersions cuda;
  std::string nccl, mpi_library, mpi_standard, hdf5, blas, sgemm, nvml_driver, nvml_why;
  int thread_level = MPI_THREAD_SINGLE;
};

Versions collect_versions(const NvmlTelemetry& nvml) {
  Versions v;
  if (const GpuBackend* gpu = compiled_gpu_backend()) v.cuda = gpu->versions();
  try {
    v.nccl = nccl_version();
  } catch (const NotCompiled&) {
    v.nccl = "not compiled";
  }
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0, major = 0, minor = 0;
  RT_MPI_CHECK(MPI_Get_library_version(library, &length));
  v.mpi_library = std::string(library, static_cast<std::size_t>(length)).c_str();  // some count the NUL
  while (!v.mpi_library.empty() && std::isspace(static_cast<unsigned char>(v.mpi_library.back())))
    v.mpi_library.pop_back();
  RT_MPI_CHECK(MPI_Get_version(&major, &minor));
  v.mpi_standard = fmt::format("{}.{}", major, minor);
  RT_MPI_CHECK(MPI_Query_thread(&v.thread_level));
  unsigned h5_major = 0, h5_minor = 0, h5_release = 0;
  RT_H5_CHECK(H5get_libversion(&h5_major, &h5_minor, &h5_release));
#ifdef H5_HAVE_PARALLEL
  v.hdf5 = fmt::format("{}.{}.{} (parallel)", h5_major, h5_minor, h5_release);
#else
  v.hdf5 = fmt::format("{}.{}.{} (serial)", h5_major, h5_minor, h5_release);
#endif
  v.blas = blas::openblas_description();
  v.sgemm = blas::describe();
  v.nvml_driver = nvml.driver_version();
  v.nvml_why = nvml.unavailable_reason();
  return v;
}

nlohmann::ordered_json versions_json(const Versions& v) {
  const CudaVersions& c = v.cuda;
  auto cuda = [&](bool known, const std::string& text) -> nlohmann::ordered_json {
    if (!c.compiled) return "not compiled";
    return known ? nlohmann::ordered_json(text) : nlohmann::ordered_json(nullptr);
  };
  return {{"ringtrain", version()},
          {"compiler", compiler()},
          {"mpi", v.mpi_library},
          {"mpi_standard", v.mpi_standard},
          {"mpi_thread_level", thread_level_name(v.thread_level)},
          {"hdf5", v.hdf5},
          {"blas", v.blas},
          {"sgemm", v.sgemm},
          {"cpu_conv", cpu_conv2d_library()},
          {"cuda_runtime", cuda(c.runtime > 0, cuda_version_text(c.runtime))},
          {"cuda_driver", cuda(c.driver > 0, cuda_version_text(c.driver))},
          {"cublas", cuda(c.cublas > 0, dotted(c.cublas, 10000, 100))},
          {"cudnn", c.cudnn < 0 ? nlohmann::ordered_json(c.compiled ? "not found at build time" : "not compiled")
                                : nlohmann::ordered_json(dotted(c.cudnn, 10000, 100))},
          {"cudnn_frontend", !c.compiled                ? std::string("not compiled")
                             : c.cudnn_frontend.empty() ? std::string("not found at build time (attention unfused)")
                                                        : c.cudnn_frontend + " (fused attention)"},
          {"nccl", v.nccl},
          {"nvidia_driver",
           v.nvml_driver.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v.nvml_driver)},
          {"nvml", v.nvml_why.empty() ? std::string("loaded") : "not loaded: " + v.nvml_why}};
}

// Ranks' facts, gathered to every rank (a sum of rows each rank fills its own of).
std::vector<RankFacts> gather_facts(Communicator& comm, const Context& ctx, const RankFacts& mine) {
  const std::size_t world = static_cast<std::size_t>(ctx.world_size());
  std::vector<std::int32_t> rows(world * kFactFields, 0);
  const std::int32_t own[kFactFields] = {mine.gpus, mine.local_size, mine.driver, mine.node_hash, mine.gpu_hash};
  std::copy(own, own + kFactFields, rows.begin() + static_cast<std::ptrdiff_t>(ctx.world_rank() * kFactFields));
  comm.allreduce_sum(rows.data(), rows.size(), DType::i32);
  std::vector<RankFacts> out(world);
  for (std::size_t r = 0; r < world; ++r) {
    const std::int32_t* f = &rows[r * kFactFields];
    out[r] = RankFacts{f[0], f[1], f[2], f[3], f[4]};
  }
  return out;
}

struct SelfTest {
  bool ran = false;
  bool correct = true;
  std::size_t bytes = 0;
  int iterations = 0;
  double median_s = 0.0;
  std::string communicator;
  double algbw() const { return static_cast<double>(bytes) / median_s / 1e9; }
  double busbw(int n) const { return algbw() * 2.0 * (n - 1) / n; }
};

// Allreduce of `mib` MiB of f32 over every rank with the ring training uses; the warm-up
// result is verified (each rank adds rank + 1), the timed calls are rank 0's, after a barrier.
SelfTest allreduce_selftest(const Context& ctx, Communicator& check_comm, const DoctorOptions& o) {
  SelfTest t;
  if (ctx.world_size() < 2 || o.selftest_mib <= 0) return t;
  auto comm = make_mpi_communicator(ctx, AllreduceAlgo::ring);
  const std::size_t count = static_cast<std::size_t>(o.selftest_mib) * 1024 * 1024 / sizeof(float);
  std::vector<float> data(count, static_cast<float>(ctx.world_rank() + 1));
  comm->allreduce_sum(data.data(), count, DType::f32);
  const int n = ctx.world_size();
  const float expected = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;
  std::int32_t wrong = std::any_of(data.begin(), data.end(), [&](float x) { return x != expected; }) ? 1 : 0;
  check_comm.allreduce_sum(&wrong, 1, DType::i32);
  std::vector<double> times;
  for (int i = 0; i < o.selftest_iterations; ++i) {
    comm->barrier();
    const auto start = std::chrono::steady_clock::now();
    comm->allreduce_sum(data.data(), count, DType::f32);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  t.ran = true;
  t.correct = wrong == 0;
  t.bytes = count * sizeof(float);
  t.iterations = o.selftest_iterations;
  t.median_s = times[times.size() / 2];
  t.communicator = std::string(comm->name());
  return t;
}

std::string ranks_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return ranks.size() > 8 ? out + fmt::format(", ... ({} ranks)", ranks.size()) : out;
}

// Rank 0: the verdicts, from this rank's versions and every rank's facts.
std::vector<Check> run_checks(const Versions& v, const std::vector<RankFacts>& facts, const std::string& no_gpu_why,
                              const SelfTest& selftest, const Context& ctx, const DoctorOptions& o) {
  std::vector<Check> checks;
  const CudaVersions& c = v.cuda;
  const int world = ctx.world_size();
  std::vector<int> with_gpu, without_gpu, old_driver;
  for (int r = 0; r < world; ++r) {
    const RankFacts& f = facts[static_cast<std::size_t>(r)];
    (f.gpus > 0 ? with_gpu : without_gpu).push_back(r);
    if (f.gpus > 0 && f.driver < c.runtime) old_driver.push_back(r);
  }
  const Verdict missing_gpu = o.require_gpu ? Verdict::fail : Verdict::skip;

  // GPUs against ranks: every rank should have its own GPU and every GPU a rank.
  if (with_gpu.empty()) {
    checks.push_back({"gpus", missing_gpu,
                      fmt::format("no GPU visible on any rank ({}){}", no_gpu_why,
                                  o.require_gpu ? "" : ": CPU ranks (--require-gpu makes this a failure)")});
  } else if (!without_gpu.empty()) {
    checks.push_back({"gpus", o.require_gpu ? Verdict::fail : Verdict::warn,
                      fmt::format("ranks {} see no GPU while {} do", ranks_list(without_gpu), with_gpu.size())});
  } else {
    std::map<std::pair<int, int>, std::vector<int>> by_gpu;  // (node, GPU) -> ranks
    std::map<int, std::pair<int, int>> by_node;              // node -> (ranks, most GPUs one rank sees)
    for (int r = 0; r < world; ++r) {
      const RankFacts& f = facts[static_cast<std::size_t>(r)];
      by_gpu[{f.node_hash, f.gpu_hash}].push_back(r);
      by_node[f.node_hash] = {f.local_size, std::max(by_node[f.node_hash].second, f.gpus)};
    }
    std::string shared, idle;
    for (const auto& [key, ranks] : by_gpu)
      if (ranks.size() > 1)
        shared += fmt::format("{}ranks {} share one GPU", shared.empty() ? "" : "; ", ranks_list(ranks));
    for (const auto& [node, counts] : by_node)
      if (counts.second > counts.first)
        idle += fmt::format("{}a node with {} GPUs runs {} rank{}", idle.empty() ? "" : "; ", counts.second,
                            counts.first, counts.first == 1 ? "" : "s");
    if (!shared.empty())
      checks.push_back({"gpus", Verdict::warn, shared + " (more ranks per node than GPUs: they take turns)"});
    else if (!idle.empty())
      checks.push_back({"gpus", Verdict::warn, idle + " (GPUs left idle; launch one rank per GPU)"});
    else
      checks.push_back(
          {"gpus", Verdict::ok, fmt::format("each of the {} rank{} has its own GPU", world, world == 1 ? "" : "s")});
  }

  if (!c.compiled) {
    checks.push_back({"cuda driver", missing_gpu, "CUDA not compiled (RINGTRAIN_WITH_CUDA=OFF)"});
  } else if (with_gpu.empty()) {
    checks.push_back(
        {"cuda driver", missing_gpu, fmt::format("{} (runtime CUDA {})", no_gpu_why, cuda_version_text(c.runtime))});
  } else if (!old_driver.empty()) {
    checks.push_back(
        {"cuda driver", Verdict::fail,
         fmt::format("ranks {}: the driver supports CUDA {} but ringtrain needs {}: update the driver",
                     ranks_list(old_driver), cuda_version_text(facts[static_cast<std::size_t>(old_driver[0])].driver),
                     cuda_version_text(c.runtime))});
  } else {
    checks.push_back({"cuda driver", Verdict::ok,
                      fmt::format("driver supports CUDA {} >= runtime {}", cuda_version_text(facts[0].driver),
                                  cuda_version_text(c.runtime))});
  }

  if (!c.compiled) {
    checks.push_back({"cuda libraries", Verdict::skip, "CUDA not compiled"});
  } else {
    const int major = c.runtime / 1000;
    std::vector<std::string> wrong;
    if (c.cublas / 10000 != major)
      wrong.push_back(fmt::format("cuBLAS {} is for CUDA {}", dotted(c.cublas, 10000, 100), c.cublas / 10000));
    if (c.cudnn >= 0 && c.cudnn_cudart / 1000 != major)
      wrong.push_back(fmt::format("cuDNN was built for CUDA {}", cuda_version_text(c.cudnn_cudart)));
    std::string joined;
    for (const auto& w : wrong) joined += (joined.empty() ? "" : "; ") + w;
    checks.push_back(wrong.empty() ? Check{"cuda libraries", Verdict::ok,
                                           fmt::format("cuBLAS{} built for CUDA {} like the runtime (NCCL {})",
                                                       c.cudnn >= 0 ? " and cuDNN" : "", major, v.nccl)}
                                   : Check{"cuda libraries", Verdict::fail,
                                           joined + fmt::format(", the runtime is CUDA {}", major)});
  }

  if (!v.nvml_why.empty())
    checks.push_back({"gpu telemetry", with_gpu.empty() ? Verdict::skip : Verdict::warn,
                      fmt::format("no GPU telemetry ({}): monitoring samples CPU and memory only", v.nvml_why)});
  else
    checks.push_back({"gpu telemetry", Verdict::ok, fmt::format("NVML loaded, NVIDIA driver {}", v.nvml_driver)});

  if (v.thread_level == MPI_THREAD_MULTIPLE)
    checks.push_back({"mpi thread level", Verdict::ok, "MPI_THREAD_MULTIPLE: gradients reduce during backward"});
  else
    checks.push_back(
        {"mpi thread level", Verdict::warn,
         fmt::format("{}: comm.overlap falls back to reducing after backward", thread_level_name(v.thread_level))});

  const std::string aware = cuda_aware_mpi();
  const bool nccl = v.nccl != "not compiled";
  if (aware == "yes")
    checks.push_back({"cuda-aware mpi", Verdict::ok, "yes: MPI accepts device buffers"});
  else if (with_gpu.empty())
    checks.push_back({"cuda-aware mpi", Verdict::skip, fmt::format("{}: not needed by CPU ranks", aware)});
  else
    checks.push_back({"cuda-aware mpi", nccl ? Verdict::ok : Verdict::warn,
                      fmt::format("{}: {}", aware,
                                  nccl ? "GPU gradients go through NCCL"
                                       : "without NCCL, GPU buffers are staged through host memory")});

  if (SlurmInfo slurm = slurm_info(); !slurm.active())
    checks.push_back({"slurm", Verdict::skip, "not under Slurm"});
  else if (slurm.ntasks > 0 && slurm.ntasks != world)
    checks.push_back({"slurm", Verdict::warn,
                      fmt::format("job {}: Slurm has {} tasks but MPI {} ranks (mpirun -np inside the job?)",
                                  slurm.run_id(), slurm.ntasks, world)});
  else
    checks.push_back({"slurm", Verdict::ok, slurm.describe()});

  if (!selftest.ran)
    checks.push_back(
        {"allreduce", Verdict::skip, world < 2 ? "1 rank: nothing to exchange" : "self-test off (--selftest-mib 0)"});
  else if (!selftest.correct)
    checks.push_back(
        {"allreduce", Verdict::fail, fmt::format("{}: wrong sums on at least one rank", selftest.communicator)});
  else
    checks.push_back({"allreduce", Verdict::ok,
                      fmt::format("{} MiB over {} ranks ({}): median {:.2f} ms, algbw {:.2f} GB/s, busbw {:.2f} GB/s",
                                  selftest.bytes >> 20, world, selftest.communicator, 1e3 * selftest.median_s,
                                  selftest.algbw(), selftest.busbw(world))});
  return checks;
}

int report(const Context& ctx, const Versions& v, const std::vector<VisibleGpu>& gpus, const std::string& no_gpu_why,
           const std::vector<std::string>& nodes, const std::vector<Check>& checks, const SelfTest& selftest,
           const DoctorOptions& o) {
  int counts[4] = {0, 0, 0, 0};
  for (const Check& c : checks) ++counts[static_cast<int>(c.verdict)];
  const int failed = counts[static_cast<int>(Verdict::fail)];
  const char* result = failed > 0 ? "fail" : counts[static_cast<int>(Verdict::warn)] > 0 ? "warn" : "ok";
  if (o.json) {
    nlohmann::ordered_json gpu_list = nlohmann::ordered_json::array();
    for (const VisibleGpu& g : gpus)
      gpu_list.push_back({{"ordinal", g.ordinal},
                          {"name", g.name},
                          {"memory_bytes", g.memory_bytes},
                          {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                          {"pci_bus_id", g.pci_bus_id}});
    nlohmann::ordered_json check_list = nlohmann::ordered_json::array();
    for (const Check& c : checks)
      check_list.push_back({{"name", c.name}, {"verdict", verdict_name(c.verdict)}, {"detail", c.detail}});
    nlohmann::ordered_json st = nullptr;
    if (selftest.ran)
      st = {{"bytes", selftest.bytes},
            {"iterations", selftest.iterations},
            {"median_ms", 1e3 * selftest.median_s},
            {"algbw_gbps", selftest.algbw()},
            {"busbw_gbps", selftest.busbw(ctx.world_size())},
            {"communicator", selftest.communicator},
            {"correct", selftest.correct}};
    log::info("{}", nlohmann::ordered_json{{"ranks", ctx.world_size()},
                                           {"nodes", nodes},
                                           {"versions", versions_json(v)},
                                           {"gpus", gpu_list},
                                           {"gpus_missing_reason", gpus.empty() ? no_gpu_why : ""},
                                           {"checks", check_list},
                                           {"selftest", st},
                                           {"result", result},
                                           {"failed", failed}}
                        .dump());
    return failed > 0 ? 1 : 0;
  }
  log::info("ringtrain doctor: {} rank{} on {} node{} ({})", ctx.world_size(), ctx.world_size() == 1 ? "" : "s",
            nodes.size(), nodes.size() == 1 ? "" : "s", join_node_names(nodes));
  log::info("versions");
  const nlohmann::ordered_json versions = versions_json(v);
  for (const auto& [key, value] : versions.items())
    log::info("  {:<17} {}", key,
              value.is_string()      ? value.get<std::string>()
              : key == "cuda_driver" ? "none (" + no_gpu_why + ")"
                                     : std::string("unknown (NVML not loaded)"));
  if (gpus.empty()) {
    log::info("gpus (rank 0): none ({})", no_gpu_why);
  } else {
    log::info("gpus (rank 0)");
    for (const VisibleGpu& g : gpus)
      log::info("  {}: {}, {:.0f} GiB, compute capability {}.{}, PCI {}", g.ordinal, g.name,
                static_cast<double>(g.memory_bytes) / (1u << 30), g.cc_major, g.cc_minor, g.pci_bus_id);
  }
  log::info("checks");
  for (const Check& c : checks) log::info("  {:<5} {:<17} {}", verdict_name(c.verdict), c.name, c.detail);
  log::info("result: {} ({} ok, {} warning{}, {} skipped, {} failed)", result, counts[0], counts[1],
            counts[1] == 1 ? "" : "s", counts[3], failed);
  return failed > 0 ? 1 : 0;
}

int run_doctor(Context& ctx, const DoctorOptions& o) {
  const NvmlTelemetry nvml;
  const Versions v = collect_versions(nvml);
  std::string no_gpu_why = "CUDA not compiled (RINGTRAIN_WITH_CUDA=OFF)";
  const GpuBackend* gpu = compiled_gpu_backend();
  const std::vector<VisibleGpu> gpus = gpu != nullptr ? gpu->visible_gpus(&no_gpu_why) : std::vector<VisibleGpu>{};
  RankFacts mine;
  mine.gpus = static_cast<int>(gpus.size());
  mine.local_size = ctx.local_size();
  mine.driver = v.cuda.driver;
  mine.node_hash = hash31(node_name());
  if (!gpus.empty()) mine.gpu_hash = hash31(gpus[static_cast<std::size_t>(ctx.local_rank()) % gpus.size()].pci_bus_id);

  auto comm = make_mpi_communicator(ctx, AllreduceAlgo::mpi);
  const std::vector<RankFacts> facts = gather_facts(*comm, ctx, mine);
  const std::vector<std::string> nodes = gather_node_names(ctx);
  const SelfTest selftest = allreduce_selftest(ctx, *comm, o);
  std::int32_t status = 0;
  if (ctx.world_rank() == 0)
    status = report(ctx, v, gpus, no_gpu_why, nodes, run_checks(v, facts, no_gpu_why, selftest, ctx, o), selftest, o);
  comm->broadcast(&status, sizeof(status), 0);  // every rank exits alike
  return status;
}

}  // namespace

Command add_doctor_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("doctor", "Versions, GPUs and launch checks over all ranks, with an allreduce self-test");
  auto o = std::make_shared<DoctorOptions>();
  cmd->add_flag("--json", o->json, "one JSON object instead of text");
  cmd->add_flag("--require-gpu", o->require_gpu, "fail when a rank sees no GPU (default: a CPU machine is fine)");
  cmd->add_option("--selftest-mib", o->selftest_mib, "allreduce self-test size in MiB (0: off)")
      ->check(number_at_least(0))
      ->capture_default_str();
  cmd->add_option("--selftest-iterations", o->selftest_iterations, "timed allreduce calls")
      ->check(number_at_least(1))
      ->capture_default_str();
  return [cmd, o](Context& ctx) { return cmd->parsed() ? run_doctor(ctx, *o) : 0; };
}

}  // namespace ringtrain
