/* threads.h — OpenMP shim: compiles with or without -fopenmp. */
#ifndef AF_THREADS_H
#define AF_THREADS_H
#ifdef _OPENMP
#include <omp.h>
#define AF_OMP_MAX_THREADS() omp_get_max_threads()
#define AF_OMP_THREAD_NUM() omp_get_thread_num()
#define AF_OMP_NUM_THREADS() omp_get_num_threads()
#else
#define AF_OMP_MAX_THREADS() 1
#define AF_OMP_THREAD_NUM() 0
#define AF_OMP_NUM_THREADS() 1
#endif
#endif
