/* backend_ops_run.c — running the op cases of kernels/backend_ops.h on a backend: each part
 * of a case in the backend's memory (activations through upload_act/download_act in the
 * table's act_dtype, fp32 parameters and the LSE through upload/download, host-only parts
 * left on the host), outputs that start from an input set from it, and `cpdit bench ops`
 * (best time of reps calls after a warm-up, GB/s with activations at the table's act_size).
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend_ops.h"

#define OPS_WHERE "backend ops"
#define NS_PER_S 1e9
#define ACT BACKEND_OP_ACT
#define P32 BACKEND_OP_F32
#define HOST BACKEND_OP_HOST

/* A case's parts in a backend's memory (host parts stay NULL: they are read from the host
 * inputs). */
typedef struct op_bufs {
    backend_op_parts in, out;
    void *in_mem[BACKEND_OP_MAX_PARTS], *out_mem[BACKEND_OP_MAX_PARTS];
    size_t n_in, n_out; /* host values */
} op_bufs;

static size_t part_bytes(const cpdit_backend *be, backend_op_kind kind, size_t count)
{
    return kind == ACT ? cpdit_act_bytes(be, count) : count * sizeof(float);
}

static void bufs_free(const cpdit_backend *be, op_bufs *b)
{
    for (int i = 0; i < BACKEND_OP_MAX_PARTS; i++) {
        be->free(b->in_mem[i]);
        be->free(b->out_mem[i]);
    }
}

static cpdit_status bufs_alloc(const cpdit_backend *be, const backend_op_case *c, const int *d,
                               op_bufs *b, cpdit_error *err)
{
    memset(b, 0, sizeof *b);
    backend_op_layout(c, d, &b->in, &b->out);
    int ok = 1;
    for (int i = 0; i < b->in.n; i++) {
        b->n_in += b->in.count[i];
        if (b->in.kind[i] != HOST) /* one spare value: no zero-byte blocks */
            ok &= (b->in_mem[i] = be->alloc(part_bytes(be, b->in.kind[i], b->in.count[i] + 1)))
                  != NULL;
    }
    for (int i = 0; i < b->out.n; i++) {
        b->n_out += b->out.count[i];
        ok &= (b->out_mem[i] =
                   be->alloc(part_bytes(be, b->out.kind[i], b->out.count[i] + 1))) != NULL;
    }
    if (!ok) {
        bufs_free(be, b);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, OPS_WHERE,
                               "%s: out of backend memory (%zu + %zu values)", c->name, b->n_in,
                               b->n_out);
    }
    return CPDIT_OK;
}

/* host (count values) into a part of kind at mem. */
static void part_upload(const cpdit_backend *be, backend_op_kind kind, void *mem,
                        const float *host, size_t count)
{
    if (kind == ACT)
        be->upload_act(mem, host, count);
    else if (kind == P32)
        be->upload(mem, host, count * sizeof(float));
}

/* The host inputs into b's input parts and into the outputs that start from one; io points
 * at them (host parts at host_in). */
static void bufs_upload(const cpdit_backend *be, op_bufs *b, const float *host_in,
                        backend_op_io *io)
{
    memset(io, 0, sizeof *io);
    size_t off[BACKEND_OP_MAX_PARTS], o = 0;
    for (int i = 0; i < b->in.n; i++) {
        off[i] = o;
        o += b->in.count[i];
        part_upload(be, b->in.kind[i], b->in_mem[i], host_in + off[i], b->in.count[i]);
        if (b->in.kind[i] == ACT)
            io->act_in[i] = b->in_mem[i];
        else if (b->in.kind[i] == P32)
            io->f32_in[i] = b->in_mem[i];
        else
            io->host_in[i] = host_in + off[i];
    }
    for (int i = 0; i < b->out.n; i++) {
        const int from = b->out.from[i];
        if (from >= 0 && from < b->in.n)
            part_upload(be, b->out.kind[i], b->out_mem[i], host_in + off[from],
                        b->out.count[i]);
        if (b->out.kind[i] == ACT)
            io->act_out[i] = b->out_mem[i];
        else
            io->f32_out[i] = b->out_mem[i];
    }
}

static void bufs_download(const cpdit_backend *be, const op_bufs *b, float *host_out)
{
    size_t o = 0;
    for (int i = 0; i < b->out.n; i++) {
        if (b->out.kind[i] == ACT)
            be->download_act(host_out + o, b->out_mem[i], b->out.count[i]);
        else
            be->download(host_out + o, b->out_mem[i], b->out.count[i] * sizeof(float));
        o += b->out.count[i];
    }
}

/* Bytes of b's parts on be over their bytes at 4 per value (1 for fp32 tables, about 1/2 for
 * bf16 activations): scales a case's fp32 byte count to the backend. */
static double bytes_ratio(const cpdit_backend *be, const op_bufs *b)
{
    double on_be = 0, f32 = 0;
    for (int i = 0; i < b->in.n; i++) {
        on_be += (double)part_bytes(be, b->in.kind[i], b->in.count[i]);
        f32 += (double)b->in.count[i] * sizeof(float);
    }
    for (int i = 0; i < b->out.n; i++) {
        on_be += (double)part_bytes(be, b->out.kind[i], b->out.count[i]);
        f32 += (double)b->out.count[i] * sizeof(float);
    }
    return f32 > 0 ? on_be / f32 : 1.0;
}

cpdit_status backend_op_run_host(const cpdit_backend *be, const cpdit_attention_kernel *kernel,
                                 const backend_op_case *c, const int *d, float *host_out,
                                 const float *host_in, cpdit_error *err)
{
    op_bufs b;
    cpdit_status st = bufs_alloc(be, c, d, &b, err);
    if (st)
        return st;
    backend_op_io io;
    bufs_upload(be, &b, host_in, &io);
    void *ctx = NULL;
    if (c->setup)
        st = c->setup(be, d, host_in, &ctx, err);
    if (!st)
        st = c->run(be, kernel, ctx, d, &io, err);
    if (!st)
        st = be->sync(err);
    if (!st)
        bufs_download(be, &b, host_out);
    if (ctx && c->teardown)
        c->teardown(be, ctx);
    bufs_free(be, &b);
    return st;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / NS_PER_S;
}

/* Best seconds per call of c at d on be (one warm-up call, then reps); < 0 on failure.
 * *ratio: bytes_ratio of the case on be. Outputs that start from an input are set once,
 * before the warm-up (in-place ops then work on their previous result). */
static double time_case(const cpdit_backend *be, const cpdit_attention_kernel *k,
                        const backend_op_case *c, const int *d, int reps, double *ratio,
                        cpdit_error *err)
{
    op_bufs b;
    if (bufs_alloc(be, c, d, &b, err))
        return -1.0;
    *ratio = bytes_ratio(be, &b);
    float *host = malloc((b.n_in + 1) * sizeof(float));
    double best = -1.0;
    if (host) {
        if (c->fill)
            c->fill(d, host, b.n_in, 1);
        else
            backend_op_fill_uniform(host, b.n_in, 1);
        backend_op_io io;
        bufs_upload(be, &b, host, &io);
        void *ctx = NULL;
        best = c->setup && c->setup(be, d, host, &ctx, err) ? -1.0 : INFINITY;
        for (int r = -1; r < reps && best > 0; r++) {
            const double t0 = now_s();
            if (c->run(be, k, ctx, d, &io, err)) {
                best = -1.0;
                break;
            }
            if (be->sync(err)) { /* an asynchronous backend has finished the call */
                best = -1.0;
                break;
            }
            const double t = now_s() - t0;
            if (r >= 0 && t < best)
                best = t;
        }
        if (ctx && c->teardown)
            c->teardown(be, ctx);
    } else {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, OPS_WHERE, "out of memory");
    }
    free(host);
    bufs_free(be, &b);
    return best;
}

cpdit_status backend_ops_bench(FILE *out, const char *only_backend, const char *only_op,
                               int reps, cpdit_error *err)
{
    int found = 0;
    fprintf(out, "%-20s %-14s %-8s %-34s %12s %10s %9s\n", "op", "kernel", "backend", "shape",
            "us/call", "GFLOP/s", "GB/s");
    for (const cpdit_backend *const *b = cpdit_backend_list(); *b; b++) {
        if (only_backend && strcmp(only_backend, (*b)->name))
            continue;
        char why[256];
        if (!cpdit_backend_available(*b, why, sizeof why)) {
            if (only_backend) /* asked for by name: say so as an error */
                return cpdit_error_set(err, CPDIT_ERR_RUNTIME, OPS_WHERE,
                                       "the %s backend cannot run here: %s", (*b)->name, why);
            fprintf(out, "# %s: not available here (%s)\n", (*b)->name, why);
            continue;
        }
        for (const backend_op_case *const *c = backend_op_cases(); *c; c++) {
            if (only_op && strcmp(only_op, (*c)->name))
                continue;
            found = 1;
            if ((*c)->supported && !(*c)->supported(*b))
                continue; /* an optional entry this table lacks */
            const int *d = (*c)->shapes[(*c)->nshapes - 1].d;
            const cpdit_attention_kernel *const none[] = {NULL, NULL};
            const cpdit_attention_kernel *const *ks = (*c)->per_kernel ? (*b)->attention_kernels
                                                                      : none;
            for (; *ks || ks == none; ks++) {
                char shape[64];
                double ratio = 1.0;
                const double t = time_case(*b, *ks, *c, d, reps, &ratio, err);
                if (t < 0)
                    return err ? err->status : CPDIT_ERR_RUNTIME;
                const double fl = (*c)->flops(d), by = (*c)->bytes(d) * ratio;
                fprintf(out, "%-20s %-14s %-8s %-34s %12.2f %10.2f %9.2f\n", (*c)->name,
                        *ks ? (*ks)->name : "-", (*b)->name,
                        backend_op_shape_text(*c, d, shape, sizeof shape), t * 1e6,
                        fl > 0 ? fl / t / 1e9 : 0.0, by / t / 1e9);
                fflush(out);
                if (ks == none)
                    break;
            }
        }
    }
    if (!found)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, OPS_WHERE,
                               "no op '%s' on backend '%s' (see cpdit --version for backends)",
                               only_op ? only_op : "*", only_backend ? only_backend : "*");
    return CPDIT_OK;
}
