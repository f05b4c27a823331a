// gemm_lt_cuda.cu — nn.Linear through cuBLASLt with a per-shape algorithm cache (see header).
//
// Row-major to cuBLASLt's column-major: y (M, N) row-major is Y (N x M) column-major, so
//   Y = W^T-as-stored · X:  A = W stored (K x N, ld K) with op T, B = x stored (K x M, ld K),
//   C = D = y stored (N x M, ld N); the bias runs along D's rows (N), as the epilogue wants.
#include "kernels/cuda/gemm_lt_cuda.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdint>
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
    int refused; /* cuBLASLt has no algorithm (status kept): asked once per key */
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

// The f32-output form's key: the types, strides and whether C is read.
// align_*: the largest power of two (<= 256) dividing the pointer: the heuristic assumes
// 256-byte aligned matrices unless told, and column blocks of fused buffers are not.
struct shape_key_f32out {
    int M, K, N, wtype, ldx, ldy, has_bias, accumulate, align_w, align_x, align_y, epilogue;
    bool operator==(const shape_key_f32out &o) const
    {
        return M == o.M && K == o.K && N == o.N && wtype == o.wtype && ldx == o.ldx &&
               ldy == o.ldy && has_bias == o.has_bias && accumulate == o.accumulate &&
               align_w == o.align_w && align_x == o.align_x && align_y == o.align_y &&
               epilogue == o.epilogue;
    }
};

static int pointer_alignment(const void *p)
{
    const uintptr_t u = (uintptr_t)p;
    int a = 1;
    while (a < 256 && u % (uintptr_t)(2 * a) == 0)
        a *= 2;
    return a;
}

struct cached_plan_f32out {
    shape_key_f32out key;
    int refused; /* cuBLASLt has no algorithm (status kept): asked once per key */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

struct cpdit_gemm_lt {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    std::vector<cached_plan> plans;
    std::vector<cached_plan_f32out> plans_f32out;
};

// The plan of key in plans, made by make and cached on first use; nullptr when it cannot be
// made (*status and msg say why).
template <typename Plan, typename Key, typename Make>
static Plan *plan_for(cpdit_gemm_lt *g, std::vector<Plan> &plans, const Key &key, Make make,
                      int *status, char *msg, size_t msg_size)
{
    for (auto &p : plans)
        if (p.key == key) {
            if (!p.refused)
                return &p;
            set_msg(msg, msg_size, "AlgoGetHeuristic (no algorithm for this shape, cached)",
                    (cublasStatus_t)p.refused);
            *status = p.refused;
            return nullptr;
        }
    Plan p{};
    const char *what = "";
    cublasStatus_t st = make(g, key, &p, &what);
    if (st != CUBLAS_STATUS_SUCCESS) {
        set_msg(msg, msg_size, what, st);
        *status = (int)st;
        if (st == CUBLAS_STATUS_NOT_SUPPORTED) { /* remember the refusal, not other failures */
            Plan r{};
            r.key = key;
            r.refused = (int)st;
            plans.push_back(r);
        }
        return nullptr;
    }
    plans.push_back(p);
    return &plans.back();
}

// y = W x (+ b when the plan has a bias epilogue) + beta y, on stream. 0 or the cuBLAS status.
template <typename Plan>
static int run_plan(cpdit_gemm_lt *g, Plan *plan, void *y, const void *x, const void *w,
                    const void *b, float beta, void *stream, char *msg, size_t msg_size)
{
    if (b) {
        cublasStatus_t st = cublasLtMatmulDescSetAttribute(
            plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b);
        if (st != CUBLAS_STATUS_SUCCESS) {
            set_msg(msg, msg_size, "set BIAS_POINTER", st);
            return (int)st;
        }
    }
    const float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatmul(g->handle, plan->op, &alpha, w, plan->a, x, plan->b, &beta,
                                       y, plan->c, y, plan->c, &plan->algo, g->workspace,
                                       g->workspace_bytes, (cudaStream_t)stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        set_msg(msg, msg_size, "cublasLtMatmul", st);
        return (int)st;
    }
    return 0;
}

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
        if (!p.refused)
            destroy_plan(p);
    for (auto &p : g->plans_f32out) {
        if (p.refused)
            continue;
        cublasLtMatmulDescDestroy(p.op);
        cublasLtMatrixLayoutDestroy(p.a);
        cublasLtMatrixLayoutDestroy(p.b);
        cublasLtMatrixLayoutDestroy(p.c);
    }
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
    int status = 0;
    cached_plan *plan = plan_for(g, g->plans, key, make_plan, &status, msg, msg_size);
    return plan ? run_plan(g, plan, y, x, w, b, 0.0f, stream, msg, msg_size) : status;
}

// ---------------------------------------------------------------- fp32 output, strides, beta
//
// Column-major view as above: A = W stored (K x N, ld K) op T; B = x stored (K x M, ld ldx);
// C = D = y stored (N x M, ld ldy), fp32. The compute type is 32F either way (no TF32).
static cublasStatus_t make_plan_f32out(cpdit_gemm_lt *g, const shape_key_f32out &k,
                                       cached_plan_f32out *out, const char **what)
{
    cached_plan_f32out p{};
    p.key = k;
    const cudaDataType_t t = k.wtype == CPDIT_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasStatus_t st;
    bool have_op = false, have_a = false, have_b = false, have_c = false;
#define TRY(call, name)                                                                            \
    do {                                                                                           \
        st = (call);                                                                               \
        if (st != CUBLAS_STATUS_SUCCESS) {                                                         \
            *what = name;                                                                          \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)
    {
        TRY(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
        have_op = true;
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
            "set TRANSA");
        TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
            "set TRANSB");
        cublasLtEpilogue_t epi = k.has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        if (k.epilogue == CPDIT_GEMM_GELU_TANH) /* cuBLASLt's GELU is the tanh form */
            epi = k.has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
        TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
            "set EPILOGUE");
        if (k.has_bias) {
            cudaDataType_t bt = CUDA_R_32F;
            TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                               sizeof bt),
                "set BIAS_DATA_TYPE");
        }
        TRY(cublasLtMatrixLayoutCreate(&p.a, t, (uint64_t)k.K, (uint64_t)k.N, (int64_t)k.K),
            "layout W");
        have_a = true;
        TRY(cublasLtMatrixLayoutCreate(&p.b, t, (uint64_t)k.K, (uint64_t)k.M, (int64_t)k.ldx),
            "layout x");
        have_b = true;
        TRY(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, (uint64_t)k.N, (uint64_t)k.M,
                                       (int64_t)k.ldy),
            "layout y");
        have_c = true;
        cublasLtMatmulPreference_t pref;
        TRY(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
        size_t ws = g->workspace_bytes;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws);
        const uint32_t al_a = (uint32_t)k.align_w, al_b = (uint32_t)k.align_x,
                       al_c = (uint32_t)k.align_y;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &al_a, sizeof al_a);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &al_b, sizeof al_b);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &al_c, sizeof al_c);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &al_c, sizeof al_c);
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        st = cublasLtMatmulAlgoGetHeuristic(g->handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &res,
                                            &found);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st == CUBLAS_STATUS_SUCCESS && found == 0)
            st = CUBLAS_STATUS_NOT_SUPPORTED;
        if (st != CUBLAS_STATUS_SUCCESS) {
            *what = "AlgoGetHeuristic (no algorithm for this shape and types)";
            goto fail;
        }
        p.algo = res.algo;
        *out = p;
        return CUBLAS_STATUS_SUCCESS;
    }
#undef TRY
fail:
    if (have_op)
        cublasLtMatmulDescDestroy(p.op);
    if (have_a)
        cublasLtMatrixLayoutDestroy(p.a);
    if (have_b)
        cublasLtMatrixLayoutDestroy(p.b);
    if (have_c)
        cublasLtMatrixLayoutDestroy(p.c);
    return st;
}

extern "C" int cpdit_gemm_lt_linear_f32out(cpdit_gemm_lt *g, cpdit_cuda_dtype wtype, float *y,
                                           int ldy, const void *x, int ldx, const void *w,
                                           const float *b, int M, int K, int N, int accumulate,
                                           void *stream, char *msg, size_t msg_size)
{
    return cpdit_gemm_lt_linear_f32out_ex(g, wtype, y, ldy, x, ldx, w, b, M, K, N, accumulate,
                                          CPDIT_GEMM_PLAIN, stream, msg, msg_size);
}

extern "C" int cpdit_gemm_lt_linear_f32out_ex(cpdit_gemm_lt *g, cpdit_cuda_dtype wtype, float *y,
                                              int ldy, const void *x, int ldx, const void *w,
                                              const float *b, int M, int K, int N,
                                              int accumulate, cpdit_gemm_epilogue epilogue,
                                              void *stream, char *msg, size_t msg_size)
{
    if (M == 0 || N == 0)
        return 0;
    if (epilogue != CPDIT_GEMM_PLAIN && accumulate) { /* act(y + ...) is not y + act(...) */
        if (msg && msg_size)
            snprintf(msg, msg_size, "cuBLASLt: an activation epilogue with accumulate");
        return (int)CUBLAS_STATUS_INVALID_VALUE;
    }
    shape_key_f32out key{M,
                         K,
                         N,
                         (int)wtype,
                         ldx,
                         ldy,
                         b != nullptr,
                         accumulate ? 1 : 0,
                         pointer_alignment(w),
                         pointer_alignment(x),
                         pointer_alignment(y),
                         (int)epilogue};
    int status = 0;
    cached_plan_f32out *plan =
        plan_for(g, g->plans_f32out, key, make_plan_f32out, &status, msg, msg_size);
    return plan ? run_plan(g, plan, y, x, w, b, accumulate ? 1.0f : 0.0f, stream, msg, msg_size)
                : status;
}
