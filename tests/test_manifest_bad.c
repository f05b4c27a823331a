/* test_manifest_bad.c — the corpus of bad manifests: every tests/data/manifests/bad/NAME.yaml
 * must be refused with CPDIT_ERR_INPUT (exit 2) and exactly the message in NAME.expected
 * (one line, "NAME.yaml:LINE:COL: message", or "PROMPTS_FILE:LINE: message" for an error in
 * a prompts file). The check runs in that folder, as `cpdit run NAME.yaml --check` would:
 * parse with file checks, the built-in model's name, then expand every item (prompts files,
 * duplicate file names, the item count).
 *
 * usage: test_manifest_bad [--write]   (--write rewrites the .expected files from the
 * current messages; review the diff before committing it)
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/job_items.h"
#include "jobs/job_run.h" /* job_check_model_name */
#include "yaml/manifest.h"
#include "tests/test_util.h"

#define MAX_PATH_LEN 4096
#define MESSAGE_MAX (CPDIT_ERROR_WHERE_MAX + CPDIT_ERROR_WHAT_MAX + 4)
/* The corpus has this many manifests; a lost file should not go unnoticed. */
#define MIN_CORPUS_SIZE 60

static int is_manifest(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0;
}

/* The error for name (in the current folder) as "where: what", and its status. */
static cpdit_status error_of(const char *name, char *msg, size_t size)
{
    manifest *m = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    cpdit_status st =
        manifest_load(name, MANIFEST_CHECK_FILES | MANIFEST_READ_MODEL, &m, &err);
    if (!st)
        st = job_check_model_name(m, &err); /* as --check and the run's rank 0 */
    if (!st)
        st = job_check_output_format(m, &err);
    if (!st)
        st = job_items_count(m, NULL, NULL, NULL, &err);
    manifest_free(m);
    if (st)
        snprintf(msg, size, "%s: %s", err.where, err.what);
    else
        snprintf(msg, size, "(no error)");
    return st;
}

int main(int argc, char **argv)
{
    int write_mode = argc > 1 && strcmp(argv[1], "--write") == 0;
    const char *top = getenv("top_srcdir");
    char dir[MAX_PATH_LEN];
    snprintf(dir, sizeof dir, "%s/tests/data/manifests/bad", top ? top : ".");
    if (chdir(dir) != 0) {
        fprintf(stderr, "cannot enter %s\n", dir);
        return 1;
    }
    struct dirent **list;
    int n = scandir(".", &list, is_manifest, alphasort);
    CHECK_MSG(n >= MIN_CORPUS_SIZE, "only %d manifests in %s", n, dir);
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        char msg[MESSAGE_MAX], expected_path[MAX_PATH_LEN], expected[MESSAGE_MAX] = "";
        cpdit_status st = error_of(name, msg, sizeof msg);
        snprintf(expected_path, sizeof expected_path, "%.*s.expected",
                 (int)(strlen(name) - 5), name);
        if (write_mode) {
            FILE *f = fopen(expected_path, "w");
            if (f) {
                fprintf(f, "%s\n", msg);
                fclose(f);
            }
            printf("%s\n", msg);
            free(list[i]);
            continue;
        }
        FILE *f = fopen(expected_path, "r");
        CHECK_MSG(f != NULL, "%s: no %s", name, expected_path);
        if (f) {
            if (!fgets(expected, sizeof expected, f))
                expected[0] = '\0';
            fclose(f);
            expected[strcspn(expected, "\n")] = '\0';
        }
        CHECK_MSG(st == CPDIT_ERR_INPUT, "%s: status %d, expected 2 (bad input)", name, st);
        CHECK_MSG(strcmp(msg, expected) == 0, "%s:\n   got: %s\n  want: %s", name, msg,
                  expected);
        free(list[i]);
    }
    free(list);
    fprintf(stderr, "%d bad manifests checked\n", n);
    TEST_MAIN_END();
}
