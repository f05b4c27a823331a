/* test_atomic_file.c — temp file + rename: the final file appears complete or not at all.
 * Checks: content and mode after success, no temp file left after success, abort, a missing
 * folder, a read-only folder (skipped as root), and a write that fails half way (forced
 * with RLIMIT_FSIZE, which works as root too) leaving the old file intact. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/io/atomic_file.h"
#include "tests/test_util.h"
#include "tests/test_tmpdir.h"

/* A file-size limit smaller than the payload, so the write fails with EFBIG part way. */
#define SMALL_FSIZE_LIMIT (16 * 1024)
#define BIG_PAYLOAD (1024 * 1024)

static void test_success(const char *dir)
{
    char *path = tmp_path(dir, "out.bin");
    const char data[] = "hello, atomic world\n";
    cpdit_error err;
    cpdit_error_clear(&err);
    mode_t old = umask(022);
    CHECK(atomic_write_buffer(path, data, strlen(data), &err) == CPDIT_OK);
    umask(old);
    size_t n = 0;
    char *back = tmp_read(path, &n);
    CHECK(back && n == strlen(data) && memcmp(back, data, n) == 0);
    free(back);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK_MSG((st.st_mode & 0777) == 0644, "mode %o, expected 644 (0666 & ~umask 022)",
              (unsigned)(st.st_mode & 0777));
    CHECK(tmp_count_temp_files(dir) == 0);
    CHECK(tmp_count_entries(dir) == 1);

    /* Overwrite: new content, the old file's mode is kept. */
    CHECK(chmod(path, 0600) == 0);
    CHECK(atomic_write_buffer(path, "new", 3, &err) == CPDIT_OK);
    back = tmp_read(path, &n);
    CHECK(back && n == 3 && memcmp(back, "new", 3) == 0);
    free(back);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK(tmp_count_temp_files(dir) == 0);

    /* Empty file. */
    CHECK(atomic_write_buffer(path, NULL, 0, &err) == CPDIT_OK);
    CHECK(stat(path, &st) == 0 && st.st_size == 0);
    unlink(path);
    free(path);
}

static void test_stream_and_abort(const char *dir)
{
    char *path = tmp_path(dir, "stream.txt");
    cpdit_error err;
    atomic_file af;
    CHECK(atomic_file_begin(&af, path, &err) == CPDIT_OK);
    CHECK(af.fp != NULL);
    /* While open: the temp file exists, the final one does not yet. */
    CHECK(tmp_count_temp_files(dir) == 1);
    CHECK(!tmp_exists(path));
    const char *slash = strrchr(af.tmp_path, '/');
    CHECK(slash && atomic_file_is_temp_name(slash + 1));
    CHECK(strncmp(slash + 1, ".stream.txt.tmp.", 16) == 0);
    fprintf(af.fp, "line %d\n", 1);
    atomic_file_abort(&af);
    CHECK(af.fp == NULL && af.tmp_path == NULL);
    CHECK(!tmp_exists(path));
    CHECK(tmp_count_temp_files(dir) == 0);
    atomic_file_abort(&af); /* twice is harmless */

    CHECK(atomic_file_begin(&af, path, &err) == CPDIT_OK);
    for (int i = 0; i < 1000; i++)
        fprintf(af.fp, "line %d\n", i);
    CHECK(atomic_file_commit(&af, &err) == CPDIT_OK);
    size_t n = 0;
    char *back = tmp_read(path, &n);
    CHECK(back && strncmp(back, "line 0\nline 1\n", 14) == 0 && strstr(back, "line 999\n"));
    free(back);
    CHECK(tmp_count_temp_files(dir) == 0);
    /* Commit on a closed handle is an error, not a crash. */
    CHECK(atomic_file_commit(&af, &err) == CPDIT_ERR_RUNTIME);
    unlink(path);
    free(path);
}

static void test_missing_folder(const char *dir)
{
    char *path = tmp_path(dir, "no/such/folder/out.png");
    cpdit_error err;
    cpdit_error_clear(&err);
    CHECK(atomic_write_buffer(path, "x", 1, &err) == CPDIT_ERR_RUNTIME);
    CHECK(strcmp(err.where, path) == 0);
    CHECK_STR_CONTAINS(err.what, "does not exist");
    CHECK_STR_CONTAINS(err.what, "no/such/folder");
    CHECK(tmp_count_entries(dir) == 0);
    free(path);

    /* A path that is a folder, and an empty path: bad input. */
    CHECK(atomic_write_buffer(dir, "x", 1, &err) == CPDIT_ERR_INPUT);
    CHECK(atomic_write_buffer("", "x", 1, &err) == CPDIT_ERR_INPUT);
}

static void test_read_only_folder(const char *dir)
{
    if (geteuid() == 0) {
        fprintf(stderr, "note: running as root, which ignores folder permissions: "
                        "read-only folder case skipped (missing folder and file-size cases "
                        "cover the failure path)\n");
        return;
    }
    char *ro = tmp_path(dir, "ro");
    CHECK(mkdir(ro, 0755) == 0);
    CHECK(chmod(ro, 0555) == 0);
    char *path = tmp_path(ro, "out.bin");
    cpdit_error err;
    CHECK(atomic_write_buffer(path, "x", 1, &err) == CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err.what, "permission denied");
    CHECK(strcmp(err.where, path) == 0);
    CHECK(tmp_count_entries(ro) == 0);
    chmod(ro, 0755);
    rmdir(ro);
    free(path);
    free(ro);
}

/* The write fails half way (EFBIG from RLIMIT_FSIZE): the old file must survive untouched
 * and no temp file may remain. */
static void test_failed_write(const char *dir)
{
    char *path = tmp_path(dir, "keep.bin");
    cpdit_error err;
    CHECK(atomic_write_buffer(path, "old contents", 12, &err) == CPDIT_OK);

    struct rlimit saved;
    CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    struct rlimit small = saved;
    small.rlim_cur = SMALL_FSIZE_LIMIT;
    signal(SIGXFSZ, SIG_IGN); /* get EFBIG instead of being killed */
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);

    char *big = malloc(BIG_PAYLOAD);
    memset(big, 'z', BIG_PAYLOAD);
    cpdit_error_clear(&err);
    cpdit_status st = atomic_write_buffer(path, big, BIG_PAYLOAD, &err);
    CHECK(st == CPDIT_ERR_RUNTIME);
    CHECK(strcmp(err.where, path) == 0);
    CHECK_STR_CONTAINS(err.what, "too large");

    /* Same through the stream interface. */
    atomic_file af;
    CHECK(atomic_file_begin(&af, path, &err) == CPDIT_OK);
    for (int i = 0; i < 64; i++)
        fwrite(big, 1, BIG_PAYLOAD / 64, af.fp);
    CHECK(atomic_file_commit(&af, &err) == CPDIT_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err.what, "too large");
    CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0);
    signal(SIGXFSZ, SIG_DFL);
    free(big);

    size_t n = 0;
    char *back = tmp_read(path, &n);
    CHECK(back && n == 12 && memcmp(back, "old contents", 12) == 0);
    free(back);
    CHECK(tmp_count_temp_files(dir) == 0);
    CHECK(tmp_count_entries(dir) == 1);
    unlink(path);
    free(path);
}

/* The temporary file is removed by someone else (a second job cleaning the same folder)
 * before commit: the message names the vanished temporary file, not a missing folder. */
static void test_vanished_temp(const char *dir)
{
    char *path = tmp_path(dir, "vanish.png");
    cpdit_error err;
    cpdit_error_clear(&err);
    atomic_file af;
    CHECK(atomic_file_begin(&af, path, &err) == CPDIT_OK);
    fputs("bytes", af.fp);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", af.tmp_path);
    CHECK(unlink(tmp) == 0);
    CHECK(atomic_file_commit(&af, &err) == CPDIT_ERR_RUNTIME);
    CHECK(strcmp(err.where, path) == 0);
    CHECK_STR_CONTAINS(err.what, "vanished");
    CHECK_STR_CONTAINS(err.what, tmp);
    CHECK(strstr(err.what, "does not exist") == NULL);
    CHECK(tmp_count_entries(dir) == 0);
    free(path);
}

static void test_temp_names(void)
{
    CHECK(atomic_file_is_temp_name(".a.png.tmp.Ab12Cd"));
    CHECK(atomic_file_is_temp_name(".x.tmp.y.tmp.ZZZZZZ"));
    CHECK(!atomic_file_is_temp_name("a.png.tmp.Ab12Cd"));  /* not hidden */
    CHECK(!atomic_file_is_temp_name(".a.png.tmp.Ab12"));   /* too short */
    CHECK(!atomic_file_is_temp_name(".a.png"));
    CHECK(!atomic_file_is_temp_name(".tmp.abcdef"));       /* no NAME */
    CHECK(!atomic_file_is_temp_name(NULL));
}

int main(void)
{
    char *dir = tmpdir_make("atomic");
    if (!dir)
        TEST_SKIP("cannot create a scratch folder");
    test_success(dir);
    test_stream_and_abort(dir);
    test_missing_folder(dir);
    test_read_only_folder(dir);
    test_failed_write(dir);
    test_vanished_temp(dir);
    test_temp_names();
    tmpdir_remove(dir);
    free(dir);
    TEST_MAIN_END();
}
