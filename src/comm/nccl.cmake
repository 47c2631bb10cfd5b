# The NCCL backend of the comm module, included from src/comm/CMakeLists.txt after the module
# target exists: the real communicator when CUDA is on and NCCL (>= 2.14) is found, else the
# stub that throws NotCompiled. NCCL ships inside the CUDA toolkit here, elsewhere in NCCL_HOME.
set(_rt_nccl_found OFF)
set(_rt_nccl_why "RINGTRAIN_WITH_CUDA=OFF")
if(RINGTRAIN_WITH_CUDA)
  set(_rt_nccl_roots ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
  find_path(RINGTRAIN_NCCL_INCLUDE_DIR nccl.h
            HINTS ${_rt_nccl_roots} ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
            PATH_SUFFIXES include)
  find_library(RINGTRAIN_NCCL_LIBRARY nccl
               HINTS ${_rt_nccl_roots} ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/local/cuda/lib
               PATH_SUFFIXES lib lib64)
  # EXISTS too: a stale or mistyped cache entry must give the clear message, not a link error.
  if(EXISTS "${RINGTRAIN_NCCL_INCLUDE_DIR}/nccl.h" AND EXISTS "${RINGTRAIN_NCCL_LIBRARY}")
    file(STRINGS ${RINGTRAIN_NCCL_INCLUDE_DIR}/nccl.h _rt_nccl_defines
         REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
    set(RINGTRAIN_NCCL_VERSION "")
    foreach(_part MAJOR MINOR PATCH)
      string(REGEX MATCH "NCCL_${_part} +([0-9]+)" _m "${_rt_nccl_defines}")
      list(APPEND RINGTRAIN_NCCL_VERSION ${CMAKE_MATCH_1})
    endforeach()
    list(JOIN RINGTRAIN_NCCL_VERSION "." RINGTRAIN_NCCL_VERSION)
    if(RINGTRAIN_NCCL_VERSION VERSION_LESS 2.14)
      set(_rt_nccl_why "NCCL ${RINGTRAIN_NCCL_VERSION} at ${RINGTRAIN_NCCL_INCLUDE_DIR} is older than 2.14")
    else()
      set(_rt_nccl_found ON)
    endif()
  else()
    string(CONCAT _rt_nccl_why "nccl.h/libnccl not found in the CUDA toolkit (${CUDAToolkit_INCLUDE_DIRS}, "
           "${CUDAToolkit_LIBRARY_DIR}), /usr/local/cuda or NCCL_HOME; set NCCL_HOME or "
           "RINGTRAIN_NCCL_INCLUDE_DIR and RINGTRAIN_NCCL_LIBRARY")
  endif()
endif()
option(RINGTRAIN_WITH_NCCL "Build the NCCL communicator (default: on when CUDA is on and NCCL is found)"
       ${_rt_nccl_found})

if(RINGTRAIN_WITH_NCCL AND _rt_nccl_found)
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED GLOBAL)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${RINGTRAIN_NCCL_LIBRARY}
                          INTERFACE_INCLUDE_DIRECTORIES ${RINGTRAIN_NCCL_INCLUDE_DIR})
  endif()
  target_sources(ringtrain_comm PRIVATE ${CMAKE_CURRENT_LIST_DIR}/nccl_communicator.cpp)
  target_link_libraries(ringtrain_comm PRIVATE NCCL::nccl CUDA::cudart)
  set(_rt_nccl_enabled ON)
  message(STATUS "ringtrain: NCCL ${RINGTRAIN_NCCL_VERSION} backend (${RINGTRAIN_NCCL_LIBRARY})")
else()
  target_sources(ringtrain_comm PRIVATE ${CMAKE_CURRENT_LIST_DIR}/nccl_stub.cpp)
  set(_rt_nccl_enabled OFF)
  if(RINGTRAIN_WITH_CUDA AND NOT _rt_nccl_found)
    message(WARNING "ringtrain: building the NCCL stub (comm.backend=nccl will throw NotCompiled): ${_rt_nccl_why}")
  elseif(RINGTRAIN_WITH_CUDA)
    message(STATUS "ringtrain: NCCL backend off (RINGTRAIN_WITH_NCCL=OFF): building the stub")
  else()
    message(STATUS "ringtrain: NCCL backend stub (${_rt_nccl_why})")
  endif()
endif()
# For tests/: whether the real backend is in this build (directory variables do not reach there).
set_property(GLOBAL PROPERTY RINGTRAIN_NCCL_ENABLED ${_rt_nccl_enabled})
