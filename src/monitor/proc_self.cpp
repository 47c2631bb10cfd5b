// /proc/self parsing (see proc_self.hpp). Files are read whole; a missing or malformed field
// is nullopt, never an exception: monitoring must not end a run.
#include "monitor/proc_self.hpp"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace ringtrain::proc {
namespace {

std::optional<std::string> read_text(const char* path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream text;
  text << f.rdbuf();
  return text.str();
}

std::optional<long long> to_number(std::string_view s) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end == s.data()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<long long> cpu_ticks_from_stat(std::string_view stat_text) {
  const auto close = stat_text.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  // After "pid (comm)" come field 3 (state) onwards: utime is field 14, i.e. the 12th token here.
  std::string_view rest = stat_text.substr(close + 1);
  long long ticks = 0;
  for (int field = 3; field <= 15; ++field) {
    const auto begin = rest.find_first_not_of(' ');
    if (begin == std::string_view::npos) return std::nullopt;
    rest = rest.substr(begin);
    const auto end = std::min(rest.find(' '), rest.size());
    if (field >= 14) {
      const auto v = to_number(rest.substr(0, end));
      if (!v) return std::nullopt;
      ticks += *v;
    }
    rest = rest.substr(end);
  }
  return ticks;
}

std::optional<long long> kb_from_status(std::string_view status_text, std::string_view key) {
  for (std::size_t at = 0; at < status_text.size();) {
    const auto eol = std::min(status_text.find('\n', at), status_text.size());
    const std::string_view line = status_text.substr(at, eol - at);
    at = eol + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':') continue;
    const std::string_view value = line.substr(key.size() + 1);
    const auto begin = value.find_first_not_of(" \t");
    if (begin == std::string_view::npos) return std::nullopt;
    return to_number(value.substr(begin));
  }
  return std::nullopt;
}

std::optional<double> self_cpu_seconds() {
  const auto text = read_text("/proc/self/stat");
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  if (!text || ticks_per_s <= 0) return std::nullopt;
  const auto ticks = cpu_ticks_from_stat(*text);
  if (!ticks) return std::nullopt;
  return static_cast<double>(*ticks) / static_cast<double>(ticks_per_s);
}

std::optional<SelfMemory> self_memory() {
  const auto text = read_text("/proc/self/status");
  if (!text) return std::nullopt;
  const auto rss = kb_from_status(*text, "VmRSS");
  const auto hwm = kb_from_status(*text, "VmHWM");
  if (!rss || !hwm) return std::nullopt;
  return SelfMemory{static_cast<double>(*rss) / 1024.0, static_cast<double>(*hwm) / 1024.0};
}

}  // namespace ringtrain::proc
