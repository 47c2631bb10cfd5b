// Tracer (see header). Times are microseconds since the tracer was created; ranks start
// within one barrier of each other, close enough to line the ranks up in a viewer.
#include "ringtrain/monitor/tracer.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/monitor/metrics_log.hpp"

namespace ringtrain {

Tracer::Tracer(bool enabled, int rank) : enabled_(enabled), rank_(rank), origin_(Clock::now()) {}

void Tracer::span(std::string_view name, std::string_view category, Clock::time_point begin, Clock::time_point end,
                  Track track) {
  if (!enabled_) return;
  const double b = std::chrono::duration<double, std::micro>(begin - origin_).count();
  const double d = std::chrono::duration<double, std::micro>(end - begin).count();
  std::lock_guard lock(mutex_);
  spans_.push_back(Span{std::string(name), std::string(category), b, d, track});
}

void Tracer::write(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  for (const auto& [track, label] : {std::pair{kCompute, "compute"}, std::pair{kComm, "communication"}})
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", track}, {"args", {{"name", label}}}});
  {
    std::lock_guard lock(mutex_);
    for (const auto& s : spans_)
      events.push_back({{"name", s.name},
                        {"cat", s.category},
                        {"ph", "X"},
                        {"ts", s.begin_us},
                        {"dur", s.duration_us},
                        {"pid", rank_},
                        {"tid", s.track}});
  }
  write_file_atomic(path, nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n");
}

void Tracer::merge(const std::vector<std::string>& inputs, const std::string& output) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& in : inputs) {
    std::ifstream f(in);
    RT_REQUIRE(f.good(), IoError, "{}: cannot open trace for merging", in);
    nlohmann::json part;
    try {
      part = nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
      throw IoError(fmt::format("{}: not a trace file: {}", in, e.what()));
    }
    for (auto& e : part["traceEvents"]) events.push_back(std::move(e));
  }
  write_file_atomic(output, nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n");
}

}  // namespace ringtrain
