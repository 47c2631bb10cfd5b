// MemoryReport (see header). The largest value of each part over the ranks comes from one
// allreduce of a table where each rank fills only its own row (sums with zeros are exact).
#include "ringtrain/train/memory_report.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/bytes.hpp"
#include "ringtrain/train/batch_tuner.hpp"

namespace ringtrain {

namespace {
// The parts of StepMemory in report order (peak_rss follows them).
constexpr std::pair<std::string_view, std::int64_t StepMemory::*> kParts[] = {
    {"parameters", &StepMemory::parameters},   {"gathered_parameters", &StepMemory::gathered_parameters},
    {"gradients", &StepMemory::gradients},     {"optimizer_state", &StepMemory::optimizer_state},
    {"activations", &StepMemory::activations}, {"comm_buffers", &StepMemory::comm_buffers},
};
}  // namespace

std::int64_t own_peak_rss() {
  std::ifstream f("/proc/self/status");
  const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  return proc_kib_field_bytes(text, "VmHWM");
}

std::vector<std::pair<std::string_view, std::int64_t>> MemoryReport::fields() const {
  std::vector<std::pair<std::string_view, std::int64_t>> out;
  for (const auto& [name, part] : kParts) out.emplace_back(name, largest.*part);
  out.emplace_back("peak_rss", peak_rss);
  return out;
}

std::string MemoryReport::describe() const {
  std::string out;
  for (const auto& [name, bytes] : fields()) {
    if (!out.empty()) out += ", ";
    std::string label(name == "peak_rss" ? "peak RSS" : name);
    std::replace(label.begin(), label.end(), '_', ' ');
    out += label + " " + (bytes < 0 ? std::string("unknown") : format_bytes(static_cast<double>(bytes)));
  }
  return out;
}

MemoryReport gather_memory_report(Communicator& comm, const StepMemory& mine) {
  MemoryReport own;
  own.largest = mine;
  own.peak_rss = own_peak_rss();
  const std::vector<std::pair<std::string_view, std::int64_t>> values = own.fields();
  const std::size_t width = values.size();
  std::vector<double> table(width * static_cast<std::size_t>(comm.size()), 0.0);
  for (std::size_t i = 0; i < width; ++i)
    table[static_cast<std::size_t>(comm.rank()) * width + i] = static_cast<double>(values[i].second);
  comm.allreduce_sum(table.data(), table.size(), DType::f64);
  std::vector<std::int64_t> largest(width, -1);
  for (std::size_t r = 0; r < static_cast<std::size_t>(comm.size()); ++r)
    for (std::size_t i = 0; i < width; ++i)
      largest[i] = std::max(largest[i], static_cast<std::int64_t>(table[r * width + i]));
  MemoryReport out;
  for (std::size_t i = 0; i < std::size(kParts); ++i) out.largest.*kParts[i].second = largest[i];
  out.peak_rss = largest.back();
  return out;
}

}  // namespace ringtrain
