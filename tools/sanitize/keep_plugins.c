/* Preloaded into every process of the sanitizer test run (tools/cmake/RingtrainTest.cmake):
 * dlclose does nothing, so the Open MPI components unloaded at MPI_Finalize stay mapped and
 * LeakSanitizer can name the library that allocated what they keep until exit (otherwise
 * "<unknown module>", which no suppression matches). Built without instrumentation: processes
 * that are not sanitized (mpirun, shells) load it as well. */
#include <dlfcn.h>

int dlclose(void* handle) {
  (void)handle;
  return 0;
}
