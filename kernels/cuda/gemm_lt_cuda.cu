// gemm_lt_cuda.cu — nn.Linear through cuBLASLt with a per-shape algorithm cache (see header).
//
// Row-major to cuBLASLt's column-major: kernels/cuda/gemm_layout.h (A = W stored with op T,
// B = x stored, C = D = y stored; the bias runs along D's rows, N values).
// Both entry points share one plan type: the key holds everything the heuristic's choice
// depends on (shape, strides, types, epilogue, bias, whether C is read, pointer alignments).
// Supported type combinations (cuBLASLt, CUBLAS_COMPUTE_32F with CUDA_R_32F scale): A/B bf16
// with C/D bf16 or fp32, and all fp32 (no TF32: the compute type is 32F, not 32F_FAST_TF32).
// The bias vector's type is set explicitly (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE): fp32 with an
// fp32 D; with a bf16 D, cublasLt.h documents the bias as D's type (bf16) and names only IMMA
// and fp8 kernels as taking an fp32 bias, so an fp32 bias is asked for first (the table's
// biases are fp32 parameters) and, when cuBLASLt refuses that key (cached as refused), the
// bias is rounded to a bf16 copy per call (N values, one small kernel) and the bf16-bias plan
// runs.
#include "kernels/cuda/gemm_lt_cuda.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdint>
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernels/cuda/alloc_cuda.h"
#include "kernels/cuda/gemm_layout.h"

namespace {

struct plan_key {
    int M, K, N, in_type, out_type, ldx, ldy, has_bias, accumulate, align_w, align_x, align_y,
        epilogue, bias_type;
    bool operator==(const plan_key &o) const
    {
        return M == o.M && K == o.K && N == o.N && in_type == o.in_type &&
               out_type == o.out_type && ldx == o.ldx && ldy == o.ldy &&
               has_bias == o.has_bias && accumulate == o.accumulate && align_w == o.align_w &&
               align_x == o.align_x && align_y == o.align_y && epilogue == o.epilogue &&
               bias_type == o.bias_type;
    }
};

// b16[i] = b[i] rounded to bf16, n values.
__global__ void bias_to_bf16_kernel(__nv_bfloat16 *b16, const float *b, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        b16[i] = __float2bfloat16_rn(b[i]);
}

struct cached_plan {
    plan_key key;
    int refused; // cuBLASLt has no algorithm (status kept): asked once per key
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

void set_msg(char *msg, size_t size, const char *what, cublasStatus_t st)
{
    if (msg && size)
        snprintf(msg, size, "cuBLASLt: %s failed: %s", what, cublasGetStatusString(st));
}

cudaDataType_t cuda_type(int t)
{
    return t == CPDIT_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

void destroy_plan(cached_plan &p)
{
    if (p.op)
        cublasLtMatmulDescDestroy(p.op);
    if (p.a)
        cublasLtMatrixLayoutDestroy(p.a);
    if (p.b)
        cublasLtMatrixLayoutDestroy(p.b);
    if (p.c)
        cublasLtMatrixLayoutDestroy(p.c);
}

} // namespace

struct cpdit_gemm_lt {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    std::mutex lock; // the plan list, the descriptors' bias pointer and the one workspace
    std::vector<cached_plan> plans;
    std::atomic<long> bias_copies{0}; // calls that gave cuBLASLt a bf16 copy of the fp32 bias
};

// Build the descriptors and ask the heuristic once for this key.
static cublasStatus_t make_plan(cpdit_gemm_lt *g, const plan_key &k, cached_plan *out,
                                const char **what)
{
    cached_plan p{};
    p.key = k;
    const cpdit_lt_linear_layout l = cpdit_lt_linear_layout_for(k.M, k.K, k.N, k.ldx, k.ldy);
    const cudaDataType_t tin = cuda_type(k.in_type), tout = cuda_type(k.out_type);
    cublasStatus_t st;
#define TRY(call, name)                                                                            \
    do {                                                                                           \
        st = (call);                                                                               \
        if (st != CUBLAS_STATUS_SUCCESS) {                                                         \
            *what = name;                                                                          \
            destroy_plan(p);                                                                       \
            return st;                                                                             \
        }                                                                                          \
    } while (0)
    TRY(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t ta = l.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            tb = l.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
        "set TRANSA");
    TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
        "set TRANSB");
    cublasLtEpilogue_t epi = k.has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (k.epilogue == CPDIT_GEMM_GELU_TANH) // cuBLASLt's GELU is the tanh approximation
        epi = k.has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
        "set EPILOGUE");
    if (k.has_bias) { // the bias type of the key (see the top of the file)
        const cudaDataType_t tbias = cuda_type(k.bias_type);
        TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &tbias,
                                           sizeof tbias),
            "set BIAS_DATA_TYPE");
    }
    TRY(cublasLtMatrixLayoutCreate(&p.a, tin, l.a.rows, l.a.cols, l.a.ld), "layout W");
    TRY(cublasLtMatrixLayoutCreate(&p.b, tin, l.b.rows, l.b.cols, l.b.ld), "layout x");
    TRY(cublasLtMatrixLayoutCreate(&p.c, tout, l.c.rows, l.c.cols, l.c.ld), "layout y");
    cublasLtMatmulPreference_t pref;
    TRY(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
#undef TRY
    const size_t ws = g->workspace_bytes;
    const uint32_t al_a = (uint32_t)k.align_w, al_b = (uint32_t)k.align_x,
                   al_c = (uint32_t)k.align_y;
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulAlgoGetHeuristic(g->handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &res,
                                            &found);
        *what = "AlgoGetHeuristic (no algorithm for this shape and types)";
    } else {
        *what = "set preference";
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found == 0)
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st != CUBLAS_STATUS_SUCCESS) {
        destroy_plan(p);
        return st;
    }
    p.algo = res.algo;
    *out = p;
    return CUBLAS_STATUS_SUCCESS;
}

// y = epilogue(W x + b) + beta y for key on stream, planning on first use; under g->lock.
// 0 or the cuBLAS status (a refusal is cached: asked once per key).
static int run_locked(cpdit_gemm_lt *g, const plan_key &key, void *y, const void *x,
                      const void *w, const void *b, void *stream, char *msg, size_t msg_size)
{
    cached_plan *plan = nullptr;
    for (auto &p : g->plans)
        if (p.key == key) {
            if (p.refused) {
                set_msg(msg, msg_size, "AlgoGetHeuristic (no algorithm for this shape, cached)",
                        (cublasStatus_t)p.refused);
                return p.refused;
            }
            plan = &p;
            break;
        }
    if (!plan) {
        cached_plan p{};
        const char *what = "";
        cublasStatus_t st = make_plan(g, key, &p, &what);
        // an fp32 bias with a bf16 D that cuBLASLt rejects in any way is a refusal of the key
        if (st != CUBLAS_STATUS_SUCCESS && key.has_bias && key.bias_type != key.out_type)
            st = CUBLAS_STATUS_NOT_SUPPORTED;
        if (st != CUBLAS_STATUS_SUCCESS) {
            set_msg(msg, msg_size, what, st);
            if (st == CUBLAS_STATUS_NOT_SUPPORTED) { // remember the refusal, not other failures
                cached_plan r{};
                r.key = key;
                r.refused = (int)st;
                g->plans.push_back(r);
            }
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
    const float alpha = 1.0f, beta = key.accumulate ? 1.0f : 0.0f;
    cublasStatus_t st = cublasLtMatmul(g->handle, plan->op, &alpha, w, plan->a, x, plan->b, &beta,
                                       y, plan->c, y, plan->c, &plan->algo, g->workspace,
                                       g->workspace_bytes, (cudaStream_t)stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        set_msg(msg, msg_size, "cublasLtMatmul", st);
        if (key.has_bias && key.bias_type != key.out_type) { // as a refused plan from now on
            destroy_plan(*plan);
            plan->op = nullptr, plan->a = plan->b = plan->c = nullptr;
            plan->refused = (int)CUBLAS_STATUS_NOT_SUPPORTED;
            return plan->refused;
        }
        return (int)st;
    }
    return 0;
}

static int run(cpdit_gemm_lt *g, const plan_key &key, void *y, const void *x, const void *w,
               const void *b, void *stream, char *msg, size_t msg_size)
{
    std::lock_guard<std::mutex> hold(g->lock);
    return run_locked(g, key, y, x, w, b, stream, msg, msg_size);
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
    cudaError_t e = cudaMalloc(&g->workspace, g->workspace_bytes); // 256-byte aligned
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

extern "C" void cpdit_gemm_lt_destroy(cpdit_gemm_lt *g)
{
    if (!g)
        return;
    for (auto &p : g->plans)
        if (!p.refused)
            destroy_plan(p);
    cudaFree(g->workspace);
    cublasLtDestroy(g->handle);
    delete g;
}

extern "C" int cpdit_gemm_lt_cached_shapes(const cpdit_gemm_lt *g)
{
    return g ? (int)g->plans.size() : 0;
}

extern "C" long cpdit_gemm_lt_bias_copies(const cpdit_gemm_lt *g)
{
    return g ? g->bias_copies.load() : 0;
}

extern "C" int cpdit_gemm_lt_linear(cpdit_gemm_lt *g, cpdit_cuda_dtype dtype, void *y,
                                    const void *x, const void *w, const void *b, int M, int K,
                                    int N, cpdit_gemm_epilogue epilogue, void *stream, char *msg,
                                    size_t msg_size)
{
    if (M == 0 || N == 0)
        return 0;
    const plan_key key{M,
                       K,
                       N,
                       (int)dtype,
                       (int)dtype,
                       K,
                       N,
                       b != nullptr,
                       0,
                       cpdit_lt_pointer_alignment(w),
                       cpdit_lt_pointer_alignment(x),
                       cpdit_lt_pointer_alignment(y),
                       (int)epilogue,
                       (int)dtype};
    return run(g, key, y, x, w, b, stream, msg, msg_size);
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
    return cpdit_gemm_lt_linear_typed(g, wtype, CPDIT_CUDA_F32, y, ldy, x, ldx, w, b, M, K, N,
                                      accumulate, epilogue, stream, msg, msg_size);
}

extern "C" int cpdit_gemm_lt_linear_typed(cpdit_gemm_lt *g, cpdit_cuda_dtype in_type,
                                          cpdit_cuda_dtype out_type, void *y, int ldy,
                                          const void *x, int ldx, const void *w, const float *b,
                                          int M, int K, int N, int accumulate,
                                          cpdit_gemm_epilogue epilogue, void *stream, char *msg,
                                          size_t msg_size)
{
    if (M == 0 || N == 0)
        return 0;
    if (epilogue != CPDIT_GEMM_PLAIN && accumulate) { // act(y + ...) is not y + act(...)
        if (msg && msg_size)
            snprintf(msg, msg_size, "cuBLASLt: an activation epilogue with accumulate");
        return (int)CUBLAS_STATUS_INVALID_VALUE;
    }
    if (in_type == CPDIT_CUDA_F32 && out_type != CPDIT_CUDA_F32) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "cuBLASLt: fp32 inputs with a bf16 output are not used");
        return (int)CUBLAS_STATUS_INVALID_VALUE;
    }
    plan_key key{M,
                 K,
                 N,
                 (int)in_type,
                 (int)out_type,
                 ldx,
                 ldy,
                 b != nullptr,
                 accumulate ? 1 : 0,
                 cpdit_lt_pointer_alignment(w),
                 cpdit_lt_pointer_alignment(x),
                 cpdit_lt_pointer_alignment(y),
                 (int)epilogue,
                 (int)CPDIT_CUDA_F32}; // the bias as given (fp32) first
    int rc = run(g, key, y, x, w, b, stream, msg, msg_size);
    if (rc != (int)CUBLAS_STATUS_NOT_SUPPORTED || !b || out_type == CPDIT_CUDA_F32)
        return rc;
    // bf16 D refused the fp32 bias: a bf16 copy of it, stream-ordered (alloc_cuda.h)
    key.bias_type = (int)CPDIT_CUDA_BF16;
    g->bias_copies++;
    __nv_bfloat16 *b16 = (__nv_bfloat16 *)cpdit_cuda_alloc((size_t)N * sizeof *b16);
    if (!b16) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "cuBLASLt: out of device memory for a bf16 bias");
        return (int)CUBLAS_STATUS_ALLOC_FAILED;
    }
    const int threads = 256, blocks = (N + threads - 1) / threads;
    bias_to_bf16_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(b16, b, N);
    if (cudaGetLastError() != cudaSuccess)
        rc = (int)CUBLAS_STATUS_EXECUTION_FAILED;
    else
        rc = run(g, key, y, x, w, b16, stream, msg, msg_size);
    cpdit_cuda_free(b16);
    return rc;
}
