/* job_broadcast.c — the manifest and the prompts file go from rank 0 to every rank as bytes,
 * and every rank parses them itself (the parse is deterministic), so no struct needs a wire
 * format. Only rank 0 touches the manifest and prompts files (see job_run.h). */
#include "jobs/job_run.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/comm_mpi.h"
#include "lib/io/regular_file.h"

cpdit_status job_bcast_status(MPI_Comm comm, int root, cpdit_status st, cpdit_error *err)
{
    cpdit_error local;
    int rank;
    if (!err) {
        cpdit_error_clear(&local);
        err = &local;
    }
    MPI_Comm_rank(comm, &rank);
    if (rank == root)
        err->status = st;
    if (MPI_Bcast(err, (int)sizeof *err, MPI_BYTE, root, comm) != MPI_SUCCESS)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "MPI", "MPI_Bcast of a status failed");
    return err->status;
}

/* Broadcast len bytes (any size) from root, in pieces MPI's int counts can carry. */
static int bcast_bytes(void *buf, size_t len, int root, MPI_Comm comm)
{
    char *p = buf;
    while (len > 0) {
        int n = len > (size_t)INT_MAX ? INT_MAX : (int)len;
        if (MPI_Bcast(p, n, MPI_BYTE, root, comm) != MPI_SUCCESS)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

cpdit_status manifest_load_world(const char *path, const manifest_overrides *ov,
                                 MPI_Comm world, manifest **out, cpdit_error *err)
{
    int rank;
    char *bytes = NULL;
    size_t len = 0;
    manifest *m = NULL;
    *out = NULL;
    MPI_Comm_rank(world, &rank);
    cpdit_status st = CPDIT_OK;
    if (rank == 0) {
        st = manifest_read_file(path, &bytes, &len, err);
        if (!st)
            st = manifest_parse_bytes(path, bytes, len,
                                      MANIFEST_CHECK_FILES | MANIFEST_READ_MODEL, &m, err);
        if (!st) /* "builtin:huge" is refused here, at its line, not by the model loader */
            st = job_check_model_name(m, err);
        if (!st) /* mp4 in a build without libavcodec: before the model loads */
            st = job_check_output_format(m, err);
    }
    st = job_bcast_status(world, 0, st, err);
    if (st) {
        free(bytes);
        manifest_free(m);
        return st;
    }
    unsigned long long n = len;
    if (MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, world) != MPI_SUCCESS)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "MPI_Bcast of the manifest failed");
    if (!st && rank != 0) {
        len = (size_t)n;
        bytes = malloc(len + 1);
    }
    int ok = !st && bytes != NULL;
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world);
    if (!all_ok) {
        free(bytes);
        manifest_free(m);
        return st ? st : cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    if (bcast_bytes(bytes, len, 0, world) != 0)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "MPI_Bcast of the manifest failed");
    if (!st && rank != 0)
        st = manifest_parse_bytes(path, bytes, len, MANIFEST_READ_MODEL, &m, err);
    free(bytes);
    if (!st)
        st = manifest_apply_overrides(m, ov, err);
    int exists;
    if (!st && rank == 0) /* a file in place of the output folder, or a read-only one: say so
                           * now, before the model is loaded (job_run checks again) */
        st = job_check_output_dir(m, &exists, err);
    /* every rank must leave with the same answer */
    int mine = st, worst = 0;
    MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, world);
    if (worst && !st)
        st = cpdit_error_set(err, (cpdit_status)worst, path, "another rank could not parse "
                             "the broadcast manifest");
    if (st) {
        manifest_free(m);
        return st;
    }
    *out = m;
    return CPDIT_OK;
}

/* Header of every broadcast read: the byte count, or -1 with rank 0's error following. */
static long bcast_read(void *ctx, char *buf, size_t n, cpdit_error *err)
{
    job_bcast_source *s = ctx;
    long long got = 0;
    cpdit_error local;
    cpdit_error_clear(&local);
    if (n > (size_t)INT_MAX)
        n = (size_t)INT_MAX;
    if (s->rank == 0) {
        size_t r = fread(buf, 1, n, s->fp);
        got = (long long)r;
        if (r == 0 && ferror(s->fp)) {
            got = -1;
            cpdit_error_set(&local, CPDIT_ERR_RUNTIME, s->path, "read error: %s",
                            strerror(errno));
        }
    }
    if (MPI_Bcast(&got, 1, MPI_LONG_LONG, 0, s->comm) != MPI_SUCCESS) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, s->path, "MPI_Bcast of the prompts file failed");
        return -1;
    }
    if (got < 0) {
        MPI_Bcast(&local, (int)sizeof local, MPI_BYTE, 0, s->comm);
        if (err)
            *err = local;
        return -1;
    }
    if (got > 0 && MPI_Bcast(buf, (int)got, MPI_BYTE, 0, s->comm) != MPI_SUCCESS) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, s->path, "MPI_Bcast of the prompts file failed");
        return -1;
    }
    return (long)got;
}

cpdit_status job_bcast_source_open(job_bcast_source *s, const char *path, MPI_Comm comm,
                                   cpdit_error *err)
{
    memset(s, 0, sizeof *s);
    s->comm = comm;
    s->path = path;
    MPI_Comm_rank(comm, &s->rank);
    cpdit_status st = CPDIT_OK;
    if (s->rank == 0) {
        s->fp = cpdit_fopen_regular(path, "cannot open the prompts file", err);
        if (!s->fp)
            st = err ? err->status : CPDIT_ERR_INPUT;
    }
    return job_bcast_status(comm, 0, st, err);
}

job_byte_source job_bcast_source_reader(job_bcast_source *s)
{
    job_byte_source r = {bcast_read, s};
    return r;
}

void job_bcast_source_close(job_bcast_source *s)
{
    if (s->fp)
        fclose(s->fp);
    s->fp = NULL;
}

cpdit_status job_agree_status(MPI_Comm comm, cpdit_status st, cpdit_error *err)
{
    return cpdit_comm_agree_mpi(comm, st, err);
}
