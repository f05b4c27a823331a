/* job_run.c — the MPI batch runner (the flow, stopping and exit codes are in job_run.h). */
#include "jobs/job_run_internal.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/core/version.h"
#include "lib/cp/comm.h"
#include "jobs/job_index.h"
#include "jobs/job_sbatch.h"
#include "jobs/job_slurm.h"
#include "lib/io/atomic_file.h"
#include "lib/io/png_writer.h"
#include "lib/io/video_writer.h"

#define FOLDER_MODE 0777   /* before the umask */
#define WAIT_POLL_US 20000 /* sleep between polls while waiting for other groups, us */
#define NUM_TEXT 32
/* "writing the PNG: " + where + ": " + what */
#define REASON_MAX (CPDIT_ERROR_WHERE_MAX + CPDIT_ERROR_WHAT_MAX + 32)

/* ---------------------------------------------------------------- setup */
static cpdit_status choose_degrees(const manifest *m, const job_runner_hooks *h, MPI_Comm world,
                                   int deg[3], cpdit_error *err)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    cpdit_status st = CPDIT_OK;
    if (m->parallel.is_auto) {
        deg[0] = size, deg[1] = deg[2] = 1;
        if (rank == 0 && h->choose_grid)
            st = h->choose_grid(m, size, &deg[0], &deg[1], &deg[2], h->ctx, err);
        if ((st = job_bcast_status(world, 0, st, err)))
            return st;
        MPI_Bcast(deg, 3, MPI_INT, 0, world);
    } else {
        deg[0] = m->parallel.dp, deg[1] = m->parallel.ring, deg[2] = m->parallel.ulysses;
    }
    int dp;
    st = cp_grid_resolve(size, deg[0], deg[1], deg[2], &dp, err);
    deg[0] = dp;
    return st;
}

/* mkdir -p; *created = the length of the shortest prefix of dir this call created (0 when
 * it created none), for remove_created_folders. */
static cpdit_status make_folders(const char *dir, size_t *created, cpdit_error *err)
{
    *created = 0;
    char *p = strdup(dir);
    if (!p)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    cpdit_status st = CPDIT_OK;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char saved = *s;
        *s = '\0';
        struct stat sb;
        int made = mkdir(p, FOLDER_MODE) == 0;
        if (made && !*created)
            *created = strlen(p);
        if (!made && errno != EEXIST)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot create folder \"%s\": %s",
                                 p, strerror(errno));
        else if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "\"%s\" is not a folder", p);
        *s = saved;
        if (st || saved == '\0')
            break;
    }
    free(p);
    return st;
}

cpdit_status job_make_folders(const char *dir, cpdit_error *err)
{
    size_t created;
    return make_folders(dir, &created, err);
}

/* Undo make_folders after a failed start: remove the folders it created, deepest first,
 * while they are empty (rmdir never removes anything else). */
static void remove_created_folders(const char *dir, size_t created)
{
    char *p = created ? strdup(dir) : NULL;
    while (p && strlen(p) >= created && rmdir(p) == 0) {
        char *slash = strrchr(p, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
    free(p);
}

/* What expand() hands back. */
typedef struct job_plan {
    job_item *mine; /* this group's items that are not done yet, in index order */
    size_t n_mine, cap_mine;
    uint64_t n_items, already_done; /* n_items: the whole manifest; already_done: share */
    uint64_t n_share;               /* items of this run's share (all without an array) */
    job_resume_stats resume; /* rank 0 */
    int temp_removed;        /* rank 0 */
    off_t index_size;        /* rank 0: the index's size before any group appends */
} job_plan;

static void plan_free(job_plan *p)
{
    for (size_t i = 0; i < p->n_mine; i++)
        job_item_free(&p->mine[i]);
    free(p->mine);
    memset(p, 0, sizeof *p);
}

static cpdit_status keep_item(job_plan *p, const job_item *x, cpdit_error *err)
{
    if (p->n_mine == p->cap_mine) {
        size_t cap = p->cap_mine ? 2 * p->cap_mine : 64;
        job_item *a = realloc(p->mine, cap * sizeof *a);
        if (!a)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "items", "out of memory");
        p->mine = a;
        p->cap_mine = cap;
    }
    cpdit_status st = job_item_copy(&p->mine[p->n_mine], x, err);
    if (!st)
        p->n_mine++;
    return st;
}

/* An array task removes only the temporary files of its own share (the other tasks may be
 * writing theirs): the target names of the folder's temporary files, sorted. */
typedef struct temp_list {
    char **names;   /* the temporary files */
    char **targets; /* the file each one was going to become */
    size_t n;
} temp_list;

static void temp_list_free(temp_list *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->names[i]);
        free(t->targets[i]);
    }
    free(t->names);
    free(t->targets);
    memset(t, 0, sizeof *t);
}

static cpdit_status temp_list_read(const char *dir, temp_list *t, cpdit_error *err)
{
    memset(t, 0, sizeof *t);
    DIR *d = opendir(dir);
    if (!d)
        return CPDIT_OK;
    size_t cap = 0;
    struct dirent *e;
    cpdit_status st = CPDIT_OK;
    while (!st && (e = readdir(d)) != NULL) {
        if (!atomic_file_is_temp_name(e->d_name))
            continue;
        const char *end = NULL, *q = e->d_name;
        while ((q = strstr(q + 1, ".tmp.")) != NULL)
            end = q;
        if (t->n == cap) {
            cap = cap ? 2 * cap : 16;
            char **a = realloc(t->names, cap * sizeof *a), **b = a ? realloc(t->targets, cap * sizeof *b) : NULL;
            if (a)
                t->names = a;
            if (b)
                t->targets = b;
            if (!a || !b) {
                st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
                break;
            }
        }
        t->names[t->n] = strdup(e->d_name);
        t->targets[t->n] = strndup(e->d_name + 1, (size_t)(end - e->d_name - 1));
        if (!t->names[t->n] || !t->targets[t->n]) {
            free(t->names[t->n]);
            free(t->targets[t->n]);
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
            break;
        }
        t->n++;
    }
    closedir(d);
    return st;
}

/* Remove the temporary files whose target is file; counts into *removed. */
static void temp_list_remove(const char *dir, temp_list *t, const char *file, int *removed)
{
    for (size_t i = 0; i < t->n; i++) {
        if (!t->names[i] || strcmp(t->targets[i], file) != 0)
            continue;
        char *p = job_path_join(dir, t->names[i]);
        if (p && (unlink(p) == 0 || (errno == EISDIR && cpdit_video_remove_temp_folder(p) == 0)))
            (*removed)++;
        free(p);
        free(t->names[i]);
        t->names[i] = NULL;
    }
}

/* .cpdit-run.json: what `cpdit status OUTPUT` needs (jobs/job_slurm.h). */
static cpdit_status write_run_record(const manifest *m, const job_slurm_info *sl,
                                     cpdit_error *err)
{
    char *abs = realpath(m->path, NULL);
    json_t *o = json_pack("{s:s,s:i}", "manifest", abs ? abs : m->path, "array_task_count",
                          sl->shares);
    free(abs);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    char *path = job_path_join(m->output_dir, JOB_RUN_RECORD_NAME);
    cpdit_status st = text && path ? atomic_write_buffer(path, text, strlen(text), err)
                                   : cpdit_error_set(err, CPDIT_ERR_RUNTIME, "job_run",
                                                     "out of memory");
    free(text);
    free(path);
    return st;
}

/* This rank's node: CPDIT_NODE_NAME when set (tests, or sites whose MPI names nodes
 * oddly), else MPI's processor name. */
static void this_node(char *out, size_t size)
{
    const char *env = getenv("CPDIT_NODE_NAME");
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME + 1] = "";
    if (env && env[0])
        snprintf(out, size, "%s", env);
    else if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS)
        snprintf(out, size, "%.*s", len, name);
    else
        snprintf(out, size, "unknown");
}

/* Rank 0's progress also counts the node parts that leaders on other nodes append to: every
 * rank's node name is gathered (collective), and each node other than rank 0's with a group
 * leader gives a part file. Resume merged and removed the old parts, so each counts from 0. */
static void add_node_parts(const manifest *m, MPI_Comm world, const cp_grid *g,
                           const char *node, const char *node0, const char *index_name,
                           job_progress *p)
{
    enum { NAME = MPI_MAX_PROCESSOR_NAME + 1 };
    char mine[NAME];
    memset(mine, 0, sizeof mine);
    if (g->cp_rank == 0) /* only leaders write: others send "" */
        snprintf(mine, sizeof mine, "%s", node);
    char *all = g->world_rank == 0 ? calloc((size_t)g->world_size, NAME) : NULL;
    MPI_Gather(mine, NAME, MPI_CHAR, all, NAME, MPI_CHAR, 0, world);
    for (int r = 0; all && p && r < g->world_size; r++) {
        const char *n = all + (size_t)r * NAME;
        int seen = !n[0] || strcmp(n, node0) == 0;
        for (int q = 0; !seen && q < r; q++)
            seen = strcmp(all + (size_t)q * NAME, n) == 0;
        if (seen)
            continue;
        char part[64 + NAME + 16];
        job_index_node_name(index_name, n, part, sizeof part);
        char *path = job_path_join(m->output_dir, part);
        if (path)
            job_progress_add_file(p, path);
        free(path);
    }
    free(all);
}

/* A start that failed on rank 0's side: release the lock, then remove the folders made. */
static void start_failed(const char *dir, job_lock **lock, size_t created)
{
    job_lock_release(*lock);
    *lock = NULL;
    remove_created_folders(dir, created);
}

/* Steps 2-3 of job_run.h: prepare the output folder (rank 0), expand the manifest on every
 * rank, find the done items (rank 0) and keep this group's remaining items. Collective. */
static cpdit_status expand(const manifest *m, MPI_Comm world, const cp_grid *g,
                           const job_slurm_info *sl, const char *index_name, job_lock **lock,
                           job_plan *plan, cpdit_error *err)
{
    int rank = g->world_rank;
    job_resume *res = NULL;
    temp_list temps;
    memset(&temps, 0, sizeof temps);
    cpdit_status st = CPDIT_OK;
    size_t created = 0; /* rank 0: folders made here, removed again if the start fails */
    int exists = 0;
    memset(plan, 0, sizeof *plan);
    if (rank == 0) {
        /* a file in the folder's place is bad input; a folder we cannot write into fails
         * now, before any item is rendered */
        st = job_check_output_dir(m, &exists, err);
        if (!st)
            st = make_folders(m->output_dir, &created, err);
        if (!st) /* one run per output folder (or per array share) */
            st = job_lock_acquire(m->output_dir, sl, lock, err);
        if (!st)
            st = job_probe_output_dir(m, err);
        if (!st && sl->shares <= 1)
            st = job_remove_temp_files(m->output_dir, &plan->temp_removed, err);
        else if (!st)
            st = temp_list_read(m->output_dir, &temps, err);
        if (!st)
            st = job_resume_begin_named(m->output_dir, index_name, &res, err);
    }
    if ((st = job_bcast_status(world, 0, st, err))) {
        job_resume_free(res);
        temp_list_free(&temps);
        if (rank == 0)
            start_failed(m->output_dir, lock, created);
        return st;
    }

    job_bcast_source src;
    job_byte_source reader;
    int have_src = 0;
    if (m->prompts_file) {
        if ((st = job_bcast_source_open(&src, m->prompts_file, world, err))) {
            job_resume_free(res);
            if (rank == 0)
                start_failed(m->output_dir, lock, created);
            return st;
        }
        reader = job_bcast_source_reader(&src);
        have_src = 1;
    }
    job_items *it = NULL;
    unsigned char *bits = NULL; /* rank 0: bit i = item i is done */
    size_t bits_cap = 0;
    cpdit_status rank0_st = CPDIT_OK; /* rank 0's own trouble: must not desync the stream */
    st = job_items_open(m, have_src ? &reader : NULL, JOB_ITEMS_CHECK_UNIQUE, &it, err);
    const job_item *x = NULL;
    while (!st && !(st = job_items_next(it, &x, err)) && x) {
        plan->n_items = x->index + 1;
        if (!job_slurm_in_share(sl, x->index))
            continue; /* another array task's */
        plan->n_share++;
        if (job_assign_group(x->index / (uint64_t)sl->shares, g->dp) == g->dp_index)
            st = keep_item(plan, x, err);
        if (rank != 0 || rank0_st)
            continue;
        if (temps.n)
            temp_list_remove(m->output_dir, &temps, x->file, &plan->temp_removed);
        size_t byte = (size_t)(x->index / 8);
        if (byte >= bits_cap) {
            size_t cap = bits_cap ? 2 * bits_cap : 4096;
            unsigned char *b = realloc(bits, cap);
            if (!b) {
                rank0_st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "resume", "out of memory");
                continue;
            }
            memset(b + bits_cap, 0, cap - bits_cap);
            bits = b;
            bits_cap = cap;
        }
        int done = 0;
        rank0_st = job_resume_item(res, x, &done, err);
        if (done)
            bits[byte] |= (unsigned char)(1u << (x->index % 8));
    }
    job_items_close(it);
    if (have_src)
        job_bcast_source_close(&src);
    if (rank == 0 && !st && !rank0_st) {
        rank0_st = job_resume_finish(res, &plan->resume, err);
        char *index = job_path_join(m->output_dir, JOB_INDEX_FILE_NAME);
        struct stat sb;
        if (index && stat(index, &sb) == 0)
            plan->index_size = sb.st_size;
        free(index);
    }
    job_resume_free(res);
    temp_list_free(&temps);
    if (!st)
        st = rank0_st;
    if ((st = job_agree_status(world, st, err))) {
        free(bits);
        plan_free(plan);
        if (rank == 0) /* e.g. too many items, a bad prompts-file line: no empty folder */
            start_failed(m->output_dir, lock, created);
        return st;
    }
    if (rank == 0) { /* the run starts: its record for `cpdit status`, no old stop marker */
        char name[64];
        job_slurm_stop_marker_name(sl, name, sizeof name);
        char *marker = job_path_join(m->output_dir, name);
        if (marker)
            unlink(marker); /* this job's own record of an earlier stop */
        free(marker);
        st = write_run_record(m, sl, err);
    }
    if ((st = job_bcast_status(world, 0, st, err))) {
        free(bits);
        plan_free(plan);
        return st;
    }

    /* the done bits, from rank 0 to everyone, and this group's items that remain */
    size_t nbytes = (size_t)((plan->n_items + 7) / 8);
    if (rank != 0) {
        bits = calloc(nbytes + 1, 1);
        bits_cap = nbytes + 1;
    }
    st = job_agree_status(world, bits || nbytes == 0 ? CPDIT_OK
                                 : cpdit_error_set(err, CPDIT_ERR_RUNTIME, "resume",
                                                   "out of memory"), err);
    for (size_t off = 0; !st && off < nbytes; off += INT_MAX) {
        size_t n = nbytes - off < (size_t)INT_MAX ? nbytes - off : (size_t)INT_MAX;
        if (MPI_Bcast(bits + off, (int)n, MPI_BYTE, 0, world) != MPI_SUCCESS)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "MPI", "MPI_Bcast of the done items "
                                 "failed");
    }
    for (uint64_t i = 0; !st && i < plan->n_items; i++)
        plan->already_done += (bits[i / 8] >> (i % 8)) & 1u;
    size_t kept = 0;
    for (size_t i = 0; !st && i < plan->n_mine; i++) {
        uint64_t idx = plan->mine[i].index;
        if ((bits[idx / 8] >> (idx % 8)) & 1u)
            job_item_free(&plan->mine[i]);
        else
            plan->mine[kept++] = plan->mine[i];
    }
    if (!st)
        plan->n_mine = kept;
    free(bits);
    if (st)
        plan_free(plan);
    return st;
}

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

/* Render every remaining item of this group (step 4). With hooks->idle_round, in lockstep
 * rounds over the world (job_run.h): a group never leaves the loop alone (a stop or a fatal
 * error is carried to the next round's world agreement instead), and a group whose items are
 * done idles through the remaining rounds. */
static void run_group(const manifest *m, const job_runner_hooks *hooks, MPI_Comm world,
                      cp_grid *g, const job_slurm_info *sl, const char *node,
                      const job_plan *plan, const char *index_path, job_progress *progress,
                      job_group_stats *gs)
{
    job_grid_info gi = {g->dp, g->ring, g->ulysses, sl, node, hooks->grid_reason, hooks->vae};
    cpdit_status fatal = CPDIT_OK;
    const int lockstep = hooks->idle_round != NULL;
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
        job_video vid; /* a video item: its writer (job_video.c) */
        cpdit_status rs = x->frames > 0
                              ? job_video_render(m, hooks, x, g, &gi, &vid, &tm, &ierr)
                              : hooks->render_item(x, g, &rgb, &w, &h, &tm, hooks->ctx, &ierr);
        if (!rs && x->frames == 0 && g->cp_rank == 0 && (!rgb || w <= 0 || h <= 0))
            rs = cpdit_error_set(&ierr, CPDIT_ERR_RUNTIME, "render", "no image came back");
        /* agree: the lowest failing cp rank (as -rank under MAX), and a stop request */
        long long v[2] = {rs ? -(long long)g->cp_rank : -(long long)g->cp_size,
                          job_stop_requested()};
        if (g->cp_size > 1 &&
            cpdit_comm_allreduce(g->cp, v, 2, CPDIT_COMM_INT64, CPDIT_COMM_MAX, &gs->error)) {
            free(rgb);
            if (x->frames > 0)
                job_video_abort(&vid);
            gs->fatal = CPDIT_ERR_RUNTIME;
            if (lockstep) /* the next round's agreement ends the run for every group */
                continue;
            break;
        }
        int first_fail = (int)-v[0];
        char reason[REASON_MAX];
        if (first_fail < g->cp_size) {
            if (g->cp_size > 1)
                cpdit_comm_bcast(g->cp, &ierr, sizeof ierr, first_fail, &gs->error);
            free(rgb);
            rgb = NULL;
            if (v[1]) { /* interrupted by a stop: left for the next run */
                if (x->frames > 0)
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
            if (first_fail >= g->cp_size)
                job_test_hold("write", g->world_rank);
            const char *failure = first_fail < g->cp_size ? reason : NULL;
            int r = x->frames > 0 ? job_video_record(m, x, &gi, &vid, failure, t0, &tm,
                                                     index_path, &fatal, &gs->error)
                                  : leader_record(m, x, &gi, rgb, w, h, failure, t0, &tm,
                                                  index_path, &fatal, &gs->error);
            gs->failed += r == 1;
            gs->done += r == 0;
            gs->seconds += job_now() - t0;
            job_times_add(gs, &tm);
            if (hooks->verbose)
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

/* ---------------------------------------------------------------- the end */
/* Rank 0: the runner's own record of a stop, which the sbatch script requeues on even when
 * the launcher's exit code does not say 3 (mpirun returns 1 when it was signalled). */
static void write_stop_marker(const manifest *m, const job_slurm_info *sl,
                              const job_summary *sum, FILE *log)
{
    char name[64], text[160];
    job_slurm_stop_marker_name(sl, name, sizeof name);
    char *marker = job_path_join(m->output_dir, name);
    int n = sum->stop_signal
                ? snprintf(text, sizeof text, "stopped by signal %d with %llu items left\n",
                           sum->stop_signal, (unsigned long long)sum->left)
                : snprintf(text, sizeof text, "stopped by a stop request with %llu items left\n",
                           (unsigned long long)sum->left);
    cpdit_error merr;
    if (!marker || atomic_write_buffer(marker, text, (size_t)n, &merr))
        fprintf(log, "cpdit: warning: cannot write the stop marker %s\n",
                marker ? marker : name);
    free(marker);
}

/* Gather every rank's group stats on rank 0 (polling progress meanwhile), build the summary
 * there, write the stop marker and release the lock (rank 0), and only then give every rank
 * the same summary and status: no rank returns (and exits) before the folder is in its
 * final state, so a launcher that kills the rest when one rank exits cannot cut it short. */
static cpdit_status finish(const manifest *m, MPI_Comm world, const cp_grid *g,
                           const job_plan *plan, job_group_stats *gs, job_progress *progress,
                           FILE *log, const char *index_path, double t_start, job_summary *sum,
                           const char *grid_reason, const job_slurm_info *sl, job_lock *lock,
                           cpdit_error *err)
{
    int rank = g->world_rank, size = g->world_size;
    job_group_stats *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
    MPI_Request req;
    MPI_Igather(gs, (int)sizeof *gs, MPI_BYTE, all, (int)sizeof *gs, MPI_BYTE, 0, world, &req);
    for (int flag = 0; !flag;) {
        MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        if (!flag) {
            if (progress)
                job_progress_poll(progress, 0);
            usleep(WAIT_POLL_US);
        }
    }
    cpdit_status st = CPDIT_OK;
    memset(sum, 0, sizeof *sum);
    sum->items = plan->n_share;
    sum->manifest_items = plan->n_items;
    sum->share = sl->share, sum->shares = sl->shares;
    sum->already_done = plan->already_done;
    sum->dp = g->dp, sum->ring = g->ring, sum->ulysses = g->ulysses;
    if (rank == 0) {
        job_group_stats *groups = calloc((size_t)g->dp, sizeof *groups);
        for (int d = 0; all && groups && d < g->dp; d++) {
            const job_group_stats *x = &all[d * g->cp_size]; /* the group's leader */
            groups[d] = *x;
            for (int r = 0; r < g->cp_size; r++) { /* a non-leader may have failed alone */
                const job_group_stats *y = &all[d * g->cp_size + r];
                groups[d].fatal = groups[d].fatal ? groups[d].fatal : y->fatal;
                if (y->fatal && !x->fatal)
                    groups[d].error = y->error;
                groups[d].stopped |= y->stopped;
            }
            groups[d].left = groups[d].todo - groups[d].done - groups[d].failed;
            sum->done += (uint64_t)groups[d].done;
            sum->text_s += groups[d].text_s;
            sum->sample_s += groups[d].sample_s;
            sum->vae_s += groups[d].vae_s;
            sum->write_s += groups[d].write_s;
            sum->steps += (uint64_t)groups[d].steps;
            sum->failed += (uint64_t)groups[d].failed;
            sum->left += (uint64_t)groups[d].left;
            sum->stopped |= groups[d].stopped != 0;
            if (groups[d].fatal && !st) {
                st = (cpdit_status)groups[d].fatal;
                *err = groups[d].error;
                err->status = st;
            }
        }
        if (!all || !groups)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, "summary", "out of memory");
        sum->stop_signal = job_stop_signal_number();
        sum->seconds = job_now() - t_start;
        if (progress) {
            job_progress_poll(progress, 1);
            job_progress_free(progress);
        }
        if (groups)
            job_print_summary(log, m, groups, g->dp, g->cp_size, sum, index_path,
                              grid_reason);
        free(groups);
        free(all);
        if (!st && sum->stopped)
            write_stop_marker(m, sl, sum, log);
        job_lock_release(lock);
    }
    MPI_Bcast(sum, (int)sizeof *sum, MPI_BYTE, 0, world);
    return job_bcast_status(world, 0, st, err);
}

cpdit_status job_run(const manifest *m, const job_runner_hooks *hooks, MPI_Comm world,
                     job_summary *summary, cpdit_error *err)
{
    double t_start = job_now();
    job_summary sum_local;
    job_summary *sum = summary ? summary : &sum_local;
    memset(sum, 0, sizeof *sum);
    if (!m || !hooks || !hooks->render_item)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "job_run", "no manifest or render hook");
    FILE *log = hooks->log ? hooks->log : stderr;
    int deg[3];
    cpdit_status st = choose_degrees(m, hooks, world, deg, err);
    cp_grid *g = NULL;
    if (!st)
        st = cp_grid_create_for(world, deg[0], deg[1], deg[2], hooks->backend, &g, err);
    if ((st = job_agree_status(world, st, err))) {
        cp_grid_destroy(g);
        return st;
    }
    cpdit_error serr;
    if (job_stop_install(&serr) && g->world_rank == 0)
        fprintf(log, "cpdit: warning: %s: %s (stop signals will kill the job)\n", serr.where,
                serr.what);
    /* Slurm's job id, array share and restart count: rank 0's view for every rank */
    job_slurm_info sl;
    if (g->world_rank == 0)
        job_slurm_info_from_env(&sl);
    MPI_Bcast(&sl, (int)sizeof sl, MPI_BYTE, 0, world);
    char index_name[64];
    job_slurm_index_name(&sl, index_name, sizeof index_name);
    job_lock *lock = NULL;
    char *index_path = job_path_join(m->output_dir, index_name);
    job_plan plan;
    st = job_agree_status(world, index_path ? CPDIT_OK
                                            : cpdit_error_set(err, CPDIT_ERR_RUNTIME, "job_run",
                                                              "out of memory"), err);
    if (!st)
        st = expand(m, world, g, &sl, index_name, &lock, &plan, err);
    if (st) {
        job_lock_release(lock);
        free(index_path);
        job_stop_uninstall();
        cp_grid_destroy(g);
        return st;
    }

    job_progress progress, *pp = NULL;
    if (g->world_rank == 0) {
        char grid[128];
        char share[96] = "";
        if (sl.shares > 1)
            snprintf(share, sizeof share, " (array task %d of %d: index %% %d = %d, of %llu)",
                     sl.share, sl.shares, sl.shares, sl.share, (unsigned long long)plan.n_items);
        fprintf(log, "[cpdit] %s: %llu items%s, %llu already done, %llu to do; %s; output %s\n",
                m->path, (unsigned long long)plan.n_share, share,
                (unsigned long long)plan.already_done,
                (unsigned long long)(plan.n_share - plan.already_done),
                cp_grid_describe(g, grid, sizeof grid), m->output_dir);
        if (sl.job_id[0])
            fprintf(log, "[cpdit] Slurm job %s, restart %lld; index %s\n", sl.job_id,
                    sl.restart_count, index_name);
        const job_resume_stats *r = &plan.resume;
        if (r->reindexed || r->dropped || r->torn_bytes || plan.temp_removed)
            fprintf(log, "[cpdit] resume: %llu index lines re-made, %llu dropped, %zu bytes of "
                    "a torn line dropped, %d temporary files removed\n",
                    (unsigned long long)r->reindexed, (unsigned long long)r->dropped,
                    r->torn_bytes, plan.temp_removed);
        fflush(log);
        /* from the index's size after resume: lines other groups appended meanwhile count */
        job_progress_init(&progress, log, index_path, plan.index_size,
                          plan.n_share - plan.already_done, hooks->progress_interval_s);
        pp = &progress;
    }
    job_group_stats gs;
    memset(&gs, 0, sizeof gs);
    gs.todo = (long long)plan.n_mine;
    /* group leaders on world rank 0's node append to the index; leaders on other nodes to
     * their node's part file (one writer per file per node: NFS, job_index.h) */
    char node[MPI_MAX_PROCESSOR_NAME + 1], node0[MPI_MAX_PROCESSOR_NAME + 1];
    this_node(node, sizeof node);
    memcpy(node0, node, sizeof node0);
    MPI_Bcast(node0, (int)sizeof node0, MPI_CHAR, 0, world);
    add_node_parts(m, world, g, node, node0, index_name, pp);
    job_placement_log(world, g, node, log);
    char *leader_index = index_path;
    if (strcmp(node, node0) != 0) {
        char part[64 + MPI_MAX_PROCESSOR_NAME + 16];
        job_index_node_name(index_name, node, part, sizeof part);
        leader_index = job_path_join(m->output_dir, part);
        if (!leader_index)
            leader_index = index_path; /* out of memory: the shared index still works */
    }
    /* group leaders watch the sbatch script's stop-request file (job_slurm.h) */
    char request[64];
    job_slurm_stop_request_name(&sl, request, sizeof request);
    char *request_path = request[0] && g->cp_rank == 0 ? job_path_join(m->output_dir, request)
                                                       : NULL;
    job_stop_watch_file(request_path);
    free(request_path);
    job_stop_relay_begin(world); /* a stop seen by any rank reaches every group */
    run_group(m, hooks, world, g, &sl, node, &plan, leader_index, pp, &gs);
    job_stop_relay_end();
    job_stop_watch_file(NULL);
    if (leader_index != index_path)
        free(leader_index);
    st = finish(m, world, g, &plan, &gs, pp, log, index_path, t_start, sum,
                hooks->grid_reason, &sl, g->world_rank == 0 ? lock : NULL, err);

    plan_free(&plan);
    free(index_path);
    job_stop_uninstall();
    cp_grid_destroy(g);
    return st;
}

int job_exit_code(cpdit_status st, const job_summary *s)
{
    if (st == CPDIT_ERR_INPUT)
        return JOB_EXIT_INPUT;
    if (st != CPDIT_OK)
        return JOB_EXIT_RUNTIME;
    if (s && s->stopped)
        return JOB_EXIT_REQUEUE;
    if (s && s->failed)
        return JOB_EXIT_ITEMS_FAILED;
    return JOB_EXIT_OK;
}
