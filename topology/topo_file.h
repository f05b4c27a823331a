/* topo_file.h — the planner's reader of a topology file (format 1, /work/wt/TOPOLOGY-FORMAT.md,
 * documented in topology/README.md), and the "tuned" section that `cpdit tune` rewrites.
 *
 * The reader takes what the cost model needs: the rank map (host, package, NUMA node, GPU of
 * every rank), the fitted alpha-beta link parameters per pair class, the per-rank compute
 * rates, memory sizes, the measured point-to-point table (for the report's charts) and the
 * measured winners of earlier `cpdit tune` runs. Keys it does not know are ignored; the whole
 * JSON document is kept so that topo_file_save_tuned can rewrite the file with every other
 * key as it was.
 *
 * Errors (CPDIT_ERR_INPUT, where = the file): a format other than 1 ("format 2: this cpdit
 * reads topology format 1 ..."), missing or mistyped required keys (format, ranks, rank_map,
 * compute.sgemm_flops), a rank map that does not cover ranks 0..ranks-1.
 */
#ifndef CPDIT_TOPO_FILE_H
#define CPDIT_TOPO_FILE_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TOPO_FORMAT 1

/* Link classes of a rank pair, narrowest first (the order of "wider" in the fallback rule). */
typedef enum topo_class {
    TOPO_SAME_NUMA = 0,
    TOPO_SAME_SOCKET,
    TOPO_SAME_NODE,
    TOPO_CROSS_NODE,
    TOPO_NCLASS
} topo_class;

/* "same_numa", ... ; NULL out of range. */
const char *topo_class_name(topo_class c);
/* -1 for an unknown name. */
int topo_class_parse(const char *name);

/* Conservative link costs used when no class at or above the one asked for was measured
 * (documented in topology/COST-MODEL.md): shared memory inside a node, 10 Gbit/s Ethernet
 * across nodes. */
#define TOPO_DEFAULT_INTRA_ALPHA_S 5e-6
#define TOPO_DEFAULT_INTRA_BETA_BPS 5e9
#define TOPO_DEFAULT_CROSS_ALPHA_S 5e-5
#define TOPO_DEFAULT_CROSS_BETA_BPS 1.25e9
/* Compute rate per rank assumed when the file has no "compute" (cpdit probe --no-compute). */
#define TOPO_DEFAULT_FLOPS 1e11

typedef struct topo_fit {
    int measured;   /* 1 when the file has links.fits[class] */
    double alpha_s; /* latency, s */
    double beta_Bps; /* bandwidth, bytes/s */
    int samples;
} topo_fit;

typedef struct topo_rank {
    int host, local_rank, package, numa, gpu; /* -1 when unknown (gpu: none) */
} topo_rank;

typedef struct topo_host {
    char *name;
    int nranks;              /* ranks placed on it (from rank_map) */
    double memory_bytes;     /* hwloc.memory_bytes, 0 when unknown */
    int ngpus;
    int nnics;               /* hwloc.nics entries (network links a host's ranks share) */
    double gpu_memory_bytes; /* smallest GPU's memory_bytes, 0 when unknown */
} topo_host;

/* One row of links.p2p (for the bandwidth chart). */
typedef struct topo_p2p {
    topo_class cls;
    double bytes, time_s_avg, bw_Bps;
    double time_s_min; /* the best trial (what the fit uses); 0 when the row has none */
    int rank_a, rank_b; /* the pair ("ranks"); -1 when absent */
} topo_p2p;

/* One row of links.collectives. */
typedef enum topo_coll_op { TOPO_ALLTOALL = 0, TOPO_ALLGATHER, TOPO_SENDRECV_RING } topo_coll_op;
typedef struct topo_coll {
    topo_coll_op op;
    int group_size;
    topo_class cls;     /* widest pair class of the group */
    double bytes;       /* per-rank send size */
    double time_s_avg;
    double time_s_min;  /* 0 when absent */
    double algbw_Bps, busbw_Bps; /* as nccl-tests define them; 0 when absent */
} topo_coll;

typedef struct topo_grid_time {
    int dp, ring, ulysses;
    char variant[40];
    double step_s; /* measured seconds per transformer step; 0 for a "chosen" entry */
} topo_grid_time;

/* What changes a transformer step's time: the key of a tuned entry. A run reuses a measured
 * winner only when every field is the same. */
#define TOPO_KEY_NAME_MAX 24
typedef struct topo_tuned_key {
    const char *model;  /* "builtin:tiny" or an absolute folder path */
    int width, height;  /* pixels */
    int frames;         /* 1 for an image */
    int text_tokens;    /* T5 / UMT5 tokens (max_sequence_length as resolved) */
    int cfg;            /* 1: two forwards per step (true CFG / negative prompt) */
    int ranks;
    int threads;        /* BLAS / kernel threads per rank */
    const char *backend; /* "cpu", "cpu-bf16", "cuda" */
    const char *dtype;   /* activation dtype: "f32", "bf16" */
} topo_tuned_key;

typedef struct topo_tuned {
    char *model;        /* "builtin:tiny" or an absolute folder path */
    int width, height, ranks;
    /* the rest of the key (topo_tuned_key); -1 / "" in an entry written before they were
     * recorded: such an entry is read but never matches (its tokens and CFG are unknown) */
    int frames, text_tokens, cfg, threads;
    char backend[TOPO_KEY_NAME_MAX], dtype[TOPO_KEY_NAME_MAX];
    int images;         /* the job the choice was made for (1: latency; 0: unknown); not part
                           of the key: other jobs rank the measured times themselves */
    topo_grid_time chosen;
    topo_grid_time *measured;
    int n_measured;
} topo_tuned;

/* compute.shapes[]: times measured at one model's own shapes (probe_shapes.h). */
typedef struct topo_shape_linear {
    int cp;        /* context-parallel degree */
    double time_s; /* every linear layer of one forward on one rank */
} topo_shape_linear;
typedef struct topo_shape_attn {
    int sq, skv, heads, head_dim;
    double time_s; /* one attention-kernel call */
} topo_shape_attn;
typedef struct topo_shapes {
    char *model;
    int width, height, txt_tokens, img_tokens, ranks;
    topo_shape_linear *linear;
    int n_linear;
    topo_shape_attn *attn;
    int n_attn;
    double sync_s;  /* what one sync point (a small all-reduce between two chunks of work, all
                     * ranks busy) adds: waiting for descheduled peers on a shared node */
} topo_shapes;

typedef struct topology {
    char *path;           /* the file read (owned) */
    int ranks;
    int n_hosts;
    topo_host *hosts;
    topo_rank *rank_map;  /* [ranks] */
    topo_fit fits[TOPO_NCLASS];
    double sgemm_flops;     /* FLOP/s per rank, all ranks busy (min over ranks) */
    double attention_flops; /* FLOP/s of the local attention kernel per rank */
    int threads_per_rank;
    int compute_measured;   /* 0: no "compute" in the file, TOPO_DEFAULT_FLOPS assumed */
    topo_p2p *p2p;
    int n_p2p;
    topo_coll *coll;
    int n_coll;
    topo_tuned *tuned;
    int n_tuned;
    topo_shapes *shapes;  /* compute.shapes */
    int n_shapes;
    void *json;           /* the whole document (jansson json_t *), kept for rewriting */
} topology;

/* Read and validate path. */
cpdit_status topo_file_load(topology *t, const char *path, cpdit_error *err);
/* Same from JSON text; name stands in for the path in messages. */
cpdit_status topo_file_parse(topology *t, const char *text, const char *name,
                             cpdit_error *err);
void topo_file_free(topology *t);

/* The class of a pair of ranks (both < t->ranks) from the rank map. */
topo_class topo_pair_class(const topology *t, int a, int b);
/* The widest class over every pair of the n ranks in group (TOPO_SAME_NUMA for n <= 1). */
topo_class topo_group_class(const topology *t, const int *group, int n);
/* The fit for class c: fits[c] when measured, else the next wider measured class, else the
 * defaults above. *used gets the class whose fit was used, or -1 for a default. */
topo_fit topo_fit_for(const topology *t, topo_class c, int *used);

/* Time of a collective measured on a group of group_size ranks of class cls with per-rank
 * size bytes, interpolated linearly between the two nearest measured sizes (extrapolated
 * from the nearest two, never below the smallest measured time); 0 when the file has no row
 * for that op, group size and class. */
double topo_coll_time(const topology *t, topo_coll_op op, int group_size, topo_class cls,
                      double bytes);

/* The tuned entry whose key is k (every field equal), or NULL. */
const topo_tuned *topo_find_tuned(const topology *t, const topo_tuned_key *k);
/* k as the entry's key (pointers into e). */
void topo_tuned_key_of(const topo_tuned *e, topo_tuned_key *k);

/* The compute.shapes entry measured for (model, width, height, text and image tokens), or
 * NULL. */
const topo_shapes *topo_find_shapes(const topology *t, const char *model, int width, int height,
                                    int txt_tokens, int img_tokens);
/* Measured times from a shapes entry; 0 when that shape was not measured. */
double topo_shapes_linear_s(const topo_shapes *e, int cp);
double topo_shapes_attn_s(const topo_shapes *e, int sq, int skv, int heads, int head_dim);

/* Put entry (a jansson object as probe_shapes_measure makes; the reference is taken) into the
 * document's compute.shapes, replacing one for the same model, size and tokens, and reread
 * the shapes. The file is not written (topo_file_save_tuned writes the whole document). */
cpdit_status topo_file_add_shapes(topology *t, void *entry, cpdit_error *err);

/* Replace (or append) the tuned entry with e's key (topo_tuned_key) in the file's
 * JSON and write the whole document back to t->path atomically (temporary file + rename),
 * keeping every other key. The in-memory t is updated too. */
cpdit_status topo_file_save_tuned(topology *t, const topo_tuned *e, cpdit_error *err);

#ifdef __cplusplus
}
#endif
#endif
