// The ringtrain version (from CMake's project version).
#pragma once

namespace ringtrain {
const char* version();
}
