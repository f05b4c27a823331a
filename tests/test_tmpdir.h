/* test_tmpdir.h — scratch folders and small file helpers for cpdit's C tests.
 * tmpdir_make() creates a fresh folder under $TMPDIR (or /tmp); tmpdir_remove() deletes it
 * with everything inside. */
#ifndef CPDIT_TEST_TMPDIR_H
#define CPDIT_TEST_TMPDIR_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf, nftw; the build passes -D_GNU_SOURCE already */
#endif
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMPDIR_NOFILE_MAX 16

/* A new empty folder; caller frees the string (after tmpdir_remove). NULL on failure. */
static inline char *tmpdir_make(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char *p;
    if (!base || !base[0])
        base = "/tmp";
    if (asprintf(&p, "%s/cpdit-%s-XXXXXX", base, tag) < 0)
        return NULL;
    if (!mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

static inline int tmpdir_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP || flag == FTW_D) {
        chmod(path, 0700); /* a test may have made it read-only */
        return rmdir(path);
    }
    return unlink(path);
}

static inline int tmpdir_remove(const char *path)
{
    if (!path)
        return 0;
    chmod(path, 0700);
    return nftw(path, tmpdir_remove_one, TMPDIR_NOFILE_MAX, FTW_DEPTH | FTW_PHYS);
}

/* "dir/rel" as a new string. */
static inline char *tmp_path(const char *dir, const char *rel)
{
    char *p;
    if (asprintf(&p, "%s/%s", dir, rel) < 0)
        return NULL;
    return p;
}

/* Write text to dir/rel, creating the folders on the way. 0 on success. */
static inline int tmp_write(const char *dir, const char *rel, const char *text)
{
    char *p = tmp_path(dir, rel);
    if (!p)
        return -1;
    for (char *s = p + strlen(dir) + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        mkdir(p, 0755);
        *s = '/';
    }
    FILE *f = fopen(p, "wb");
    free(p);
    if (!f)
        return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Whole file into a new NUL-terminated buffer; *len gets its size. NULL if unreadable. */
static inline char *tmp_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

/* Number of entries in dir other than "." and "..", or -1. */
static inline int tmp_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Number of entries in dir whose name contains ".tmp.", or -1. */
static inline int tmp_count_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp."))
            n++;
    closedir(d);
    return n;
}

static inline int tmp_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

#endif
