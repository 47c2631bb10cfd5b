// Private: the entry points of GCC's OpenMP runtime (libgomp) that oneDNN threads with and the
// CPU backend's own loops share (onednn_sgemm.cpp, host_parallel_openmp.cpp). Declared here, not
// through omp.h, so that any compiler builds these files against that one runtime.
#pragma once

extern "C" {
void omp_set_num_threads(int threads);
int omp_get_thread_num();
int omp_in_parallel();
// A parallel region: fn(data) on `num_threads` threads, the caller one of them.
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
}
