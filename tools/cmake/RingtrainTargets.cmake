# Helper for the module libraries in src/: one static library per concern, with a
# ringtrain::<name> alias, public headers from include/ and private headers from src/.
function(ringtrain_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(ringtrain_${name} STATIC ${ARG_SOURCES})
  add_library(ringtrain::${name} ALIAS ringtrain_${name})
  target_include_directories(ringtrain_${name}
    PUBLIC  ${PROJECT_SOURCE_DIR}/include
    PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
  target_compile_features(ringtrain_${name} PUBLIC cxx_std_20)
  target_compile_options(ringtrain_${name} PRIVATE -Wall -Wextra -Wpedantic)
  target_link_libraries(ringtrain_${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()
