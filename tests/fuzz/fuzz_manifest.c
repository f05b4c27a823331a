/* fuzz_manifest.c — libFuzzer target for the manifest parser (yaml/manifest.h): any bytes must
 * give either a manifest or a clean CPDIT_ERR_INPUT with a "FILE:LINE[:COL]" position, never a
 * crash, a leak or undefined behaviour. A manifest that parses is also expanded (inline
 * prompts only, at most MAX_ITEMS items) so the template and the expansion are fuzzed too.
 * Built two ways (jobs/jobs.am): with libFuzzer + sanitizers (`make fuzz-manifest`) and
 * with gcc + tests/fuzz/fuzz_driver_main.c over the seed corpus (`make check`). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/job_items.h"
#include "yaml/manifest.h"

#define MAX_ITEMS 1000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    manifest *m = NULL;
    cpdit_error err;
    cpdit_error_clear(&err);
    cpdit_status st = manifest_parse_bytes("fuzz.yaml", (const char *)data, size, 0, &m, &err);
    if (st != CPDIT_OK) {
        /* an error must say where: "fuzz.yaml..." */
        if (m != NULL || strncmp(err.where, "fuzz.yaml", 9) != 0 || err.what[0] == '\0')
            abort();
        return 0;
    }
    manifest_overrides ov = MANIFEST_OVERRIDES_NONE;
    ov.ring = 2;
    if (manifest_apply_overrides(m, &ov, &err) != CPDIT_OK || m->parallel.ring != 2)
        abort();
    if (!m->prompts_file) {
        job_items *it;
        if (job_items_open(m, NULL, JOB_ITEMS_CHECK_UNIQUE, &it, &err) == CPDIT_OK) {
            const job_item *x;
            size_t n = 0;
            while (n < MAX_ITEMS && job_items_next(it, &x, &err) == CPDIT_OK && x) {
                if (x->file[0] == '\0' || x->file[0] == '.' || strchr(x->file, '/') ||
                    x->width % MANIFEST_SIDE_MULTIPLE || x->height % MANIFEST_SIDE_MULTIPLE)
                    abort();
                n++;
            }
            job_items_close(it);
        }
    }
    manifest_free(m);
    return 0;
}
