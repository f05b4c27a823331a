/* build_info.c — the build and runtime library report of `cpdit --version` (build_info.h). */
#include "config.h"

#include "bin/build_info.h"

#include <hwloc.h>
#include <mpi.h>
#include <png.h>
#include <jansson.h>
#include <yaml.h>
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "lib/io/video_writer.h"
#include "kernels/host_runtime.h"
#ifdef CPDIT_HAVE_CUDA
#include "kernels/cuda/cuda_runtime_info.h"
#endif

#ifndef CPDIT_CONFIGURE_ARGS
#define CPDIT_CONFIGURE_ARGS ""
#endif

/* MPI_Get_library_version may be called before MPI_Init (MPI-3.0 §8.1.1); keep the
 * first line only (Open MPI appends build details). */
static void mpi_library_line(char *buf, size_t size)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    lib[0] = '\0';
    if (MPI_Get_library_version(lib, &len) != MPI_SUCCESS)
        snprintf(lib, sizeof lib, "unknown");
    lib[sizeof lib - 1] = '\0';
    char *nl = strpbrk(lib, "\r\n,");
    if (nl)
        *nl = '\0';
    snprintf(buf, size, "%s", lib);
}

static void hwloc_version_line(char *buf, size_t size)
{
    unsigned v = hwloc_get_api_version();
    snprintf(buf, size, "%s (built against; runtime API %u.%u)", HWLOC_VERSION, v >> 16,
             (v >> 8) & 0xff);
}

void cpdit_build_info_print(FILE *out)
{
    char line[512];
    fprintf(out, "cpdit %s\n", cpdit_version_string());
    fprintf(out, "  configure:  %s\n", CPDIT_CONFIGURE_ARGS[0] ? CPDIT_CONFIGURE_ARGS : "(no options)");
#ifdef CPDIT_HAVE_CUDA
    cpdit_cuda_describe(line, sizeof line);
    fprintf(out, "  cuda:       yes (%s)\n", line);
    fprintf(out, "  nccl:       yes\n  cudnn:      yes\n");
#else
    fprintf(out, "  cuda:       no (configure --with-cuda to build the GPU backend)\n");
    fprintf(out, "  nccl:       no\n  cudnn:      no\n");
#endif
    mpi_library_line(line, sizeof line);
    fprintf(out, "  mpi:        %s\n", line);
    hwloc_version_line(line, sizeof line);
    fprintf(out, "  hwloc:      %s\n", line);
    cpdit_host_runtime_describe(line, sizeof line);
    fprintf(out, "  blas:       %s\n", line);
    fprintf(out, "  libpng:     %s\n", png_get_libpng_ver(NULL));
    fprintf(out, "  libyaml:    %s\n", yaml_get_version_string());
    fprintf(out, "  jansson:    %s\n", jansson_version_str());
    cpdit_video_describe(line, sizeof line);
    fprintf(out, "  video:      %s\n", line); /* output.format mp4|webp|png-frames */
    fprintf(out, "  backends:   (--backend NAME; default: the first available, now %s)\n",
            cpdit_backend_default()->name);
    for (const cpdit_backend *const *b = cpdit_backend_list(); *b; b++) {
        char kernels[256], why[256];
        const int avail = cpdit_backend_available(*b, why, sizeof why);
        fprintf(out, "    %-9s  %s\n", (*b)->name, (*b)->summary);
        if (avail) {
            (*b)->describe(line, sizeof line);
            fprintf(out, "    %-9s  available: %s\n", "", line);
        } else {
            fprintf(out, "    %-9s  not available: %s\n", "", why[0] ? why : "unknown reason");
        }
        fprintf(out, "    %-9s  attention kernels: %s\n", "",
                cpdit_attention_kernel_names(*b, kernels, sizeof kernels));
        if ((*b)->attention_auto)
            fprintf(out, "    %-9s  attention auto: %s\n", "", (*b)->attention_auto->summary);
    }
}

void cpdit_build_info_line(char *buf, size_t size)
{
    char blas[512], mpi[160];
    cpdit_host_runtime_describe(blas, sizeof blas);
    mpi_library_line(mpi, sizeof mpi);
    snprintf(buf, size, "cpdit %s | BLAS %s | %s | CUDA %s", cpdit_version_string(), blas, mpi,
             cpdit_built_with_cuda() ? "yes" : "no");
}
