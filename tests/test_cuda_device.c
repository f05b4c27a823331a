/* test_cuda_device.c — the CUDA backend sees a GPU and runs a kernel correctly.
 * Skips (77) on machines without a usable GPU, as on CPU-only build hosts. */
#include "config.h"

#include <stdio.h>

#include "lib/core/version.h"
#include "kernels/cuda/cuda_runtime_info.h"
#include "tests/test_util.h"

int main(void)
{
    char desc[512];
    cpdit_cuda_describe(desc, sizeof desc);
    fprintf(stderr, "cuda: %s\n", desc);
    if (cpdit_cuda_device_count() == 0)
        TEST_SKIP("no CUDA device");
    CHECK(cpdit_built_with_cuda() == 1);
    CHECK(cpdit_cuda_self_test(1 << 20) == 0);
    TEST_MAIN_END();
}
