# cuDNN discovery, the one place for it (find_package(CUDAToolkit) does not cover cuDNN):
# included from the top-level CMakeLists.txt when CUDA is on; defines the imported target
# ringtrain::cudnn when cudnn.h and libcudnn are in the toolkit, CUDNN_ROOT or CUDNN_HOME.
set(_rt_cudnn_roots ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_HOME})
find_path(RINGTRAIN_CUDNN_INCLUDE_DIR cudnn.h HINTS ${_rt_cudnn_roots} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(RINGTRAIN_CUDNN_LIBRARY cudnn HINTS ${_rt_cudnn_roots} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)
# EXISTS too: a stale or mistyped cache entry must give the clear message, not a link error.
if(EXISTS "${RINGTRAIN_CUDNN_INCLUDE_DIR}/cudnn.h" AND EXISTS "${RINGTRAIN_CUDNN_LIBRARY}")
  set(_rt_cudnn_version_header "${RINGTRAIN_CUDNN_INCLUDE_DIR}/cudnn_version.h")
  if(NOT EXISTS ${_rt_cudnn_version_header})  # cuDNN < 8 keeps the version in cudnn.h
    set(_rt_cudnn_version_header "${RINGTRAIN_CUDNN_INCLUDE_DIR}/cudnn.h")
  endif()
  file(STRINGS ${_rt_cudnn_version_header} _rt_cudnn_defines REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
  set(RINGTRAIN_CUDNN_VERSION "")
  foreach(_part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${_part} +([0-9]+)" _m "${_rt_cudnn_defines}")
    list(APPEND RINGTRAIN_CUDNN_VERSION ${CMAKE_MATCH_1})
  endforeach()
  list(JOIN RINGTRAIN_CUDNN_VERSION "." RINGTRAIN_CUDNN_VERSION)
  if(NOT TARGET ringtrain::cudnn)
    add_library(ringtrain::cudnn UNKNOWN IMPORTED GLOBAL)
    set_target_properties(ringtrain::cudnn PROPERTIES IMPORTED_LOCATION ${RINGTRAIN_CUDNN_LIBRARY}
                          INTERFACE_INCLUDE_DIRECTORIES ${RINGTRAIN_CUDNN_INCLUDE_DIR})
  endif()
  message(STATUS "ringtrain: cuDNN ${RINGTRAIN_CUDNN_VERSION} (${RINGTRAIN_CUDNN_LIBRARY})")
else()
  message(STATUS "ringtrain: cuDNN not found in the CUDA toolkit (${CUDAToolkit_INCLUDE_DIRS}), CUDNN_ROOT or "
                 "CUDNN_HOME; set CUDNN_HOME or RINGTRAIN_CUDNN_INCLUDE_DIR and RINGTRAIN_CUDNN_LIBRARY")
endif()

# cudnn-frontend (header-only, optional): the graph API that builds cuDNN's fused attention for the
# CUDA GPT layers (src/nn/cuda/cudnn_attention.cpp). Without it those layers run their unfused
# attention (cuBLASLt GEMMs and softmax kernels) and say so once.
find_path(RINGTRAIN_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
          HINTS ${CUDNN_FRONTEND_HOME} ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_HOME} $ENV{CUDNN_FRONTEND_ROOT}
          PATH_SUFFIXES include)
if(EXISTS "${RINGTRAIN_CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h")
  file(STRINGS "${RINGTRAIN_CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h" _rt_fe_defines
       REGEX "^#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION +[0-9]+")
  string(REGEX REPLACE "[^0-9]+" "." RINGTRAIN_CUDNN_FRONTEND_VERSION "${_rt_fe_defines}")
  string(REGEX REPLACE "^\\.|\\.$" "" RINGTRAIN_CUDNN_FRONTEND_VERSION "${RINGTRAIN_CUDNN_FRONTEND_VERSION}")
  message(STATUS "ringtrain: cudnn-frontend ${RINGTRAIN_CUDNN_FRONTEND_VERSION} "
                 "(${RINGTRAIN_CUDNN_FRONTEND_INCLUDE_DIR}): fused attention on")
else()
  message(STATUS "ringtrain: cudnn-frontend not found (CUDNN_FRONTEND_HOME): the CUDA attention runs unfused")
endif()
