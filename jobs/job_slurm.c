/* job_slurm.c — the Slurm environment of a batch run, array shares, and the names of the
 * run's files in the output folder (see job_slurm.h). */
#include "jobs/job_slurm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/job_index.h"
#include "jobs/job_sbatch.h"

/* A whole non-negative decimal from the environment, or -1. */
static long long env_count(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    return *end || errno || x < 0 ? -1 : x;
}

static void env_text(const char *name, char *out, size_t size)
{
    const char *v = getenv(name);
    snprintf(out, size, "%s", v ? v : "");
}

void job_slurm_info_from_env(job_slurm_info *s)
{
    memset(s, 0, sizeof *s);
    env_text("SLURM_JOB_ID", s->job_id, sizeof s->job_id);
    env_text("SLURM_ARRAY_JOB_ID", s->array_job_id, sizeof s->array_job_id);
    s->array_task_id = env_count("SLURM_ARRAY_TASK_ID");
    long long count = env_count("SLURM_ARRAY_TASK_COUNT");
    long long min = env_count("SLURM_ARRAY_TASK_MIN");
    s->array_task_count = count > 0 ? count : 0;
    s->restart_count = env_count("SLURM_RESTART_COUNT");
    if (s->job_id[0] && s->restart_count < 0)
        s->restart_count = 0; /* Slurm sets it only after the first requeue */
    s->share = 0;
    s->shares = 1;
    long long k = s->array_task_id - (min >= 0 ? min : 0);
    if (s->array_task_id >= 0 && count > 1 && k >= 0 && k < count) {
        s->share = (int)k;
        s->shares = (int)count;
    }
}

int job_slurm_in_share(const job_slurm_info *s, uint64_t index)
{
    return !s || s->shares <= 1 || index % (uint64_t)s->shares == (uint64_t)s->share;
}

void job_slurm_index_name(const job_slurm_info *s, char *out, size_t size)
{
    if (!s || s->shares <= 1)
        snprintf(out, size, "%s", JOB_INDEX_FILE_NAME);
    else
        snprintf(out, size, "index.task-%d-of-%d.jsonl", s->share, s->shares);
}

void job_slurm_stop_marker_name(const job_slurm_info *s, char *out, size_t size)
{
    if (s && s->job_id[0])
        snprintf(out, size, "%s-%s", JOB_STOP_MARKER_PREFIX, s->job_id);
    else
        snprintf(out, size, "%s", JOB_STOP_MARKER_PREFIX);
}

void job_slurm_stop_request_name(const job_slurm_info *s, char *out, size_t size)
{
    if (s && s->job_id[0])
        snprintf(out, size, "%s-%s", JOB_STOP_REQUEST_PREFIX, s->job_id);
    else if (size)
        out[0] = '\0';
}
