// Rank-aware logging. Lines are written whole with one fwrite so ranks do not interleave
// within a line.
#include "ringtrain/core/log.hpp"

namespace ringtrain::log {
namespace {
int g_rank = 0;
}

void set_rank(int r, int /*world_size*/) { g_rank = r; }
int rank() { return g_rank; }

void write_line(std::FILE* stream, const std::string& line) {
  std::string s = line;
  s.push_back('\n');
  std::fwrite(s.data(), 1, s.size(), stream);
  std::fflush(stream);
}

}  // namespace ringtrain::log
