# ringtrain_add_test(NAME name SOURCES ... LIBS ... LABELS ... [MPI_SIZES 2 4] [TIMEOUT s])
# One GoogleTest executable; without MPI_SIZES it runs as one plain test, with MPI_SIZES it is
# registered once per size under mpirun (oversubscribed, allowed as root) as name.npN. A binary
# whose cases all skipped exits 77 (tests/support/mpi_main.cpp): ctest reports it as skipped.
# Every test's temporary files go under this build's test-tmp/, so two checkouts testing at once
# on one machine never share a fixed /tmp path; each test has a TMPDIR of its own there
# (ringtrain_set_test_environment).
set(RINGTRAIN_TEST_TMPDIR ${CMAKE_BINARY_DIR}/test-tmp)
set(RINGTRAIN_TEST_ENV "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
if(RINGTRAIN_SANITIZE)
  # Every test process (and the ranks and CLI runs it starts) runs with LeakSanitizer on, minus
  # what the linked libraries keep until exit (tools/sanitize/lsan.supp; whole stacks, so a
  # suppression can see which library allocated); Open MPI's SIGSEGV/SIGABRT handler stays
  # out of the sanitizers' way.
  add_library(ringtrain_keep_plugins SHARED ${PROJECT_SOURCE_DIR}/tools/sanitize/keep_plugins.c)
  target_compile_options(ringtrain_keep_plugins PRIVATE -fno-sanitize=all)
  target_link_options(ringtrain_keep_plugins PRIVATE -fno-sanitize=all)
  set(RINGTRAIN_SANITIZER_ENV "LD_PRELOAD=$<TARGET_FILE:ringtrain_keep_plugins>"
      "ASAN_OPTIONS=detect_leaks=1"
      "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tools/sanitize/lsan.supp:print_suppressions=0"
      "UBSAN_OPTIONS=print_stacktrace=1" "OMPI_MCA_opal_signal=")
  list(APPEND RINGTRAIN_TEST_ENV ${RINGTRAIN_SANITIZER_ENV})
endif()
# Test code is compiled with less optimisation than the libraries it tests (which keep -O3) in a
# Release build, where it was half of each build. Measured on a 2-core EPYC: gcc 12 compiles a
# test file ~1.6x faster at -O1 (RINGTRAIN_TEST_COMPILE_OPTIONS). Under ASan + UBSan (clang 14)
# -O1 saves little and -O0 makes the tests that check large buffers in their own loops 3-5x
# slower (test_comm_allreduce.np4: 25 -> 133 s), so there only the end-to-end tests, which just
# start processes and read their output, drop to -O0 (test_checkpoint.cpp: 48 -> 16 s to
# compile): RINGTRAIN_END_TO_END_TEST_COMPILE_OPTIONS.
if(RINGTRAIN_SANITIZE)
  set(RINGTRAIN_TEST_COMPILE_OPTIONS "")
else()
  set(RINGTRAIN_TEST_COMPILE_OPTIONS $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
endif()
set(RINGTRAIN_END_TO_END_TEST_COMPILE_OPTIONS $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O0>)
set(RINGTRAIN_MPIEXEC_FLAGS --oversubscribe --allow-run-as-root --bind-to none
    --mca btl self,vader --mca btl_vader_single_copy_mechanism none
    CACHE STRING "Flags mpirun gets in tests")
# Sets a test's environment to ENV... plus TMPDIR=test-tmp/<test>. Open MPI makes its session
# directory under TMPDIR, and two mpiruns starting at the same moment in one TMPDIR can both try to
# create it: the loser ends with "A call to mkdir was unable to create the desired directory ...
# File exists" before any rank starts (CI, 2026-12-05: test_prune beside another test's mpirun).
function(ringtrain_set_test_environment test_name)
  set(dir ${RINGTRAIN_TEST_TMPDIR}/${test_name})
  file(MAKE_DIRECTORY ${dir})
  set_property(TEST ${test_name} PROPERTY ENVIRONMENT ${ARGN} "TMPDIR=${dir}")
endfunction()

function(ringtrain_add_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;MPI_SIZES" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_compile_options(${ARG_NAME} PRIVATE ${RINGTRAIN_TEST_COMPILE_OPTIONS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} ringtrain::test_support GTest::gtest)
  target_include_directories(${ARG_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  ringtrain_precompile_headers(${ARG_NAME} KIND test HEADERS <gtest/gtest.h> LIBS GTest::gtest)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(ARG_MPI_SIZES)
    foreach(np IN LISTS ARG_MPI_SIZES)
      add_test(NAME ${ARG_NAME}.np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${RINGTRAIN_MPIEXEC_FLAGS}
                       $<TARGET_FILE:${ARG_NAME}>)
      set_tests_properties(${ARG_NAME}.np${np} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                           PROCESSORS ${np} SKIP_RETURN_CODE 77)
      ringtrain_set_test_environment(${ARG_NAME}.np${np} ${RINGTRAIN_TEST_ENV})
    endforeach()
  else()
    add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
    set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT} SKIP_RETURN_CODE 77)
    ringtrain_set_test_environment(${ARG_NAME} ${RINGTRAIN_TEST_ENV})
  endif()
endfunction()
