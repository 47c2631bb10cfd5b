# Precompiled headers (option RINGTRAIN_PRECOMPILE_HEADERS, off by default; tools/test turns it on
# for its sanitizer build): the standard library, fmt and nlohmann/json, plus GoogleTest for tests
# and CLI11 for the executable, are most of every translation unit's parsing. On clang 14 under
# ASan + UBSan, parsing is ~37% of the sanitizer build (192 of 523 CPU-s, -fsyntax-only over
# every file on a 2-core EPYC). The Release build keeps them off, so it still checks that each
# file includes what it uses.
#
# A precompiled header only fits translation units compiled with the options it was made with
# (clang refuses another -O level or -fsanitize=fuzzer-no-link), so targets are grouped into
# kinds with one option set each; the first target of a kind makes a host library with that
# target's compile options, which builds the header once, and every target of the kind reuses it.
option(RINGTRAIN_PRECOMPILE_HEADERS "Precompile the standard and third-party headers (faster builds; the build \
then no longer checks each file's own includes)" OFF)

set(RINGTRAIN_PCH_HEADERS
    <algorithm> <array> <atomic> <chrono> <cmath> <cstddef> <cstdint> <cstdio> <cstdlib> <cstring>
    <filesystem> <fstream> <functional> <limits> <map> <memory> <mutex> <optional> <set> <string>
    <string_view> <thread> <utility> <vector> <fmt/format.h> <nlohmann/json.hpp>)

# ringtrain_precompile_headers(target KIND kind [HEADERS extra...] [LIBS libs...]): the target
# reuses the precompiled header of its kind. HEADERS and LIBS (what those headers need: GTest::gtest,
# CLI11::CLI11) count only for the first target of a kind, which makes the host.
function(ringtrain_precompile_headers target)
  cmake_parse_arguments(ARG "" "KIND" "HEADERS;LIBS" ${ARGN})
  if(NOT RINGTRAIN_PRECOMPILE_HEADERS)
    return()
  endif()
  set(host ringtrain_pch_${ARG_KIND})
  if(NOT TARGET ${host})
    set(empty_source ${CMAKE_BINARY_DIR}/ringtrain_pch_host.cpp)
    if(NOT EXISTS ${empty_source})
      file(WRITE ${empty_source} "// The precompiled headers' host libraries compile only their header.\n")
    endif()
    add_library(${host} STATIC ${empty_source})
    get_target_property(options ${target} COMPILE_OPTIONS)
    if(options)
      target_compile_options(${host} PRIVATE ${options})
    endif()
    target_compile_features(${host} PRIVATE cxx_std_20)
    target_link_libraries(${host} PRIVATE fmt::fmt nlohmann_json::nlohmann_json ${ARG_LIBS})
    target_precompile_headers(${host} PRIVATE ${RINGTRAIN_PCH_HEADERS} ${ARG_HEADERS})
  endif()
  target_precompile_headers(${target} REUSE_FROM ${host})
endfunction()
