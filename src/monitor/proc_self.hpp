// Private: this process's CPU time and memory from /proc/self (Linux). The parsers take the
// files' text so that tests can feed them; the readers return nullopt when /proc is absent.
#pragma once
#include <optional>
#include <string_view>

namespace ringtrain::proc {

// utime + stime in clock ticks from the text of /proc/PID/stat (fields 14 and 15, counted
// after the ')' that closes the command name, which may itself hold spaces and parentheses).
std::optional<long long> cpu_ticks_from_stat(std::string_view stat_text);
// A "Key:   1234 kB" line of /proc/PID/status, in kB (e.g. key "VmRSS" or "VmHWM").
std::optional<long long> kb_from_status(std::string_view status_text, std::string_view key);

std::optional<double> self_cpu_seconds();  // user + system CPU time of this process, all threads
struct SelfMemory {
  double rss_mib = 0.0;   // resident now
  double peak_mib = 0.0;  // resident high-water mark
};
std::optional<SelfMemory> self_memory();

}  // namespace ringtrain::proc
