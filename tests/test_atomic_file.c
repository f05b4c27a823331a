/* test_atomic_file.c — temp file + rename: the final file appears complete or not at all.
 * Checks: content and mode after success, no temp file left after success, abort, a missing
 * folder, a read-only folder (skipped as root), and a write that fails half way (forced
 * with RLIMIT_FSIZE, which works as root too) leaving the old file intact. A FIFO, or a link
 * to a character device (/dev/null), as the final path: refused by begin (INPUT, the node's
 * kind named), left as it was, no temporary file; a link to a regular file or a dangling
 * link is replaced as before; cpdit_open_output refuses the same and appends otherwise. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/io/atomic_file.h"
#include "lib/io/regular_file.h"
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

/* Writers never replace or write into what is not a regular file (issue 28). */
static void test_special_destinations(const char *dir)
{
    char fifo[4096], devlink[4096], reglink[4096], target[4096], dangling[4096];
    cpdit_error err;
    struct stat st;
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(devlink, sizeof devlink, "%s/devlink", dir);
    snprintf(reglink, sizeof reglink, "%s/reglink", dir);
    snprintf(target, sizeof target, "%s/target", dir);
    snprintf(dangling, sizeof dangling, "%s/dangling", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(symlink("/dev/null", devlink) == 0);
    atomic_file af;
    CHECK(atomic_file_begin(&af, fifo, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "is a FIFO (named pipe), not a regular file");
    CHECK(atomic_write_buffer(devlink, "x", 1, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "is a symbolic link to a character device, not a regular file");
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(lstat(devlink, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(tmp_count_temp_files(dir) == 0);
    int fd = -1;
    CHECK(cpdit_open_output(fifo, "append", O_WRONLY | O_APPEND | O_CREAT, 0644, &fd, &err) ==
          CPDIT_ERR_INPUT && fd < 0);
    CHECK_STR_CONTAINS(err.what, "append: is a FIFO (named pipe), not a regular file");
    /* a link to a regular file, and a dangling link: written as before */
    CHECK(atomic_write_buffer(target, "old", 3, &err) == CPDIT_OK);
    CHECK(symlink(target, reglink) == 0 && symlink("nowhere", dangling) == 0);
    CHECK(cpdit_check_output_file(reglink, NULL, &err) == CPDIT_OK);
    CHECK(cpdit_check_output_file(dangling, NULL, &err) == CPDIT_OK);
    CHECK(cpdit_open_output(reglink, NULL, O_WRONLY | O_APPEND, 0, &fd, &err) == CPDIT_OK);
    CHECK(fd >= 0 && write(fd, "+", 1) == 1 && close(fd) == 0);
    CHECK(stat(target, &st) == 0 && st.st_size == 4);
    CHECK(atomic_write_buffer(dangling, "y", 1, &err) == CPDIT_OK);
    CHECK(lstat(dangling, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 1);
    unlink(fifo);
    unlink(devlink);
    unlink(reglink);
    unlink(target);
    unlink(dangling);
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
    test_special_destinations(dir);
    tmpdir_remove(dir);
    free(dir);
    TEST_MAIN_END();
}
