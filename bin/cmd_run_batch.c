/* cmd_run_batch.c — `cpdit run MANIFEST.yaml`: the batch job. The manifest is read on rank 0
 * and broadcast (manifest_load_world); the runner (jobs/job_run.h) forms the grid, assigns
 * items to data-parallel groups, skips finished ones, writes PNGs and the JSONL index, and
 * stops cleanly on SIGUSR1/SIGTERM; this file supplies the render hook: the FLUX pipeline. */
#include "config.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bin/cli.h"
#include "bin/cmd_run.h"
#include "jobs/job_run.h"
#include "lib/pipeline/pipeline.h"
#include "lib/cp/comm.h"
#include "topology/cost_model.h"
#include "topology/grid_choice.h"

typedef struct batch_ctx {
    pipeline *p;
    cp_attention_config attn;
    int vae_single_rank, vae_tiling;
    cp_grid *vae_world; /* --vae-parallel world: dp = 1 over every rank; NULL otherwise */
    const char *dump;
    const cp_grid *grid; /* of the item being rendered, for the stop poll */
    int verbose;
    unsigned long long item; /* index of the item being rendered (--verbose step lines) */
    pipeline_cache_config cache; /* the manifest's `cache:` (or --cache) */
    cpdit_comm *cfg_comm; /* CFG pair of the item being rendered (NULL: none) */
    int video;               /* the manifest's items are clips */
} batch_ctx;

/* Polled between sampler steps on every rank of the group: a stop signal seen by any rank
 * of the group ends the item on all of them (the runner then stops the job cleanly). */
static int stop_poll(void *ctx)
{
    batch_ctx *c = ctx;
    long long stop = job_stop_agreed(c->grid); /* the same on every rank of the group */
    cpdit_error err;
    if (c->cfg_comm && /* and over the pair: both groups stop at the same step */
        cpdit_comm_allreduce(c->cfg_comm, &stop, 1, CPDIT_COMM_INT64, CPDIT_COMM_MAX, &err))
        return 1;
    return stop != 0;
}

static void progress_tty(int step, int steps, double seconds, long long read_bytes,
                         void *ctx)
{
    const batch_ctx *c = ctx;
    if (c->verbose) { /* plain lines, also under mpirun and in Slurm logs */
        if (read_bytes >= 0)
            cli_verbose_line("item %llu step %d/%d %.3f s, disk read %lld bytes", c->item, step,
                             steps, seconds, read_bytes);
        else
            cli_verbose_line("item %llu step %d/%d %.3f s", c->item, step, steps, seconds);
        return;
    }
    if (!isatty(STDERR_FILENO))
        return;
    fprintf(stderr, "\r  step %d/%d  %.2f s/step   ", step, steps, seconds);
    if (step == steps)
        fputs("\r                                   \r", stderr);
}

/* One item on this group: cfg_comm its CFG pair (pipeline_run.cfg_comm) or NULL; frames NULL
 * for an image (*rgb gets it on the leader), else each decoded frame of the clip goes to
 * frames->on_frame on CP rank 0 and *rgb stays NULL. */
static cpdit_status render_on(const job_item *it, const cp_grid *g, cpdit_comm *cfg_comm,
                              const job_frame_sink *frames, uint8_t **rgb,
                              job_item_times *times, batch_ctx *c, cpdit_error *err)
{
    pipeline_params prm = {it->prompt, it->negative_prompt, it->seed, it->width, it->height,
                           it->steps, (float)it->guidance, (float)it->true_cfg,
                           it->max_sequence_length, it->frames, it->flow_shift, c->cache};
    char dump[4096];
    pipeline_run run;
    memset(&run, 0, sizeof run);
    run.grid = g;
    run.attn = c->attn;
    run.vae_single_rank = c->vae_single_rank;
    run.vae_tiling = c->vae_tiling;
    run.vae_world = c->vae_world;
    run.progress = progress_tty;
    run.should_stop = stop_poll;
    run.ctx = c;
    run.cfg_comm = cfg_comm;
    if (frames) {
        run.on_frame = frames->on_frame;
        run.frame_ctx = frames->ctx;
    }
    c->grid = g;
    c->cfg_comm = cfg_comm;
    if (c->dump) {
        snprintf(dump, sizeof dump, "%s/%05llu", c->dump, (unsigned long long)it->index);
        run.dump_dir = dump;
    }
    c->item = (unsigned long long)it->index;
    pipeline_timings tm;
    memset(&tm, 0, sizeof tm); /* pipeline_generate may stop before filling it */
    tm.read_step1_bytes = tm.read_later_bytes = -1;
    run.timings = &tm;
    cpdit_status st = cli_end_job_if_broken(pipeline_generate(c->p, &prm, &run, rgb, err), err);
    times->text_s = tm.text_s;
    times->sample_s = tm.sample_s;
    times->steps = tm.steps;
    times->step_max_s = tm.step_max_s;
    times->vae_load_s = tm.vae_load_s;
    times->vae_s = tm.steps == prm.steps ? tm.vae_s : -1.0;
    times->read_step1_bytes = tm.read_step1_bytes;
    times->read_later_bytes = tm.steps > 1 ? tm.read_later_bytes : -1;
    if (prm.cache.kind != PIPELINE_CACHE_NONE) {
        pipeline_cache_describe(&prm.cache, times->cache_spec, sizeof times->cache_spec);
        times->cache_full = tm.cache.full;
        times->cache_cached = tm.cache.cached;
        times->cache_saved_s = pipeline_cache_saved_s(&tm.cache);
        times->cache_state_bytes = (long long)tm.cache.state_bytes;
        snprintf(times->cache_steps, sizeof times->cache_steps, "%s", tm.cache.pattern);
    }
    c->cfg_comm = NULL;
    return st;
}

static cpdit_status render_item(const job_item *it, const cp_grid *g, uint8_t **rgb, int *w,
                                int *h, job_item_times *times, void *ctx, cpdit_error *err)
{
    *w = it->width;
    *h = it->height;
    return render_on(it, g, NULL, NULL, rgb, times, ctx, err);
}

/* CFG pairs (job_runner_hooks.render_pair): this group's branch, the velocities swapped with
 * the partner group every step; only cfg_rank 0's leader gets the image. */
static cpdit_status render_pair(const job_item *it, const cp_grid *g, cpdit_comm *cfg_comm,
                                int cfg_rank, uint8_t **rgb, int *w, int *h,
                                job_item_times *times, void *ctx, cpdit_error *err)
{
    (void)cfg_rank; /* the pipeline reads it from cfg_comm */
    *w = it->width;
    *h = it->height;
    return render_on(it, g, cfg_comm, NULL, rgb, times, ctx, err);
}

static cpdit_status render_video(const job_item *it, const cp_grid *g,
                                 const job_frame_sink *frames, job_item_times *times,
                                 void *ctx, cpdit_error *err)
{
    uint8_t *rgb = NULL; /* stays NULL: the frames went to the sink */
    cpdit_status st = render_on(it, g, NULL, frames, &rgb, times, ctx, err);
    free(rgb);
    return st;
}

/* Lockstep rounds (--vae-parallel world): a group without an item in this round joins the
 * round's decode with nothing of its own. */
static void idle_round(const cp_grid *g, void *ctx)
{
    batch_ctx *c = ctx;
    (void)g;
    pipeline_run run;
    memset(&run, 0, sizeof run);
    run.vae_world = c->vae_world;
    cpdit_error err;
    cpdit_error_clear(&err);
    cli_end_job_if_broken(pipeline_vae_world_idle(c->p, &run, &err), &err);
}

/* How the decode ran, a word for the index line. */
static const char *vae_word(const batch_ctx *c)
{
    return c->vae_world ? "world" : c->vae_tiling ? "tiled" : c->vae_single_rank ? "rank0"
                                                                                 : "group";
}

/* After the run's summary: the VAE decode time, summed over the groups, and how many decodes
 * the ranks took part in, fewest and most (collective). */
static void print_decode_time(const batch_ctx *c, int rank)
{
    long n = 0;
    double t[2] = {c->p ? pipeline_decode_seconds(c->p, &n) : 0.0, 0.0}, sum[2];
    t[1] = (double)n;
    MPI_Reduce(t, sum, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    const long share = c->p ? pipeline_decode_shares(c->p) : 0;
    long shares[2] = {-share, share}, ext[2] = {0, 0}; /* -min, max */
    MPI_Reduce(shares, ext, 2, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    char world[64], took[64];
    if (c->vae_world)
        snprintf(world, sizeof world, "split over all %d ranks of the job, one image after "
                 "the other", c->vae_world->cp_size);
    if (-ext[0] == ext[1])
        snprintf(took, sizeof took, "each rank took part in %ld", ext[1]);
    else
        snprintf(took, sizeof took, "the ranks took part in %ld to %ld", -ext[0], ext[1]);
    const char *what = c->video ? "clip" : "image";
    if (rank == 0 && sum[1] > 0)
        fprintf(stderr, "vae decode: %.0f %ss, %.3f s total, %.3f s per %s (%s; %s)\n", sum[1],
                what, sum[0], sum[0] / sum[1], what,
                c->vae_world ? world : c->vae_tiling ? "tiled, CP rank 0" : c->vae_single_rank
                                                          ? "CP rank 0 alone"
                                                          : "split over each CP group",
                took);
}

/* `parallel: auto`: the planner (topology/grid_choice.h: the topology file, else a quick probe
 * now) chooses the grid of a job of this many items; every rank then runs with explicit
 * degrees and, unless --attention named a variant, the variant the planner chose. Collective. */
static cpdit_status choose_grid(manifest *m, const char *topo_path, const char *backend,
                                const char **variant, grid_choice *gc, cpdit_error *err)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    memset(gc, 0, sizeof *gc);
    if (!m->parallel.is_auto) {
        snprintf(gc->reason, sizeof gc->reason, "given (manifest parallel settings or "
                                                "--dp/--ring/--ulysses)");
        return CPDIT_OK;
    }
    cpdit_status st = CPDIT_OK;
    uint64_t items = 0;
    if (rank == 0)
        st = job_items_count(m, NULL, &items, NULL, err);
    if ((st = job_bcast_status(MPI_COMM_WORLD, 0, st, err)))
        return st;
    grid_choice_request rq = {topo_path, m->model, m->base.width, m->base.height,
                              m->base.max_sequence_length, m->base.steps, items, size,
                              m->is_video ? m->base.num_frames : 0,
                              m->base.true_cfg > 1.0 && m->base.negative_prompt != NULL,
                              backend, 0 /* threads: this process's */,
                              m->output_dir /* the job-start probe kept there */};
    if (m->base.n_sizes > 0)
        rq.width = m->base.sizes[0].width, rq.height = m->base.sizes[0].height;
    if ((st = grid_choice_world(MPI_COMM_WORLD, &rq, gc, err)))
        return st;
    m->parallel.is_auto = 0;
    m->parallel.dp = gc->dp;
    m->parallel.ring = gc->ring;
    m->parallel.ulysses = gc->ulysses;
    if (strstr(gc->variant, "+anything"))
        m->parallel.anything = 1;
    if (!*variant || strcmp(*variant, "auto") == 0)
        *variant = gc->variant;
    return CPDIT_OK;
}

int run_batch(const char *path, const manifest_overrides *ov, const run_item_options *o)
{
    const char *dump = o->dump, *variant = o->variant;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    cpdit_error err;
    cpdit_error_clear(&err);
    manifest *m = NULL;
    batch_ctx c;
    memset(&c, 0, sizeof c);
    c.dump = dump;
    c.verbose = o->verbose;
    job_summary sum;
    memset(&sum, 0, sizeof sum);
    /* Slurm's warning signal may come while the model loads: stop cleanly from here on
     * (cmd_run installed the handlers before MPI_Init already; this nests) */
    cpdit_status st = job_stop_install(&err);
    const int installed = st == CPDIT_OK;
    if (!st)
        st = manifest_load_world(path, ov, MPI_COMM_WORLD, &m, &err);
    grid_choice gc;
    char grid_line[GRID_CHOICE_REASON_MAX + 128];
    if (!st)
        st = choose_grid(m, o->topology, o->backend, &variant, &gc, &err);
    if (!st)
        st = cm_variant_parse(variant, &c.attn, &err);
    if (!st) {
        c.attn.anything = m->parallel.anything;
        c.video = m->is_video;
        c.vae_tiling = m->vae_tiling;
        c.cache = m->cache;
        c.vae_single_rank = m->vae_parallel == MANIFEST_VAE_OFF;
        /* every rank opens the model; a failure anywhere ends the job on all ranks */
        job_test_hold("open", rank);
        const double t_open = MPI_Wtime();
        st = run_open_pipeline(&c.p, m->model, o, &err);
        st = job_agree_status(MPI_COMM_WORLD, st, &err); /* the first failing rank's message */
        if (!st && rank == 0 && o->verbose)
            fprintf(stderr, "[cpdit] model loaded in %.3f s\n", MPI_Wtime() - t_open);
    }
    if (!st && m->vae_parallel == MANIFEST_VAE_WORLD) { /* the decode over every rank */
        int size;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        st = cp_grid_create_for(MPI_COMM_WORLD, 1, size, 1, pipeline_backend(c.p),
                                &c.vae_world, &err);
        st = job_agree_status(MPI_COMM_WORLD, st, &err);
    }
    /* a stop signal that reached any rank while MPI started or the model opened stops every
     * rank before the first item (job_run then writes the stop marker; exit 3) */
    if (!st && job_stop_agree_world(MPI_COMM_WORLD) && rank == 0)
        fprintf(stderr, "[cpdit] a stop was requested while the model was being opened\n");

    if (!st) {
        job_runner_hooks hooks;
        memset(&hooks, 0, sizeof hooks);
        hooks.render_item = render_item;
        hooks.render_video = render_video;
        hooks.ctx = &c;
        hooks.grid_reason = grid_choice_line(&gc, grid_line, sizeof grid_line);
        hooks.verbose = o->verbose;
        hooks.backend = pipeline_backend(c.p);
        hooks.vae = vae_word(&c);
        if (c.vae_world)
            hooks.idle_round = idle_round;
        else if (m->base.true_cfg > 1.0 && m->base.negative_prompt && !m->is_video)
            hooks.render_pair = render_pair; /* CFG pairs on an even number of groups (images:
                                                a clip's frames stream from one group) */
        st = job_run(m, &hooks, MPI_COMM_WORLD, &sum, &err);
        print_decode_time(&c, rank);
    }
    int code = job_exit_code(st, &sum);
    if (st && rank == 0)
        cli_report(&err);
    cp_grid_destroy(c.vae_world);
    pipeline_close(c.p);
    manifest_free(m);
    if (installed)
        job_stop_uninstall();
    return code;
}

int check_batch(const char *path, const manifest_overrides *ov)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    if (manifest_check_command(path, ov, stdout, &err))
        return cli_report(&err);
    return CLI_EXIT_OK;
}
