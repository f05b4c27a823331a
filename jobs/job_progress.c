/* job_progress.c — rank 0's progress line and the final summary table of a batch run.
 *
 * Progress counts the lines appended to the index since the run started (every group's
 * leader appends one per finished or failed item; leaders on other nodes than rank 0's to
 * their node's part of the index, which rank 0 reads too), so rank 0 sees all groups of every
 * node without extra messages. An array task counts its own share (its own index files). On a terminal it is one live line redrawn in place:
 *   [cpdit] 12/100 items (1 failed)  1.93 s/item  ETA 2m50s
 * otherwise (a log file, Slurm output) the same text as a plain line at most once per
 * interval, and once at the end. Rank 0 polls between its own items and while it waits for
 * the other groups. CPDIT_PROGRESS=live|plain overrides the choice.
 */
#include "jobs/job_run_internal.h"

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAIL_CHUNK 65536
#define SECONDS_PER_MINUTE 60
#define SECONDS_PER_HOUR 3600

double job_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Live line or plain lines: CPDIT_PROGRESS=live|plain decides; otherwise live on a terminal,
 * except under Open MPI's mpirun, which gives every rank a pseudo-terminal even when its own
 * output goes to a file. */
static int live_wanted(FILE *log)
{
    const char *mode = getenv("CPDIT_PROGRESS");
    if (mode && !strcmp(mode, "live"))
        return 1;
    if (mode && !strcmp(mode, "plain"))
        return 0;
    return isatty(fileno(log)) && !getenv("OMPI_COMM_WORLD_SIZE");
}

void job_progress_init(job_progress *p, FILE *log, const char *index_path, off_t offset,
                       uint64_t todo, double interval)
{
    memset(p, 0, sizeof *p);
    p->log = log;
    p->tty = live_wanted(log);
    p->interval = interval > 0 ? interval : JOB_PROGRESS_INTERVAL_DEFAULT;
    p->t_start = p->t_last = job_now();
    p->todo = todo;
    job_progress_add_file(p, index_path);
    if (p->n_files)
        p->files[0].offset = offset;
}

void job_progress_add_file(job_progress *p, const char *path)
{
    job_progress_file *f = realloc(p->files, (size_t)(p->n_files + 1) * sizeof *f);
    if (!f)
        return; /* out of memory: that file's lines are not counted */
    p->files = f;
    f[p->n_files].path = strdup(path);
    f[p->n_files].offset = 0;
    if (f[p->n_files].path)
        p->n_files++;
}

void job_progress_free(job_progress *p)
{
    if (p->line_open) {
        fputc('\n', p->log);
        fflush(p->log);
    }
    for (int i = 0; i < p->n_files; i++)
        free(p->files[i].path);
    free(p->files);
    p->files = NULL;
    p->n_files = 0;
}

/* Count the complete lines appended to f since the last call. */
static void count_new_lines(job_progress *p, job_progress_file *f)
{
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char *buf = malloc(TAIL_CHUNK);
    char *line = NULL;
    size_t line_len = 0;
    off_t pos = f->offset;
    ssize_t n;
    while (buf && (n = pread(fd, buf, TAIL_CHUNK, pos)) > 0) {
        size_t start = 0;
        for (size_t i = 0; i < (size_t)n; i++) {
            if (buf[i] != '\n')
                continue;
            /* a line: buf[start..i), after any piece carried from the previous chunk */
            json_error_t jerr;
            json_t *j;
            if (line_len) {
                char *l = realloc(line, line_len + (i - start));
                if (!l)
                    break;
                line = l;
                memcpy(line + line_len, buf + start, i - start);
                j = json_loadb(line, line_len + (i - start), 0, &jerr);
                line_len = 0;
            } else {
                j = json_loadb(buf + start, i - start, 0, &jerr);
            }
            const char *status = json_string_value(json_object_get(j, "status"));
            if (status) {
                p->finished++;
                p->failed += strcmp(status, "failed") == 0;
            }
            json_decref(j);
            f->offset = pos + (off_t)i + 1;
            start = i + 1;
        }
        if (start < (size_t)n) { /* an unfinished piece: keep it for the next chunk */
            char *l = realloc(line, line_len + ((size_t)n - start));
            if (!l)
                break;
            line = l;
            memcpy(line + line_len, buf + start, (size_t)n - start);
            line_len += (size_t)n - start;
        }
        pos += n;
    }
    free(line);
    free(buf);
    close(fd);
}

static void fmt_duration(double s, char *buf, size_t size)
{
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t >= SECONDS_PER_HOUR)
        snprintf(buf, size, "%ldh%02ldm", t / SECONDS_PER_HOUR,
                 (t % SECONDS_PER_HOUR) / SECONDS_PER_MINUTE);
    else if (t >= SECONDS_PER_MINUTE)
        snprintf(buf, size, "%ldm%02lds", t / SECONDS_PER_MINUTE, t % SECONDS_PER_MINUTE);
    else
        snprintf(buf, size, "%lds", t);
}

void job_progress_poll(job_progress *p, int force)
{
    for (int i = 0; i < p->n_files; i++)
        count_new_lines(p, &p->files[i]);
    double now = job_now();
    if (!force && !p->tty && now - p->t_last < p->interval)
        return;
    p->t_last = now;
    double elapsed = now - p->t_start;
    char rate[48] = "", eta[48] = "";
    if (p->finished > 0) {
        double per = elapsed / (double)p->finished;
        uint64_t rest = p->todo > p->finished ? p->todo - p->finished : 0;
        snprintf(rate, sizeof rate, "  %.3g s/item", per);
        char d[24];
        fmt_duration(per * (double)rest, d, sizeof d);
        snprintf(eta, sizeof eta, "  ETA %s", d);
    }
    char failed[48] = "";
    if (p->failed)
        snprintf(failed, sizeof failed, " (%llu failed)", (unsigned long long)p->failed);
    if (p->tty) {
        fprintf(p->log, "\r[cpdit] %llu/%llu items%s%s%s\033[K",
                (unsigned long long)p->finished, (unsigned long long)p->todo, failed, rate,
                eta);
        p->line_open = 1;
    } else {
        fprintf(p->log, "[cpdit] progress: %llu/%llu items%s%s%s\n",
                (unsigned long long)p->finished, (unsigned long long)p->todo, failed, rate,
                eta);
    }
    fflush(p->log);
}

void job_times_add(job_group_stats *gs, const job_item_times *t)
{
    gs->text_s += t->text_s > 0 ? t->text_s : 0.0;
    gs->sample_s += t->sample_s > 0 ? t->sample_s : 0.0;
    gs->vae_s += (t->vae_s > 0 ? t->vae_s : 0.0) + (t->vae_load_s > 0 ? t->vae_load_s : 0.0);
    gs->write_s += t->write_s > 0 ? t->write_s : 0.0;
    gs->steps += t->steps > 0 ? t->steps : 0;
    gs->cache_full += t->cache_full;
    gs->cache_cached += t->cache_cached;
    gs->cache_saved_s += t->cache_saved_s;
}

void job_print_item_times(FILE *log, const job_item *x, const job_item_times *t,
                          double seconds, int result)
{
    char vae[64] = "-";
    if (t->vae_s >= 0 && t->vae_load_s > 0)
        snprintf(vae, sizeof vae, "%.3f s (+%.3f s loading)", t->vae_s, t->vae_load_s);
    else if (t->vae_s >= 0)
        snprintf(vae, sizeof vae, "%.3f s", t->vae_s);
    char reads[96] = ""; /* storage reads in the steps, where the kernel says */
    if (t->read_step1_bytes >= 0 && t->read_later_bytes >= 0)
        snprintf(reads, sizeof reads, ", disk read: step 1 %lld bytes, later steps %lld bytes",
                 t->read_step1_bytes, t->read_later_bytes);
    else if (t->read_step1_bytes >= 0)
        snprintf(reads, sizeof reads, ", disk read: step 1 %lld bytes", t->read_step1_bytes);
    fprintf(log, "[cpdit] item %llu %s in %.3f s: text %.3f s, %d steps %.3f s (%.3f s/step, "
            "slowest %.3f s), vae %s, write %.3f s%s\n",
            (unsigned long long)x->index, result == 0 ? "done" : "failed", seconds,
            t->text_s > 0 ? t->text_s : 0.0, t->steps > 0 ? t->steps : 0,
            t->sample_s > 0 ? t->sample_s : 0.0,
            t->steps > 0 ? t->sample_s / t->steps : 0.0, t->step_max_s > 0 ? t->step_max_s : 0.0,
            vae, t->write_s > 0 ? t->write_s : 0.0, reads);
    if (t->cache_spec[0])
        fprintf(log, "[cpdit] item %llu cache %s: %d forwards full, %d cached, saved %.3f s, "
                "steps %s\n", (unsigned long long)x->index, t->cache_spec, t->cache_full,
                t->cache_cached, t->cache_saved_s, t->cache_steps);
    fflush(log);
}

void job_print_summary(FILE *log, const manifest *m, const job_group_stats *groups, int dp,
                       int cp_size, const job_summary *s, const char *index_path,
                       const char *grid_reason)
{
    fprintf(log, "\ncpdit run summary: %s, grid dp %d x ring %d x ulysses %d (%d rank%s)\n",
            m->path, s->dp, s->ring, s->ulysses, dp * cp_size, dp * cp_size == 1 ? "" : "s");
    if (grid_reason)
        fprintf(log, "grid: %s\n", grid_reason);
    fprintf(log, "%6s  %-13s %8s %8s %8s %8s %10s\n", "group", "ranks", "items", "done",
            "failed", "left", "s/item");
    for (int g = 0; g < dp; g++) {
        const job_group_stats *x = &groups[g];
        char ranks[32], per[32] = "-";
        if (cp_size > 1)
            snprintf(ranks, sizeof ranks, "%d-%d", g * cp_size, g * cp_size + cp_size - 1);
        else
            snprintf(ranks, sizeof ranks, "%d", g);
        if (x->done + x->failed > 0)
            snprintf(per, sizeof per, "%.3f", x->seconds / (double)(x->done + x->failed));
        fprintf(log, "%6d  %-13s %8lld %8lld %8lld %8lld %10s%s\n", g, ranks, x->todo, x->done,
                x->failed, x->left, per,
                x->cfg_partner ? "  (CFG partner of the group above: its negative prompts)"
                               : "");
    }
    fprintf(log, "%6s  %-13d %8llu %8llu %8llu %8llu\n", "total", dp * cp_size,
            (unsigned long long)(s->done + s->failed + s->left), (unsigned long long)s->done,
            (unsigned long long)s->failed, (unsigned long long)s->left);
    if (s->shares > 1)
        fprintf(log, "%llu items in array task %d's share (of %d tasks, %llu items in the "
                "manifest), ", (unsigned long long)s->items, s->share, s->shares,
                (unsigned long long)s->manifest_items);
    else
        fprintf(log, "%llu items in the manifest, ", (unsigned long long)s->items);
    fprintf(log, "%llu already done before this run; %.1f s; index %s\n",
            (unsigned long long)s->already_done, s->seconds, index_path);
    if (s->done + s->failed > 0) {
        const double n = (double)(s->done + s->failed);
        fprintf(log, "time per item (mean over %llu): text %.3f s, sampler %.3f s (%.3f s/step), "
                "vae %.3f s, write %.3f s\n", (unsigned long long)(s->done + s->failed),
                s->text_s / n, s->sample_s / n, s->steps ? s->sample_s / (double)s->steps : 0.0,
                s->vae_s / n, s->write_s / n);
    }
    if (m->cache.kind != PIPELINE_CACHE_NONE && s->cache_full + s->cache_cached > 0) {
        char spec[64];
        pipeline_cache_describe(&m->cache, spec, sizeof spec);
        fprintf(log, "cache %s: %llu transformer forwards in full, %llu from the cache "
                "(%.2fx fewer full ones), %.3f s saved\n", spec,
                (unsigned long long)s->cache_full, (unsigned long long)s->cache_cached,
                s->cache_full ? (double)(s->cache_full + s->cache_cached) / s->cache_full
                              : 0.0, s->cache_saved_s);
    }
    if (s->stopped)
        fprintf(log, "stopped by %s: %llu items left for the next run (exit %d: requeue)\n",
                s->stop_signal == SIGTERM   ? "SIGTERM"
                : s->stop_signal == SIGUSR1 ? "SIGUSR1"
                                            : "a stop request",
                (unsigned long long)s->left, JOB_EXIT_REQUEUE);
    int fatal = 0; /* a group that could not go on (index not writable, MPI): exit 1 */
    for (int g = 0; g < dp; g++)
        fatal |= groups[g].fatal != 0;
    char code[32] = "";
    if (!fatal)
        snprintf(code, sizeof code, " (exit %d)", JOB_EXIT_ITEMS_FAILED);
    if (s->failed)
        fprintf(log, "%llu items failed (status \"failed\" in the index, with the reason); a "
                "rerun retries them%s\n", (unsigned long long)s->failed, code);
    if (fatal)
        fprintf(log, "the run failed: a group could not go on (the error follows; exit %d)\n",
                JOB_EXIT_RUNTIME);
    fflush(log);
}
