/* quick_topology.c — a small in-process probe for tune and plan without a file
 * (quick_topology.h). */
#include "topology/quick_topology.h"

#include <cblas.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/job_run.h"
#include "kernels/cpu/attention_cpu.h"

#define Q_GEMM_N 384        /* SGEMM size: 2 n^3 FLOP per call */
#define Q_ATTN_S 512        /* attention: 4 S^2 H D FLOP per call */
#define Q_ATTN_H 4
#define Q_ATTN_D 64
#define Q_REPEATS 3         /* best of */
#define Q_PING_ITERS 20
#define Q_SMALL 4096        /* ping-pong sizes for the alpha-beta fit */
#define Q_LARGE (1 << 20)
#define Q_TAG 4242

static double best_rate(int attention)
{
    const size_t n = attention ? (size_t)Q_ATTN_S * Q_ATTN_H * Q_ATTN_D : (size_t)Q_GEMM_N * Q_GEMM_N;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    float *o = malloc(n * sizeof *o), *lse = malloc((size_t)Q_ATTN_S * Q_ATTN_H * sizeof *lse);
    double best = 0;
    if (a && b && c && o && lse) {
        for (size_t i = 0; i < n; i++)
            a[i] = (float)(i % 17) / 17.0f, b[i] = (float)(i % 13) / 13.0f, c[i] = 0;
        for (int r = 0; r <= Q_REPEATS; r++) {
            cpdit_error e;
            double t0 = MPI_Wtime(), flops;
            if (attention) {
                attention_cpu_forward(o, lse, a, b, c, 1, Q_ATTN_S, Q_ATTN_S, Q_ATTN_H, Q_ATTN_D,
                                      0.125f, &e);
                flops = 4.0 * Q_ATTN_S * Q_ATTN_S * Q_ATTN_H * Q_ATTN_D;
            } else {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q_GEMM_N, Q_GEMM_N,
                            Q_GEMM_N, 1.0f, a, Q_GEMM_N, b, Q_GEMM_N, 0.0f, c, Q_GEMM_N);
                flops = 2.0 * Q_GEMM_N * Q_GEMM_N * Q_GEMM_N;
            }
            double dt = MPI_Wtime() - t0;
            if (r > 0 && dt > 0 && flops / dt > best) /* r = 0 warms up */
                best = flops / dt;
        }
    }
    free(a), free(b), free(c), free(o), free(lse);
    return best;
}

/* Half the round-trip time of bytes between ranks 0 and 1 (others idle). */
static double ping(MPI_Comm world, int rank, char *buf, int bytes)
{
    double t = 0;
    MPI_Barrier(world);
    if (rank < 2) {
        const int peer = 1 - rank;
        double t0 = MPI_Wtime();
        for (int i = 0; i < Q_PING_ITERS; i++) {
            if (rank == 0) {
                MPI_Send(buf, bytes, MPI_BYTE, peer, Q_TAG, world);
                MPI_Recv(buf, bytes, MPI_BYTE, peer, Q_TAG, world, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, bytes, MPI_BYTE, peer, Q_TAG, world, MPI_STATUS_IGNORE);
                MPI_Send(buf, bytes, MPI_BYTE, peer, Q_TAG, world);
            }
        }
        t = (MPI_Wtime() - t0) / (2.0 * Q_PING_ITERS);
    }
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, world);
    return t;
}

cpdit_status quick_topology_json(MPI_Comm world, char **json_text, cpdit_error *err)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    *json_text = NULL;
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    const char *env = getenv("CPDIT_HOSTNAME");
    int len = 0;
    if (env && env[0])
        snprintf(name, sizeof name, "%s", env);
    else
        MPI_Get_processor_name(name, &len);
    char *names = rank == 0 ? calloc((size_t)size, MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
               0, world);
    /* compute rates: every rank at once, as in a run; the slowest rank counts */
    double rates[2] = {best_rate(0), best_rate(1)};
    MPI_Allreduce(MPI_IN_PLACE, rates, 2, MPI_DOUBLE, MPI_MIN, world);
    double t_small = 0, t_large = 0;
    char *buf = calloc(Q_LARGE, 1);
    int ok = buf != NULL;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, world);
    if (ok && size > 1) {
        t_small = ping(world, rank, buf, Q_SMALL);
        t_large = ping(world, rank, buf, Q_LARGE);
    }
    free(buf);
    cpdit_status st = ok ? CPDIT_OK
                         : cpdit_error_set(err, CPDIT_ERR_RUNTIME, "quick probe", "out of memory");
    if (rank == 0 && !st) {
        json_t *doc = json_object(), *hosts = json_array(), *map = json_array();
        int n_hosts = 0, *host_of = calloc((size_t)size, sizeof *host_of);
        for (int r = 0; r < size && host_of; r++) {
            int h = -1;
            for (int q = 0; q < r && h < 0; q++)
                if (strcmp(names + (size_t)q * MPI_MAX_PROCESSOR_NAME,
                           names + (size_t)r * MPI_MAX_PROCESSOR_NAME) == 0)
                    h = host_of[q];
            if (h < 0) {
                h = n_hosts++;
                json_array_append_new(hosts, json_pack("{s:s, s:[]}", "name",
                                                       names + (size_t)r * MPI_MAX_PROCESSOR_NAME,
                                                       "ranks"));
            }
            host_of[r] = h;
            json_array_append(json_object_get(json_array_get(hosts, (size_t)h), "ranks"),
                              json_integer(r));
            json_array_append_new(map, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "rank", r,
                                                 "host", h, "local_rank", -1, "package", -1,
                                                 "numa", -1, "gpu", -1));
        }
        json_t *links = json_pack("{s:[], s:[], s:{}}", "p2p", "collectives", "fits");
        if (size > 1 && t_large > t_small && t_small > 0) {
            const double beta = (Q_LARGE - Q_SMALL) / (t_large - t_small);
            const double alpha = t_small - Q_SMALL / beta > 0 ? t_small - Q_SMALL / beta : 0;
            const char *cls = host_of && host_of[0] != host_of[1] ? "cross_node" : "same_node";
            json_object_set_new(json_object_get(links, "fits"), cls,
                                json_pack("{s:f, s:f, s:i}", "alpha_s", alpha, "beta_Bps", beta,
                                          "samples", 2));
            json_array_append_new(json_object_get(links, "p2p"),
                                  json_pack("{s:s, s:[i,i], s:i, s:f, s:f}", "class", cls,
                                            "ranks", 0, 1, "bytes", Q_SMALL, "time_s_avg",
                                            t_small, "bw_Bps", Q_SMALL / t_small));
            json_array_append_new(json_object_get(links, "p2p"),
                                  json_pack("{s:s, s:[i,i], s:i, s:f, s:f}", "class", cls,
                                            "ranks", 0, 1, "bytes", Q_LARGE, "time_s_avg",
                                            t_large, "bw_Bps", Q_LARGE / t_large));
        }
        json_object_set_new(doc, "format", json_integer(1));
        json_object_set_new(doc, "quick", json_true());
        json_object_set_new(doc, "ranks", json_integer(size));
        json_object_set_new(doc, "hosts", hosts);
        json_object_set_new(doc, "rank_map", map);
        json_object_set_new(doc, "links", links);
        json_object_set_new(doc, "compute",
                            json_pack("{s:f, s:f, s:i}", "sgemm_flops", rates[0],
                                      "attention_flops", rates[1], "threads_per_rank", 1));
        *json_text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(doc);
        free(host_of);
        if (!*json_text)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "quick probe", "out of memory");
    }
    free(names);
    return job_bcast_status(world, 0, st, err);
}
