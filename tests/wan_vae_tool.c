/* wan_vae_tool.c — helper of tests/wan_vae.sh for the Wan VAE decoder (lib/models/wan/wan_vae.h):
 *
 *   wan_vae_tool compare A.safetensors B.safetensors MAX_ABS [MAX_REL_RMS]
 *       tensor "sample" of both: same shape, max |a - b| <= MAX_ABS and
 *       rms(a - b) / rms(b) <= MAX_REL_RMS (when given); prints both numbers. Exit 1 if not.
 *   wan_vae_tool denorm MODEL IN.safetensors OUT.safetensors
 *       WanPipeline's path: latent_sample de-normalised (wan_vae_latents_denormalize), then
 *       the fp32 decode; writes "sample".
 *   wan_vae_tool tiled MODEL IN.safetensors OUT.safetensors MIN STRIDE
 *       the fp32 tiled decode (wan_vae_decode_tiled) with square tiles of MIN pixels every
 *       STRIDE; writes "sample".
 *   wan_vae_tool rss MODEL T h w
 *       decodes pseudo-random latents (1, z_dim, T, h, w) with every frame handed to a callback
 *       that checks its index and drops it; prints "frames F peak_rss_kb K" (getrusage).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/resource.h>

#include "lib/io/safetensors.h"
#include "lib/models/wan/wan_vae.h"

static int fail(const cpdit_error *e)
{
    fprintf(stderr, "wan_vae_tool: %s: %s\n", e->where, e->what);
    return 1;
}

static float *read_tensor(const char *path, const char *name, int64_t *shape, int *ndim,
                          size_t *n, cpdit_error *err)
{
    safetensors_file *f = NULL;
    float *p = NULL;
    if (safetensors_open(&f, path, err))
        return NULL;
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t) {
        cpdit_error_set(err, CPDIT_ERR_INPUT, path, "no tensor \"%s\"", name);
    } else if ((p = malloc(t->nelem * sizeof *p)) &&
               safetensors_tensor_read_f32(t, p, t->nelem, err) == CPDIT_OK) {
        *ndim = t->ndim;
        memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        *n = t->nelem;
    } else {
        free(p);
        p = NULL;
    }
    safetensors_close(f);
    return p;
}

static int compare(int argc, char **argv)
{
    cpdit_error err;
    int64_t sa[8], sb[8];
    int na = 0, nb = 0;
    size_t ca = 0, cb = 0;
    if (argc < 5)
        return 2;
    float *a = read_tensor(argv[2], "sample", sa, &na, &ca, &err);
    float *b = a ? read_tensor(argv[3], "sample", sb, &nb, &cb, &err) : NULL;
    if (!a || !b)
        return fail(&err);
    if (na != nb || ca != cb || memcmp(sa, sb, sizeof(int64_t) * (size_t)na)) {
        fprintf(stderr, "wan_vae_tool: %s and %s: shapes differ\n", argv[2], argv[3]);
        return 1;
    }
    double max = 0, se = 0, sr = 0;
    for (size_t i = 0; i < ca; i++) {
        const double d = fabs((double)a[i] - b[i]);
        max = d > max || isnan(d) ? d : max;
        se += d * d;
        sr += (double)b[i] * b[i];
    }
    const double rel = sqrt(se / (sr > 0 ? sr : 1));
    const double tol = atof(argv[4]), tol_rel = argc > 5 ? atof(argv[5]) : INFINITY;
    printf("max_abs %.3g rel_rms %.3g (limits %g, %g) over %zu values\n", max, rel, tol,
           tol_rel, ca);
    free(a);
    free(b);
    return max <= tol && rel <= tol_rel ? 0 : 1;
}

/* denorm and tiled: read latent_sample, decode one way, write sample. */
static int decode_file(int argc, char **argv, int tiled)
{
    cpdit_error err;
    wan_vae *d = NULL;
    int64_t s[8];
    int nd = 0;
    size_t n = 0;
    if (argc < (tiled ? 7 : 5))
        return 2;
    float *z = read_tensor(argv[3], "latent_sample", s, &nd, &n, &err);
    if (!z || wan_vae_open(&d, argv[2], &err))
        return fail(&err);
    const wan_vae_config *c = wan_vae_config_of(d);
    const int B = (int)s[0], T = (int)s[2], h = (int)s[3], w = (int)s[4];
    const int f = wan_vae_upscale(c), F = wan_vae_frames(c, T);
    const int64_t shape[5] = {B, c->out_channels, F, (int64_t)h * f, (int64_t)w * f};
    float *out = malloc((size_t)B * c->out_channels * F * h * f * w * f * sizeof *out);
    wan_vae_tiling tl = {0, 0, 0, 0};
    if (tiled) {
        tl.min_h = tl.min_w = atoi(argv[5]);
        tl.stride_h = tl.stride_w = atoi(argv[6]);
    } else {
        wan_vae_latents_denormalize(c, z, B, T, h, w);
    }
    int rc = 0;
    if (!out || (tiled ? wan_vae_decode_tiled(d, &tl, z, B, T, h, w, out, &err)
                       : wan_vae_decode_group(d, NULL, z, B, T, h, w, out, &err))) {
        rc = fail(&err);
    } else {
        safetensors_write_tensor wt = {"sample", CPDIT_DTYPE_F32, 5, shape, out,
                                       CPDIT_DTYPE_F32};
        if (safetensors_write(argv[4], &wt, 1, NULL, 0, &err))
            rc = fail(&err);
    }
    free(out);
    free(z);
    wan_vae_free(d);
    return rc;
}

typedef struct counter {
    int next, bad;
} counter;

static int drop_frame(void *p, int b, int f, const float *rgb, int C, int H, int W)
{
    counter *k = p;
    if (b != 0 || f != k->next || !(rgb[0] >= -1.0f && rgb[(size_t)C * H * W - 1] <= 1.0f))
        k->bad = 1;
    k->next++;
    return 0;
}

static int rss(int argc, char **argv)
{
    cpdit_error err;
    wan_vae *d = NULL;
    if (argc < 6)
        return 2;
    const int T = atoi(argv[3]), h = atoi(argv[4]), w = atoi(argv[5]);
    if (wan_vae_open(&d, argv[2], &err))
        return fail(&err);
    const size_t n = (size_t)wan_vae_config_of(d)->z_dim * T * h * w;
    float *z = malloc(n * sizeof *z);
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; z && i < n; i++) { /* xorshift, uniform in [-2, 2) */
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        z[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    }
    counter k = {0, 0};
    wan_vae_set_weight_format(d, CPDIT_WEIGHT_F32);
    int rc = 0;
    if (!z || wan_vae_decode_frames(d, NULL, z, 1, T, h, w, drop_frame, &k, &err))
        rc = fail(&err);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const int want = wan_vae_frames(wan_vae_config_of(d), T);
    printf("frames %d peak_rss_kb %ld\n", k.next, ru.ru_maxrss);
    if (!rc && (k.bad || k.next != want)) {
        fprintf(stderr, "wan_vae_tool: %d frames (want %d), order or range %s\n", k.next, want,
                k.bad ? "wrong" : "right");
        rc = 1;
    }
    free(z);
    wan_vae_free(d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "compare"))
        return compare(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "denorm"))
        return decode_file(argc, argv, 0);
    if (argc > 1 && !strcmp(argv[1], "tiled"))
        return decode_file(argc, argv, 1);
    if (argc > 1 && !strcmp(argv[1], "rss"))
        return rss(argc, argv);
    fprintf(stderr, "usage: wan_vae_tool compare|denorm|tiled|rss ...\n");
    return 2;
}
