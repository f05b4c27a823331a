/* sdpa_cudnn.c — cuDNN fused attention through the cuDNN 9 backend API (see sdpa_cudnn.h).
 *
 * Every descriptor a plan was built from is kept with the plan (cuDNN's examples keep the graph
 * alive as long as its plan) and destroyed with the context.
 */
#include "config.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/alloc_cuda.h"
#include "kernels/cuda/sdpa_cudnn.h"
#include "kernels/cuda/sdpa_layout.h"

/* Unique ids of the graph's tensors (the variant pack names its pointers by them). */
enum {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_STATS,
    UID_SCALE,
    UID_VIRTUAL = 100 /* intermediates count up from here */
};
enum { N_IO = 6, MAX_OPS = 10 };

typedef struct sdpa_plan {
    int B, Sq, Skv, H, D;
    int ok;         /* 1: plan usable; 0: refused (why) */
    char why[256];
    cudnnBackendDescriptor_t plan;
    int64_t ws_bytes;
    cudnnBackendDescriptor_t *descs; /* everything the plan was made from */
    int ndescs, cap;
    struct sdpa_plan *next;
} sdpa_plan;

struct cpdit_cudnn_sdpa {
    cudnnHandle_t handle;
    pthread_mutex_t lock;
    sdpa_plan *plans;
    int nplans;
};

/* ------------------------------------------------------------------ descriptor building */

typedef struct builder {
    sdpa_plan *p;
    cudnnStatus_t st; /* first failure */
    char what[128];   /* the step that failed */
    int64_t next_uid;
    cudnnBackendDescriptor_t ops[MAX_OPS];
    int nops;
} builder;

static void fail(builder *b, cudnnStatus_t st, const char *what)
{
    if (b->st)
        return;
    b->st = st ? st : CUDNN_STATUS_INTERNAL_ERROR;
    snprintf(b->what, sizeof b->what, "%s", what);
}

static void keep(builder *b, cudnnBackendDescriptor_t d)
{
    sdpa_plan *p = b->p;
    if (p->ndescs == p->cap) {
        const int cap = p->cap ? 2 * p->cap : 64;
        cudnnBackendDescriptor_t *n = realloc(p->descs, (size_t)cap * sizeof *n);
        if (!n) {
            cudnnBackendDestroyDescriptor(d);
            fail(b, CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "host memory for descriptors");
            return;
        }
        p->descs = n;
        p->cap = cap;
    }
    p->descs[p->ndescs++] = d;
}

static cudnnBackendDescriptor_t make(builder *b, cudnnBackendDescriptorType_t type,
                                     const char *what)
{
    cudnnBackendDescriptor_t d = NULL;
    if (b->st)
        return NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        fail(b, st, what);
        return NULL;
    }
    keep(b, d);
    return b->st ? NULL : d;
}

static void set(builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t n, const void *values, const char *what)
{
    if (b->st)
        return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, n, values);
    if (st != CUDNN_STATUS_SUCCESS)
        fail(b, st, what);
}

static void finalize(builder *b, cudnnBackendDescriptor_t d, const char *what)
{
    if (b->st)
        return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS)
        fail(b, st, what);
}

/* A 4-d tensor: dims and strides in cuDNN's [B, H, rows, cols] order. */
static cudnnBackendDescriptor_t tensor(builder *b, int64_t uid, cudnnDataType_t type,
                                       const cpdit_sdpa_tensor *t_, bool is_virtual,
                                       bool by_value, const char *what)
{
    cudnnBackendDescriptor_t t = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t align = 16;
    if (!uid)
        uid = b->next_uid++;
    set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
    set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t_->dim, what);
    set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t_->stride, what);
    set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
    if (is_virtual)
        set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    if (by_value)
        set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    finalize(b, t, what);
    return t;
}

static void add_op(builder *b, cudnnBackendDescriptor_t op)
{
    if (b->st)
        return;
    if (b->nops == MAX_OPS) {
        fail(b, CUDNN_STATUS_INTERNAL_ERROR, "too many operations");
        return;
    }
    b->ops[b->nops++] = op;
}

/* An operation's descriptor-valued attribute (skipped when d is NULL). */
typedef struct op_attr {
    cudnnBackendAttributeName_t name;
    cudnnBackendDescriptor_t d;
} op_attr;

/* Operation `type` with its descriptor attributes set; op_end finalises it into b->ops. */
static cudnnBackendDescriptor_t op_begin(builder *b, cudnnBackendDescriptorType_t type,
                                         const op_attr *attrs, int n, const char *what)
{
    cudnnBackendDescriptor_t op = make(b, type, what);
    for (int i = 0; i < n; i++)
        if (attrs[i].d)
            set(b, op, attrs[i].name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &attrs[i].d, what);
    return op;
}

static void op_end(builder *b, cudnnBackendDescriptor_t op, const char *what)
{
    finalize(b, op, what);
    add_op(b, op);
}

/* A finalised descriptor of `type` with one attribute of `atype` (a mode) and its fp32
 * compute/math precision. */
static cudnnBackendDescriptor_t mode_desc(builder *b, cudnnBackendDescriptorType_t type,
                                          cudnnBackendAttributeName_t mode_name,
                                          cudnnBackendAttributeType_t mode_type,
                                          const void *mode, cudnnBackendAttributeName_t prec_name,
                                          const char *what)
{
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t d = make(b, type, what);
    if (mode)
        set(b, d, mode_name, mode_type, 1, mode, what);
    set(b, d, prec_name, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    finalize(b, d, what);
    return d;
}

/* y = mode(x) or mode(x, bb), fp32 math, alpha1 = alpha2 = 1. */
static void pointwise(builder *b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t bb, cudnnBackendDescriptor_t y, const char *what)
{
    const float one = 1.0f;
    cudnnBackendDescriptor_t pw =
        mode_desc(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_MODE,
                  CUDNN_TYPE_POINTWISE_MODE, &mode, CUDNN_ATTR_POINTWISE_MATH_PREC, what);
    const op_attr attrs[] = {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw},
                             {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
                             {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bb},
                             {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}};
    cudnnBackendDescriptor_t op =
        op_begin(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, attrs, 4, what);
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, what);
    if (bb)
        set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, what);
    op_end(b, op, what);
}

/* y = reduce(x) over the last dimension (y's last dim is 1), fp32. */
static void reduction(builder *b, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t y, const char *what)
{
    cudnnBackendDescriptor_t r =
        mode_desc(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_OPERATOR,
                  CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode, CUDNN_ATTR_REDUCTION_COMP_TYPE, what);
    const op_attr attrs[] = {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x},
                             {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y},
                             {CUDNN_ATTR_OPERATION_REDUCTION_DESC, r}};
    op_end(b, op_begin(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, attrs, 3, what), what);
}

/* c = a b (batched over the first two dims), fp32 accumulate. */
static void matmul(builder *b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bb,
                   cudnnBackendDescriptor_t c, const char *what)
{
    cudnnBackendDescriptor_t mm =
        mode_desc(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE,
                  CUDNN_TYPE_DATA_TYPE, NULL, CUDNN_ATTR_MATMUL_COMP_TYPE, what);
    const op_attr attrs[] = {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, a},
                             {CUDNN_ATTR_OPERATION_MATMUL_BDESC, bb},
                             {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c},
                             {CUDNN_ATTR_OPERATION_MATMUL_DESC, mm}};
    op_end(b, op_begin(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, attrs, 4, what), what);
}

/* The ten operations of the graph (sdpa_cudnn.h) into b->ops; shapes from sdpa_layout.h. */
static void build_ops(builder *b, int B, int Sq, int Skv, int H, int D)
{
    const cudnnDataType_t BF = CUDNN_DATA_BFLOAT16, F32 = CUDNN_DATA_FLOAT;
    b->next_uid = UID_VIRTUAL;
    const cpdit_sdpa_layout l = cpdit_sdpa_layout_for(B, Sq, Skv, H, D);
    const cpdit_sdpa_tensor one = cpdit_sdpa_tensor_of(1, 1, 1, 1, 1, 1, 1, 1);

    cudnnBackendDescriptor_t tq = tensor(b, UID_Q, BF, &l.q, false, false, "tensor Q");
    cudnnBackendDescriptor_t tk = tensor(b, UID_K, BF, &l.kt, false, false, "tensor K^T");
    cudnnBackendDescriptor_t tv = tensor(b, UID_V, BF, &l.v, false, false, "tensor V");
    cudnnBackendDescriptor_t to = tensor(b, UID_O, BF, &l.o, false, false, "tensor O");
    cudnnBackendDescriptor_t tstats =
        tensor(b, UID_STATS, F32, &l.stats, false, false, "tensor Stats");
    cudnnBackendDescriptor_t tscale =
        tensor(b, UID_SCALE, F32, &one, false, true, "tensor scale (by value)");

    cudnnBackendDescriptor_t s1 = tensor(b, 0, F32, &l.scores, true, false, "tensor S");
    cudnnBackendDescriptor_t s2 = tensor(b, 0, F32, &l.scores, true, false, "tensor S*scale");
    cudnnBackendDescriptor_t mx = tensor(b, 0, F32, &l.stats, true, false, "tensor max");
    cudnnBackendDescriptor_t s3 = tensor(b, 0, F32, &l.scores, true, false, "tensor S-max");
    cudnnBackendDescriptor_t s4 = tensor(b, 0, F32, &l.scores, true, false, "tensor exp");
    cudnnBackendDescriptor_t sum = tensor(b, 0, F32, &l.stats, true, false, "tensor sum");
    cudnnBackendDescriptor_t lg = tensor(b, 0, F32, &l.stats, true, false, "tensor log sum");
    /* the softmax output feeds bmm2 in the I/O type (cuDNN's rule for its A operand) */
    cudnnBackendDescriptor_t p = tensor(b, 0, BF, &l.scores, true, false, "tensor P");

    matmul(b, tq, tk, s1, "matmul Q K^T");
    pointwise(b, CUDNN_POINTWISE_MUL, s1, tscale, s2, "pointwise scale");
    reduction(b, CUDNN_REDUCE_TENSOR_MAX, s2, mx, "reduction max");
    pointwise(b, CUDNN_POINTWISE_SUB, s2, mx, s3, "pointwise sub max");
    pointwise(b, CUDNN_POINTWISE_EXP, s3, NULL, s4, "pointwise exp");
    reduction(b, CUDNN_REDUCE_TENSOR_ADD, s4, sum, "reduction sum");
    pointwise(b, CUDNN_POINTWISE_LOG, sum, NULL, lg, "pointwise log");
    pointwise(b, CUDNN_POINTWISE_ADD, mx, lg, tstats, "pointwise stats = max + log sum");
    pointwise(b, CUDNN_POINTWISE_DIV, s4, sum, p, "pointwise softmax divide");
    matmul(b, p, tv, to, "matmul P V");
}

static void plan_free(sdpa_plan *p)
{
    if (!p)
        return;
    if (p->plan)
        cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->ndescs - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(p->descs[i]);
    free(p->descs);
    free(p);
}

static const char *status_text(cudnnStatus_t st)
{
    return cudnnGetErrorString(st);
}

int cpdit_cudnn_sdpa_check_ops(int B, int Sq, int Skv, int H, int D, char *msg, size_t msg_size)
{
    sdpa_plan *p = calloc(1, sizeof *p);
    if (!p) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "out of memory");
        return CPDIT_CUDNN_SDPA_ERROR;
    }
    builder b;
    memset(&b, 0, sizeof b);
    b.p = p;
    build_ops(&b, B, Sq, Skv, H, D);
    int rc = 0;
    if (b.st) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "cuDNN: %s: %s", b.what, status_text(b.st));
        rc = CPDIT_CUDNN_SDPA_ERROR;
    } else if (b.nops != MAX_OPS) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "graph has %d operations, expected %d", b.nops, MAX_OPS);
        rc = CPDIT_CUDNN_SDPA_ERROR;
    }
    plan_free(p);
    return rc;
}

/* The graph, the heuristics' engine configs in order, the first that finalises into a plan.
 * Fills p->ok/why; returns 0 (p->ok says whether a plan exists) or -1 when out of host
 * memory. */
static int build_plan(cudnnHandle_t handle, sdpa_plan *p)
{
    builder b;
    memset(&b, 0, sizeof b);
    b.p = p;
    build_ops(&b, p->B, p->Sq, p->Skv, p->H, p->D);
    cudnnBackendDescriptor_t graph = make(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                                          "operation graph");
    set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, b.nops, b.ops,
        "operation graph ops");
    set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
        "operation graph handle");
    finalize(&b, graph, "operation graph");
    if (b.st) {
        /* a graph cuDNN rejects for this shape is a refusal (the caller falls back), with the
         * step and status as the reason */
        snprintf(p->why, sizeof p->why, "%s: %s", b.what, status_text(b.st));
        p->ok = 0;
        return 0;
    }
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    int tried = 0;
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int m = 0; m < 2 && !p->plan; m++) {
        builder hb = b; /* the same plan's descriptor list */
        cudnnBackendDescriptor_t heur = make(&hb, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
        set(&hb, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &graph, "heuristics graph");
        set(&hb, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m],
            "heuristics mode");
        finalize(&hb, heur, "heuristics");
        int64_t count = 0;
        if (!hb.st) {
            cudnnStatus_t st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                                        NULL);
            if (st != CUDNN_STATUS_SUCCESS)
                fail(&hb, st, "heuristics result count");
        }
        if (hb.st) {
            last = hb.st;
            snprintf(p->why, sizeof p->why, "%s: %s", hb.what, status_text(hb.st));
            continue;
        }
        if (count <= 0)
            continue;
        cudnnBackendDescriptor_t *cfg = calloc((size_t)count, sizeof *cfg);
        if (!cfg)
            return -1;
        int64_t made = 0;
        for (int64_t i = 0; i < count; i++)
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]) !=
                CUDNN_STATUS_SUCCESS)
                break;
            else
                made++;
        int64_t got = 0;
        cudnnStatus_t st = made == count
                               ? cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                                          &got, cfg)
                               : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        if (st != CUDNN_STATUS_SUCCESS)
            got = 0, last = st;
        for (int64_t i = 0; i < got && !p->plan; i++) {
            cudnnBackendDescriptor_t plan = NULL;
            tried++;
            st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                              CUDNN_TYPE_HANDLE, 1, &handle);
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnnBackendFinalize(plan);
            int64_t ws = 0, n = 0;
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &n, &ws);
            if (st == CUDNN_STATUS_SUCCESS) {
                p->plan = plan;
                p->ws_bytes = ws;
                keep(&hb, cfg[i]); /* the plan's engine config lives with it */
                cfg[i] = NULL;
            } else {
                last = st;
                if (plan)
                    cudnnBackendDestroyDescriptor(plan);
            }
        }
        for (int64_t i = 0; i < made; i++)
            if (cfg[i])
                cudnnBackendDestroyDescriptor(cfg[i]);
        free(cfg);
        b = hb;
    }
    if (!p->plan) {
        if (tried)
            snprintf(p->why, sizeof p->why,
                     "no engine configuration finalises (%d tried; last status: %s)", tried,
                     status_text(last));
        else if (!p->why[0])
            snprintf(p->why, sizeof p->why, "the heuristics offer no engine");
        p->ok = 0;
        return 0;
    }
    p->ok = 1;
    return 0;
}

/* ------------------------------------------------------------------ the context */

cpdit_cudnn_sdpa *cpdit_cudnn_sdpa_create(char *msg, size_t msg_size)
{
    cpdit_cudnn_sdpa *s = calloc(1, sizeof *s);
    if (!s) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "out of memory");
        return NULL;
    }
    cudnnStatus_t st = cudnnCreate(&s->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "cudnnCreate: %s", status_text(st));
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    return s;
}

void cpdit_cudnn_sdpa_destroy(cpdit_cudnn_sdpa *s)
{
    if (!s)
        return;
    for (sdpa_plan *p = s->plans, *n; p; p = n) {
        n = p->next;
        plan_free(p);
    }
    cudnnDestroy(s->handle);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int cpdit_cudnn_sdpa_cached_shapes(const cpdit_cudnn_sdpa *s)
{
    return s ? s->nplans : 0;
}

static void shape_text(char *buf, size_t size, int B, int Sq, int Skv, int H, int D)
{
    snprintf(buf, size, "B %d, Sq %d, Skv %d, H %d, D %d", B, Sq, Skv, H, D);
}

/* The plan of a shape, built on first use; under s->lock. NULL only when out of host memory or
 * on a hard cuDNN failure (msg filled). */
static sdpa_plan *plan_for(cpdit_cudnn_sdpa *s, int B, int Sq, int Skv, int H, int D, char *msg,
                           size_t msg_size)
{
    for (sdpa_plan *p = s->plans; p; p = p->next)
        if (p->B == B && p->Sq == Sq && p->Skv == Skv && p->H == H && p->D == D)
            return p;
    sdpa_plan *p = calloc(1, sizeof *p);
    if (!p) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "out of memory");
        return NULL;
    }
    p->B = B, p->Sq = Sq, p->Skv = Skv, p->H = H, p->D = D;
    const char *old_cudnn = cpdit_sdpa_version_refused(cudnnGetVersion());
    if (old_cudnn) {
        snprintf(p->why, sizeof p->why, "%s (this is cuDNN %zu)", old_cudnn, cudnnGetVersion());
    } else if (!cpdit_sdpa_head_dim_ok(D)) {
        /* cuDNN's fused attention engines take head dims that are multiples of 8 up to 256 */
        snprintf(p->why, sizeof p->why, "head dim %d is not a multiple of 8 up to 256", D);
    } else if (build_plan(s->handle, p) != 0) {
        char shape[96];
        shape_text(shape, sizeof shape, B, Sq, Skv, H, D);
        if (msg && msg_size)
            snprintf(msg, msg_size, "cuDNN attention (%s): %s", shape, p->why);
        plan_free(p);
        return NULL;
    }
    if (!p->ok && p->ndescs) { /* a refusal keeps only its reason */
        sdpa_plan *q = calloc(1, sizeof *q);
        if (q) {
            *q = *p;
            q->descs = NULL, q->ndescs = q->cap = 0, q->plan = NULL;
            plan_free(p);
            p = q;
        }
    }
    p->next = s->plans;
    s->plans = p;
    s->nplans++;
    return p;
}

static int refused(const sdpa_plan *p, char *msg, size_t msg_size)
{
    char shape[96];
    shape_text(shape, sizeof shape, p->B, p->Sq, p->Skv, p->H, p->D);
    if (msg && msg_size)
        snprintf(msg, msg_size, "cuDNN has no fused attention engine for %s: %s", shape, p->why);
    return CPDIT_CUDNN_SDPA_UNSUPPORTED;
}

int cpdit_cudnn_sdpa_prepare(cpdit_cudnn_sdpa *s, int B, int Sq, int Skv, int H, int D, char *msg,
                             size_t msg_size)
{
    pthread_mutex_lock(&s->lock);
    sdpa_plan *p = plan_for(s, B, Sq, Skv, H, D, msg, msg_size);
    int rc = !p ? CPDIT_CUDNN_SDPA_ERROR : p->ok ? 0 : refused(p, msg, msg_size);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int cpdit_cudnn_sdpa_forward(cpdit_cudnn_sdpa *s, const void *q, const void *k, const void *v,
                             void *o, float *stats, int B, int Sq, int Skv, int H, int D,
                             float scale, void *stream, char *msg, size_t msg_size)
{
    pthread_mutex_lock(&s->lock);
    sdpa_plan *p = plan_for(s, B, Sq, Skv, H, D, msg, msg_size);
    int rc = 0;
    if (!p) {
        rc = CPDIT_CUDNN_SDPA_ERROR;
        goto out;
    }
    if (!p->ok) {
        rc = refused(p, msg, msg_size);
        goto out;
    }
    void *ws = NULL;
    if (p->ws_bytes > 0 && !(ws = cpdit_cuda_alloc((size_t)p->ws_bytes))) {
        if (msg && msg_size)
            snprintf(msg, msg_size, "out of device memory for the cuDNN workspace (%lld bytes)",
                     (long long)p->ws_bytes);
        rc = CPDIT_CUDNN_SDPA_ERROR;
        goto out;
    }
    cudnnStatus_t st = cudnnSetStream(s->handle, (cudaStream_t)stream);
    int64_t uids[N_IO] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE};
    /* the scale is by value: a host pointer, read when the plan is launched */
    void *ptrs[N_IO] = {(void *)q, (void *)k, (void *)v, o, stats, &scale};
    cudnnBackendDescriptor_t pack = NULL;
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                      N_IO, uids);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                      CUDNN_TYPE_VOID_PTR, N_IO, ptrs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                      CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(pack);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendExecute(s->handle, p->plan, pack);
    if (pack)
        cudnnBackendDestroyDescriptor(pack);
    /* stream-ordered reuse: the next user of the block queues after this execution */
    cpdit_cuda_free(ws);
    if (st != CUDNN_STATUS_SUCCESS) {
        char shape[96];
        shape_text(shape, sizeof shape, B, Sq, Skv, H, D);
        if (msg && msg_size)
            snprintf(msg, msg_size, "cuDNN attention (%s): execute: %s", shape, status_text(st));
        rc = CPDIT_CUDNN_SDPA_ERROR;
    }
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}
