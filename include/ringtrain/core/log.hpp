// Rank-aware logging: info() prints on rank 0 only (progress lines), warn()/error() print on
// any rank with the rank in front. The rank is set once by the runtime Context.
#pragma once
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace ringtrain::log {

void set_rank(int rank, int world_size);
int rank();
void write_line(std::FILE* stream, const std::string& line);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (rank() == 0) write_line(stdout, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write_line(stderr,
             fmt::format("ringtrain: warning: [rank {}] {}", rank(), fmt::format(f, std::forward<Args>(args)...)));
}

}  // namespace ringtrain::log
