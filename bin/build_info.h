/* build_info.h — what this cpdit build contains and which libraries it runs on (backends,
 * MPI, hwloc, BLAS, ...), for `cpdit --version` and the header of every benchmark table.
 * The program's, not the library's: it reaches into every layer. The version string itself
 * is lib/core/version.h. */
#ifndef CPDIT_BUILD_INFO_H
#define CPDIT_BUILD_INFO_H

#include <stddef.h>
#include <stdio.h>

#include "lib/core/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Multi-line report: version, configure arguments, CUDA/NCCL/cuDNN compiled in (and their
 * versions when compiled in), MPI library version, hwloc version, BLAS library and the
 * kernel core it runs. Safe to call before MPI_Init. */
void cpdit_build_info_print(FILE *out);

/* One line for benchmark table headers: "cpdit 0.1.0 | BLAS ... | MPI ... | CUDA no". */
void cpdit_build_info_line(char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
