/* version.c — the build's version and CUDA flag (version.h), from configure's config.h. */
#include "config.h"

#include "lib/core/version.h"

const char *cpdit_version_string(void)
{
    return PACKAGE_VERSION;
}

int cpdit_built_with_cuda(void)
{
#ifdef CPDIT_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}
