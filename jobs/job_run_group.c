/* job_run_group.c — the batch runner's step 4 (job_run.h): every remaining item of this
 * group, rendered, written (the group leader: PNG and index line) and counted; with CFG pairs
 * (job_runner_hooks.render_pair) two groups render each item together. */
#include "jobs/job_run_internal.h"

#include <stdlib.h>
#include <string.h>

#include "lib/core/version.h"
#include "lib/cp/comm.h"
#include "lib/cp/comm_mpi.h"
#include "jobs/job_index.h"
#include "lib/io/png_writer.h"

#define NUM_TEXT 32
/* "writing the PNG: " + where + ": " + what */
#define REASON_MAX (CPDIT_ERROR_WHERE_MAX + CPDIT_ERROR_WHAT_MAX + 32)
#define GROUPS_PER_PAIR 2

/* ---------------------------------------------------------------- one item (the leader) */
/* Write the PNG and the index line of a rendered item, or the "failed" line. Returns 0 done,
 * 1 failed, -1 when its line could not be appended to the index (then *fatal gets the error,
 * and the item counts as neither done nor failed: nothing recorded it). */
static int leader_record(const manifest *m, const job_item *x, const job_grid_info *gi,
                         const uint8_t *rgb, int w, int h, const char *failure, double t0,
                         job_item_times *times, const char *index_path, cpdit_status *fatal,
                         cpdit_error *fatal_err)
{
    const double t_write = job_now();
    char reason[REASON_MAX];
    const char *error = failure;
    if (!failure) {
        char seed[NUM_TEXT], steps[NUM_TEXT], guidance[NUM_TEXT], index[NUM_TEXT], sw[NUM_TEXT];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)x->seed);
        snprintf(steps, sizeof steps, "%d", x->steps);
        snprintf(guidance, sizeof guidance, "%g", x->guidance);
        snprintf(index, sizeof index, "%llu", (unsigned long long)x->index);
        snprintf(sw, sizeof sw, "cpdit %s", cpdit_version_string());
        cpdit_png_text text[8] = {{"prompt", x->prompt}, {"seed", seed},
                                  {"steps", steps},      {"guidance", guidance},
                                  {"model", m->model},   {"index", index},
                                  {"Software", sw},      {"negative_prompt", x->negative_prompt}};
        int n_text = x->negative_prompt ? 8 : 7;
        char *path = job_path_join(m->output_dir, x->file);
        cpdit_error perr;
        cpdit_error_clear(&perr);
        if (!path)
            cpdit_error_set(&perr, CPDIT_ERR_RUNTIME, x->file, "out of memory");
        else
            cpdit_png_write_rgb8(path, rgb, w, h, text, n_text, &perr);
        free(path);
        if (perr.status) {
            snprintf(reason, sizeof reason, "writing the PNG: %s%s%s", perr.where,
                     perr.where[0] ? ": " : "", perr.what);
            error = reason;
        }
    }
    if (!failure)
        times->write_s = job_now() - t_write;
    size_t len;
    char *line = job_index_line_timed(x, gi, job_now() - t0, times, error, &len);
    cpdit_status st = line ? job_index_append(index_path, line, len, fatal_err)
                           : cpdit_error_set(fatal_err, CPDIT_ERR_RUNTIME, index_path,
                                             "out of memory");
    free(line);
    if (st) {
        *fatal = st;
        return -1;
    }
    return error ? 1 : 0;
}

/* ---------------------------------------------------------------- CFG pairs */
cpdit_status job_cfg_pair_open(const job_runner_hooks *hooks, const cp_grid *g, MPI_Comm world,
                               job_cfg_pair *p, cpdit_error *err)
{
    memset(p, 0, sizeof *p);
    p->both = MPI_COMM_NULL;
    if (!hooks->render_pair || hooks->idle_round || g->dp < GROUPS_PER_PAIR ||
        g->dp % GROUPS_PER_PAIR)
        return CPDIT_OK;
    p->on = 1;
    p->role = g->dp_index % GROUPS_PER_PAIR;
    const int pair_index = g->dp_index / GROUPS_PER_PAIR;
    MPI_Comm cfg = MPI_COMM_NULL;
    cpdit_status st = CPDIT_OK;
    if (MPI_Comm_split(world, pair_index, g->world_rank, &p->both) != MPI_SUCCESS ||
        MPI_Comm_split(cpdit_comm_mpi_handle(g->dp_comm), pair_index, p->role, &cfg) !=
            MPI_SUCCESS)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "MPI", "MPI_Comm_split of the CFG pairs "
                             "failed");
    if (!st)
        st = cpdit_comm_mpi_create(cfg, 1, &p->cfg, err);
    st = job_agree_status(world, st, err);
    if (st)
        job_cfg_pair_close(p);
    return st;
}

void job_cfg_pair_close(job_cfg_pair *p)
{
    cpdit_comm_destroy(p->cfg);
    if (p->both != MPI_COMM_NULL)
        MPI_Comm_free(&p->both);
    memset(p, 0, sizeof *p);
    p->both = MPI_COMM_NULL;
}

/* Has the item true CFG (a negative prompt, "" too, and true_cfg > 1)? */
static int item_has_cfg(const job_item *x)
{
    return x->true_cfg > 1.0 && x->negative_prompt != NULL;
}

/* After an item: agree over the group (or the pair) on the lowest failing rank, whose error
 * then reaches every rank (ierr), and on a stop request (*stop). Returns 1 when the item
 * failed, 0 when not, -1 when the ranks could not talk (gs->error filled). */
static int agree_item(const cp_grid *g, const job_cfg_pair *pair, cpdit_status rs,
                      cpdit_error *ierr, int *stop, job_group_stats *gs)
{
    int rank = g->cp_rank, size = g->cp_size;
    if (pair->on) {
        MPI_Comm_rank(pair->both, &rank);
        MPI_Comm_size(pair->both, &size);
    }
    long long v[2] = {rs ? -(long long)rank : -(long long)size, job_stop_requested()};
    if (pair->on) {
        if (MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_LONG_LONG, MPI_MAX, pair->both) !=
            MPI_SUCCESS) {
            cpdit_error_set(&gs->error, CPDIT_ERR_RUNTIME, "MPI", "MPI_Allreduce over the CFG "
                            "pair failed");
            return -1;
        }
    } else if (size > 1 &&
               cpdit_comm_allreduce(g->cp, v, 2, CPDIT_COMM_INT64, CPDIT_COMM_MAX, &gs->error)) {
        return -1;
    }
    *stop = v[1] != 0;
    const int first_fail = (int)-v[0];
    if (first_fail >= size)
        return 0;
    if (pair->on)
        MPI_Bcast(ierr, (int)sizeof *ierr, MPI_BYTE, first_fail, pair->both);
    else if (size > 1)
        cpdit_comm_bcast(g->cp, ierr, sizeof *ierr, first_fail, &gs->error);
    return 1;
}

/* Render every remaining item of this group (step 4). With hooks->idle_round, in lockstep
 * rounds over the world (job_run.h): a group never leaves the loop alone (a stop or a fatal
 * error is carried to the next round's world agreement instead), and a group whose items are
 * done idles through the remaining rounds. With CFG pairs the two groups of a pair hold the
 * same items and agree before and after each one over both groups. */
void job_run_group(const manifest *m, const job_runner_hooks *hooks, MPI_Comm world,
                   cp_grid *g, const job_slurm_info *sl, const char *node,
                   const job_plan *plan, const job_cfg_pair *pair, const char *index_path,
                   job_progress *progress, job_group_stats *gs)
{
    job_grid_info gi = {g->dp, g->ring, g->ulysses, sl, node, hooks->grid_reason, hooks->vae};
    cpdit_status fatal = CPDIT_OK;
    const int lockstep = hooks->idle_round != NULL;
    const int writer = !pair->on || pair->role == 0; /* writes PNGs and index lines */
    gs->cfg_partner = !writer;
    long long rounds = (long long)plan->n_mine;
    if (lockstep)
        MPI_Allreduce(MPI_IN_PLACE, &rounds, 1, MPI_LONG_LONG, MPI_MAX, world);
    for (long long k = 0; k < rounds; k++) {
        long long flags[2] = {job_stop_requested() || gs->stopped,
                              fatal ? fatal : gs->fatal};
        if (lockstep) {
            MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_LONG_LONG, MPI_MAX, world);
            if (flags[1]) { /* the failing group reports it; the others just end */
                if (fatal && !gs->fatal)
                    gs->fatal = fatal;
                break;
            }
        } else if (pair->on) {
            if (MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_LONG_LONG, MPI_MAX, pair->both) !=
                MPI_SUCCESS)
                flags[1] = fatal = CPDIT_ERR_RUNTIME;
        } else if (g->cp_size > 1 &&
                   cpdit_comm_allreduce(g->cp, flags, 2, CPDIT_COMM_INT64, CPDIT_COMM_MAX,
                                        &gs->error)) {
            flags[1] = fatal = CPDIT_ERR_RUNTIME;
        }
        if (flags[1]) {
            gs->fatal = flags[1];
            break;
        }
        if (flags[0]) {
            gs->stopped = 1;
            break;
        }
        if ((size_t)k >= plan->n_mine) { /* lockstep: this group has no item in this round */
            hooks->idle_round(g, hooks->ctx);
            continue;
        }
        const job_item *x = &plan->mine[k];
        double t0 = job_now();
        cpdit_error ierr;
        cpdit_error_clear(&ierr);
        uint8_t *rgb = NULL;
        int w = 0, h = 0;
        job_item_times tm;
        job_item_times_clear(&tm);
        cpdit_status rs = CPDIT_OK;
        const int video = x->frames > 0; /* a clip: its writer (job_video.c) */
        job_video vid;
        memset(&vid, 0, sizeof vid);
        /* CFG pairs render images only: a clip is rendered by its writer group alone */
        const int together = pair->on && item_has_cfg(x) && !video;
        if (together)
            rs = hooks->render_pair(x, g, pair->cfg, pair->role, &rgb, &w, &h, &tm, hooks->ctx,
                                    &ierr);
        else if (writer && video)
            rs = job_video_render(m, hooks, x, g, &gi, &vid, &tm, &ierr);
        else if (writer) /* a partner waits out an item without true CFG */
            rs = hooks->render_item(x, g, &rgb, &w, &h, &tm, hooks->ctx, &ierr);
        if (!rs && writer && !video && g->cp_rank == 0 && (!rgb || w <= 0 || h <= 0))
            rs = cpdit_error_set(&ierr, CPDIT_ERR_RUNTIME, "render", "no image came back");
        int stop = 0;
        const int failed = agree_item(g, pair, rs, &ierr, &stop, gs);
        if (failed < 0) {
            free(rgb);
            if (writer && video)
                job_video_abort(&vid);
            gs->fatal = CPDIT_ERR_RUNTIME;
            if (lockstep) /* the next round's agreement ends the run for every group */
                continue;
            break;
        }
        char reason[REASON_MAX];
        if (failed) {
            free(rgb);
            rgb = NULL;
            if (stop) { /* interrupted by a stop: left for the next run */
                if (writer && video)
                    job_video_abort(&vid);
                gs->stopped = 1;
                if (lockstep) /* the next round's agreement stops every group */
                    continue;
                break;
            }
            snprintf(reason, sizeof reason, "%s%s%s", ierr.where, ierr.where[0] ? ": " : "",
                     ierr.what);
        }
        if (g->cp_rank == 0) {
            int r = failed; /* a partner: the pair's agreed result */
            if (writer) {
                if (!failed)
                    job_test_hold("write", g->world_rank);
                r = video ? job_video_record(m, x, &gi, &vid, failed ? reason : NULL, t0, &tm,
                                             index_path, &fatal, &gs->error)
                          : leader_record(m, x, &gi, rgb, w, h, failed ? reason : NULL, t0,
                                          &tm, index_path, &fatal, &gs->error);
            }
            gs->failed += r == 1;
            gs->done += r == 0;
            gs->seconds += job_now() - t0;
            job_times_add(gs, &tm);
            if (hooks->verbose && (writer || together))
                job_print_item_times(hooks->log ? hooks->log : stderr, x, &tm,
                                     job_now() - t0, r);
        }
        free(rgb);
        if (progress)
            job_progress_poll(progress, 0);
    }
    if (fatal)
        gs->fatal = fatal;
}
