// Text taken from a file (a name in an HDF5 attribute, a tensor name in a safetensors header)
// quoted in a message: one line, nothing a terminal would act on, bounded length.
#pragma once
#include <string>
#include <string_view>

namespace ringtrain {

// Every byte outside printable ASCII (newlines, escapes a terminal would act on, 8-bit controls,
// broken UTF-8) as \xNN, and at most 200 bytes of `text` ("..." after the cut).
std::string printable(std::string_view text);

}  // namespace ringtrain
