/* test_nonfinite.c — NaN/Inf from broken weights fail the item with a clear error instead of
 * a black (NaN) or white (Inf) PNG: the pipeline checks the sampled latents and the decoded
 * image (lib/pipeline/pipeline.h). On the built-in tiny model at 32x32, 1 step:
 *   - intact weights: an image (the control: the checks do not fire on good numbers);
 *   - transformer proj_out.bias = NaN: "latents after sampling: ... not finite", no image;
 *   - VAE decoder.conv_out.bias = +Inf: "decoded image: ... not finite", no image.
 * The poisoned models are copies of the cached built-in folder (symlinks, except the one
 * weights file, rewritten with one tensor replaced).
 *
 * usage: test_nonfinite                 run the checks
 *        test_nonfinite --write DIR     only write DIR, a copy of builtin:tiny with a NaN
 *                                       transformer (tests/refuse.sh runs a batch on it)
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/builtin/builtin_model.h"
#include "lib/io/safetensors.h"
#include "lib/pipeline/pipeline.h"
#include "tests/test_tmpdir.h"
#include "tests/test_util.h"

#define PATH_MAX_LEN 4096
#define SIDE 32 /* pixels: the smallest FLUX-friendly image, fast */
#define WEIGHTS "diffusion_pytorch_model.safetensors"

/* Symlink every entry of src into dst (made), except skip. */
static int link_entries(const char *src, const char *dst, const char *skip)
{
    if (mkdir(dst, 0755) != 0 && errno != EEXIST)
        return -1;
    DIR *d = opendir(src);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            (skip && !strcmp(e->d_name, skip)))
            continue;
        char a[PATH_MAX_LEN], b[PATH_MAX_LEN];
        snprintf(a, sizeof a, "%s/%s", src, e->d_name);
        snprintf(b, sizeof b, "%s/%s", dst, e->d_name);
        if (symlink(a, b) != 0)
            rc = -1;
    }
    closedir(d);
    return rc;
}

/* dst = src (a model folder) with tensor `name` of component/WEIGHTS set to value. */
static cpdit_status poisoned_copy(const char *src, const char *dst, const char *component,
                                  const char *name, float value, cpdit_error *err)
{
    char sc[PATH_MAX_LEN], dc[PATH_MAX_LEN], sw[PATH_MAX_LEN + 64], dw[PATH_MAX_LEN + 64];
    snprintf(sc, sizeof sc, "%s/%s", src, component);
    snprintf(dc, sizeof dc, "%s/%s", dst, component);
    snprintf(sw, sizeof sw, "%s/" WEIGHTS, sc);
    snprintf(dw, sizeof dw, "%s/" WEIGHTS, dc);
    if (link_entries(src, dst, component) || link_entries(sc, dc, WEIGHTS))
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, dst, "cannot link: %s", strerror(errno));
    safetensors_file *f;
    cpdit_status st = safetensors_open(&f, sw, err);
    if (st)
        return st;
    size_t n = safetensors_count(f);
    safetensors_write_tensor *w = calloc(n, sizeof *w);
    float *bad = NULL;
    for (size_t i = 0; w && i < n; i++) {
        const safetensors_tensor *t = safetensors_tensor_at(f, i);
        w[i] = (safetensors_write_tensor){t->name, t->dtype, t->ndim, t->shape, t->data,
                                          t->dtype};
        if (!strcmp(t->name, name)) {
            bad = malloc(t->nelem * sizeof *bad);
            for (size_t k = 0; bad && k < t->nelem; k++)
                bad[k] = value;
            w[i].data = bad;
            w[i].src_dtype = CPDIT_DTYPE_F32;
        }
    }
    if (!w || !bad)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, sw, "no tensor %s (or out of memory)",
                             name);
    else
        st = safetensors_write(dw, w, n, NULL, 0, err);
    free(bad);
    free(w);
    safetensors_close(f);
    return st;
}

/* Generate one SIDE x SIDE image from model; returns the status, *rgb_out = image or NULL. */
static cpdit_status generate(const char *model, int *got_image, cpdit_error *err)
{
    pipeline *p = NULL;
    *got_image = 0;
    cpdit_status st = pipeline_open(&p, model, err);
    if (st)
        return st;
    pipeline_params prm = {"a red fox", "", 7, SIDE, SIDE, 1, 3.5f, 1.0f, 0, 0, 0.0, {0}};
    pipeline_run run;
    memset(&run, 0, sizeof run);
    uint8_t *rgb = NULL;
    st = pipeline_generate(p, &prm, &run, &rgb, err);
    *got_image = rgb != NULL;
    free(rgb);
    pipeline_close(p);
    return st;
}

int main(int argc, char **argv)
{
    char tiny[PATH_MAX_LEN];
    cpdit_error err;
    cpdit_error_clear(&err);
    if (builtin_model_path("builtin:tiny", tiny, sizeof tiny, &err)) {
        fprintf(stderr, "%s: %s\n", err.where, err.what);
        return 1;
    }
    if (argc == 3 && !strcmp(argv[1], "--write")) {
        if (poisoned_copy(tiny, argv[2], "transformer", "proj_out.bias", NAN, &err)) {
            fprintf(stderr, "%s: %s\n", err.where, err.what);
            return 1;
        }
        return 0;
    }
    char *dir = tmpdir_make("nonfinite");
    if (!dir)
        TEST_SKIP("cannot create a scratch folder");
    int image;
    cpdit_status st = generate(tiny, &image, &err);
    CHECK_MSG(st == CPDIT_OK && image, "intact model: %s: %s", err.where, err.what);

    char *nan_t = tmp_path(dir, "nan_transformer");
    CHECK_MSG(!poisoned_copy(tiny, nan_t, "transformer", "proj_out.bias", NAN, &err), "%s: %s",
              err.where, err.what);
    cpdit_error_clear(&err);
    st = generate(nan_t, &image, &err);
    CHECK(st == CPDIT_ERR_RUNTIME && !image);
    CHECK_STR_CONTAINS(err.what, "latents after sampling");
    CHECK_STR_CONTAINS(err.what, "not finite");

    char *inf_v = tmp_path(dir, "inf_vae");
    CHECK_MSG(!poisoned_copy(tiny, inf_v, "vae", "decoder.conv_out.bias", INFINITY, &err),
              "%s: %s", err.where, err.what);
    cpdit_error_clear(&err);
    st = generate(inf_v, &image, &err);
    CHECK(st == CPDIT_ERR_RUNTIME && !image);
    CHECK_STR_CONTAINS(err.what, "decoded image");
    CHECK_STR_CONTAINS(err.what, "not finite");

    free(nan_t);
    free(inf_v);
    tmpdir_remove(dir);
    free(dir);
    TEST_MAIN_END();
}
