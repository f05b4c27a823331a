// gemm_lt_cuda.cu — nn.Linear through cuBLASLt with a per-shape algorithm cache (see header).
//
// Row-major to cuBLASLt's column-major: y (M, N) row-major is Y (N x M) column-major, so
//   Y = W^T-as-stored · X:  A = W stored (K x N, ld K) with op T, B = x stored (K x M, ld K),
//   C = D = y stored (N x M, ld N); the bias runs along D's rows (N), as the epilogue wants.
#include "kernels/cuda/gemm_lt_cuda.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

struct shape_key {
    int M, K, N, dtype, epilogue, has_bias;
    bool operator==(const shape_key &o) const
    {
        return M == o.M && K == o.K && N == o.N && dtype == o.dtype && epilogue == o.epilogue &&
               has_bias == o.has_bias;
    }
};

struct cached_plan {
    shape_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

void set_msg(char *msg, size_t size, const char *what, cublasStatus_t st)
{
    if (msg && size)
        snprintf(msg, size, "cuBLASLt: %s failed: %s", what, cublasGetStatusString(st));
}

} // namespace

struct cpdit_gemm_lt {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    std::vector<cached_plan> plans;
};

extern "C" cpdit_gemm_lt *cpdit_gemm_lt_create(size_t workspace_bytes, char *msg, size_t msg_size)
{
    cpdit_gemm_lt *g = new cpdit_gemm_lt();
    g->workspace_bytes = workspace_bytes ? workspace_bytes : (size_t)32 << 20;
    cublasStatus_t st = cublasLtCreate(&g->handle);
    if (st != CUBLAS_STATUS_SUCCESS) {
        set_msg(msg, msg_size, "cublasLtCreate", st);
        delete g;
        return nullptr;
    }
    cudaError_t e = cudaMalloc(&g->workspace, g->workspace_bytes);
    if (e != cudaSuccess) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "cuBLASLt workspace of %zu bytes: %s", g->workspace_bytes,
                     cudaGetErrorString(e));
        cublasLtDestroy(g->handle);
        delete g;
        return nullptr;
    }
    return g;
}

static void destroy_plan(cached_plan &p)
{
    cublasLtMatmulDescDestroy(p.op);
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
}

extern "C" void cpdit_gemm_lt_destroy(cpdit_gemm_lt *g)
{
    if (!g)
        return;
    for (auto &p : g->plans)
        destroy_plan(p);
    cudaFree(g->workspace);
    cublasLtDestroy(g->handle);
    delete g;
}

extern "C" int cpdit_gemm_lt_cached_shapes(const cpdit_gemm_lt *g)
{
    return g ? (int)g->plans.size() : 0;
}

// Build the descriptors and ask the heuristic once for this shape.
static cublasStatus_t make_plan(cpdit_gemm_lt *g, const shape_key &k, cached_plan *out,
                                const char **what)
{
    cached_plan p{};
    p.key = k;
    cudaDataType_t t = k.dtype == CPDIT_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasStatus_t st;
#define TRY(call, name)                                                                            \
    do {                                                                                           \
        st = (call);                                                                               \
        if (st != CUBLAS_STATUS_SUCCESS) {                                                         \
            *what = name;                                                                          \
            return st;                                                                             \
        }                                                                                          \
    } while (0)
    TRY(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
        "set TRANSA");
    TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
        "set TRANSB");
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (k.epilogue == CPDIT_GEMM_GELU_TANH)
        epi = k.has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (k.has_bias)
        epi = CUBLASLT_EPILOGUE_BIAS;
    TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
        "set EPILOGUE");
    TRY(cublasLtMatrixLayoutCreate(&p.a, t, (uint64_t)k.K, (uint64_t)k.N, (int64_t)k.K),
        "layout W");
    TRY(cublasLtMatrixLayoutCreate(&p.b, t, (uint64_t)k.K, (uint64_t)k.M, (int64_t)k.K),
        "layout x");
    TRY(cublasLtMatrixLayoutCreate(&p.c, t, (uint64_t)k.N, (uint64_t)k.M, (int64_t)k.N),
        "layout y");
    cublasLtMatmulPreference_t pref;
    TRY(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    size_t ws = g->workspace_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(g->handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &res,
                                        &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found == 0)
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st != CUBLAS_STATUS_SUCCESS) {
        *what = "AlgoGetHeuristic (no algorithm for this shape)";
        destroy_plan(p);
        return st;
    }
#undef TRY
    p.algo = res.algo;
    *out = p;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" int cpdit_gemm_lt_linear(cpdit_gemm_lt *g, cpdit_cuda_dtype dtype, void *y,
                                    const void *x, const void *w, const void *b, int M, int K,
                                    int N, cpdit_gemm_epilogue epilogue, void *stream, char *msg,
                                    size_t msg_size)
{
    if (M == 0 || N == 0)
        return 0;
    shape_key key{M, K, N, (int)dtype, (int)epilogue, b != nullptr};
    cached_plan *plan = nullptr;
    for (auto &p : g->plans)
        if (p.key == key)
            plan = &p;
    if (!plan) {
        cached_plan p;
        const char *what = "";
        cublasStatus_t st = make_plan(g, key, &p, &what);
        if (st != CUBLAS_STATUS_SUCCESS) {
            set_msg(msg, msg_size, what, st);
            return (int)st;
        }
        g->plans.push_back(p);
        plan = &g->plans.back();
    }
    if (b) {
        cublasStatus_t st = cublasLtMatmulDescSetAttribute(
            plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b);
        if (st != CUBLAS_STATUS_SUCCESS) {
            set_msg(msg, msg_size, "set BIAS_POINTER", st);
            return (int)st;
        }
    }
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasLtMatmul(g->handle, plan->op, &alpha, w, plan->a, x, plan->b, &beta,
                                       y, plan->c, y, plan->c, &plan->algo, g->workspace,
                                       g->workspace_bytes, (cudaStream_t)stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        set_msg(msg, msg_size, "cublasLtMatmul", st);
        return (int)st;
    }
    return 0;
}
