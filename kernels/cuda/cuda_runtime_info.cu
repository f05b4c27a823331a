// cuda_runtime_info.cu — CUDA/cuBLAS/cuDNN/NCCL versions and a device self-test.
#include "kernels/cuda/cuda_runtime_info.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <vector>

extern "C" int cpdit_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

static void version_triplet(int v, int major_div, int minor_div, int *a, int *b, int *c)
{
    *a = v / major_div;
    *b = (v % major_div) / minor_div;
    *c = v % minor_div;
}

extern "C" void cpdit_cuda_describe(char *buf, size_t size)
{
    int rt = 0, drv = 0, nccl = 0, a, b, c;
    cudaRuntimeGetVersion(&rt);
    if (cudaDriverGetVersion(&drv) != cudaSuccess)
        drv = 0;
    ncclGetVersion(&nccl);
    size_t cudnn = cudnnGetVersion();
    int n = cpdit_cuda_device_count();
    char dev[256] = "no device";
    if (n > 0) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
            snprintf(dev, sizeof dev, "%d device%s, first: %s (sm_%d%d, %.0f GiB)", n,
                     n > 1 ? "s" : "", p.name, p.major, p.minor,
                     (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    }
    int na, nb, nc;
    version_triplet(nccl, nccl >= 20900 ? 10000 : 1000, 100, &na, &nb, &nc);
    // cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 major*1000 + minor*100 + patch
    version_triplet((int)cudnn, cudnn >= 90000 ? 10000 : 1000, 100, &a, &b, &c);
    int ba = 0, bb = 0, bc = 0;
    cublasGetProperty(MAJOR_VERSION, &ba);
    cublasGetProperty(MINOR_VERSION, &bb);
    cublasGetProperty(PATCH_LEVEL, &bc);
    size_t lt = cublasLtGetVersion(); /* major*10000 + minor*100 + patch */
    snprintf(buf, size,
             "runtime %d.%d, driver %d.%d, cuBLAS %d.%d.%d, cuBLASLt %zu.%zu.%zu, cuDNN %d.%d.%d, "
             "NCCL %d.%d.%d; %s",
             rt / 1000, (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10, ba, bb, bc, lt / 10000,
             (lt % 10000) / 100, lt % 100, a, b, c, na, nb, nc, dev);
}

__global__ static void axpy_kernel(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

extern "C" int cpdit_cuda_self_test(int n)
{
    if (n <= 0 || cpdit_cuda_device_count() == 0)
        return -1;
    std::vector<float> x(n), y(n), r(n);
    for (int i = 0; i < n; i++) {
        x[i] = 0.5f * (float)(i % 97);
        y[i] = (float)(i % 13) - 6.0f;
    }
    float *dx = nullptr, *dy = nullptr;
    if (cudaMalloc(&dx, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&dy, n * sizeof(float)) != cudaSuccess)
        return -1;
    cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    const int threads = 256;
    axpy_kernel<<<(n + threads - 1) / threads, threads>>>(n, 2.0f, dx, dy);
    cudaMemcpy(r.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaError_t e = cudaGetLastError();
    cudaFree(dx);
    cudaFree(dy);
    if (e != cudaSuccess)
        return -1;
    for (int i = 0; i < n; i++)
        if (std::fabs(r[i] - (2.0f * x[i] + y[i])) > 1e-6f)
            return 1;
    return 0;
}
