// Byte counts for people: the one formatter every message and table uses (binary units, one
// decimal), so a size reads the same in `tune batch`, the memory pool's errors and the benchmarks.
#pragma once
#include <string>

namespace ringtrain {

// 100 -> "100 B", 1536 -> "1.5 KiB", 3 << 30 -> "3.0 GiB"; units up to PiB.
std::string format_bytes(double bytes);

}  // namespace ringtrain
