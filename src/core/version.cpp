// The version string, defined by CMake (RINGTRAIN_VERSION) for this file only.
#include "ringtrain/core/version.hpp"

namespace ringtrain {
const char* version() { return RINGTRAIN_VERSION; }
}  // namespace ringtrain
