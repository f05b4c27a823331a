/* version.h — this build's version and whether the CUDA backend is compiled in: the two facts
 * about the build that the library itself needs (the topology file's and the index's
 * "cpdit_version"). The full build report (`cpdit --version`: libraries, backends) is the
 * program's (bin/build_info.h). Includes nothing. */
#ifndef CPDIT_VERSION_H
#define CPDIT_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0" */
const char *cpdit_version_string(void);

/* 1 when the CUDA backend (with cuBLAS, cuDNN, NCCL) is compiled in. */
int cpdit_built_with_cuda(void);

#ifdef __cplusplus
}
#endif
#endif
