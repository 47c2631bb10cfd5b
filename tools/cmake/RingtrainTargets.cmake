# Helper for the module libraries in src/: one static library per concern, with a
# ringtrain::<name> alias, public headers from include/ and private headers from src/.
# Every module is recorded in the global RINGTRAIN_MODULES for the install/export rules.
function(ringtrain_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(ringtrain_${name} STATIC ${ARG_SOURCES})
  add_library(ringtrain::${name} ALIAS ringtrain_${name})
  target_include_directories(ringtrain_${name}
    PUBLIC  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
    PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
  target_compile_features(ringtrain_${name} PUBLIC cxx_std_20)
  target_compile_options(ringtrain_${name} PRIVATE -Wall -Wextra -Wpedantic)
  target_link_libraries(ringtrain_${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(RINGTRAIN_FUZZ AND name IN_LIST RINGTRAIN_FUZZED_MODULES)
    target_compile_options(ringtrain_${name} PRIVATE -fsanitize=fuzzer-no-link)
    ringtrain_precompile_headers(ringtrain_${name} KIND fuzzed_module)
  else()
    ringtrain_precompile_headers(ringtrain_${name} KIND module)
  endif()
  ringtrain_record_module(ringtrain_${name} ${name})
endfunction()

# A module's source that uses oneDNN (linked with it) in a build with RINGTRAIN_WITH_ONEDNN, else
# the source that stands in for it.
function(ringtrain_onednn_source target with_onednn without_onednn)
  if(RINGTRAIN_WITH_ONEDNN)
    target_sources(${target} PRIVATE ${with_onednn})
    target_link_libraries(${target} PRIVATE DNNL::dnnl ${RINGTRAIN_GOMP_LIBRARY})
  else()
    target_sources(${target} PRIVATE ${without_onednn})
  endif()
endfunction()

# The modules the fuzz targets (tests/fuzz) feed: in a clang sanitizer build they are
# instrumented for libFuzzer's coverage feedback. The others (compute, communication) are not,
# which keeps the sanitizer test run's training steps fast.
set(RINGTRAIN_FUZZED_MODULES core ckpt data)

# Single sources of the other modules that a fuzz target feeds (the safetensors reader in tensor,
# the GPT import in nn), instrumented alone in such a build so that the rest of their module
# stays fast; they leave the module's precompiled header, made without that option.
function(ringtrain_fuzzed_sources target)
  if(RINGTRAIN_FUZZ)
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES COMPILE_OPTIONS -fsanitize=fuzzer-no-link
                                SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()

# A library target that is part of the installed package, exported as ringtrain::<export_name>.
function(ringtrain_record_module target export_name)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  set_property(GLOBAL APPEND PROPERTY RINGTRAIN_MODULES ${target})
endfunction()
