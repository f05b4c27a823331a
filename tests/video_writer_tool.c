/* video_writer_tool.c — helper of tests/video_writer.sh (not a test by itself).
 *
 *   video_writer_tool write FORMAT OUT T W H [FPS [CRF]] [--raw RAW] [--lossy Q|--lossless]
 *       writes the synthetic clip (video_synth.h) with the test metadata; prints the result
 *       as key=value lines; --raw also writes the source frames as raw rgb24 (T, H, W, 3).
 *   video_writer_tool available FORMAT     exit 0 when this build writes FORMAT, else prints
 *                                          why and exits 77
 *   video_writer_tool mae A.rgb B.rgb      mean and max absolute difference of two raw files
 *                                          of the same size, in 8-bit levels ("mae=... max=...")
 *   video_writer_tool json FILE PATH       the value at a dotted PATH (streams.0.width,
 *                                          format.tags.prompt) of a JSON file, as text
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/io/video_writer.h"
#include "tests/video_synth.h"

#define EXIT_SKIP 77
#define EXIT_USAGE 2

/* The metadata every clip of the tests carries (the prompt has UTF-8 and XML specials). */
static const cpdit_video_tag test_tags[] = {
    {"prompt", "a red square drifts over a gradient, \xe4\xb8\x80\xe5\x8f\xaa\xe7\x8c\xab caf\xc3\xa9 <&>"},
    {"seed", "42"},
    {"steps", "4"},
    {"model", "builtin:wan-tiny"},
    {"grid", "dp 1 ring 2 ulysses 2"},
};
#define N_TEST_TAGS ((int)(sizeof test_tags / sizeof test_tags[0]))

static int usage(void)
{
    fprintf(stderr, "usage: video_writer_tool write|available|mae|json ... (see the source)\n");
    return EXIT_USAGE;
}

static int cmd_write(int argc, char **argv)
{
    if (argc < 7)
        return usage();
    cpdit_video_format f;
    cpdit_error err;
    if (cpdit_video_format_parse(argv[2], &f, "format", &err)) {
        fprintf(stderr, "%s\n", err.what);
        return EXIT_USAGE;
    }
    const char *out = argv[3];
    int t = atoi(argv[4]), w = atoi(argv[5]), h = atoi(argv[6]);
    cpdit_video_options o;
    cpdit_video_options_init(&o, f);
    const char *raw = NULL;
    int pos = 0;
    for (int i = 7; i < argc; i++) {
        if (strcmp(argv[i], "--raw") == 0 && i + 1 < argc) {
            raw = argv[++i];
        } else if (strcmp(argv[i], "--lossless") == 0) {
            o.webp_lossless = 1;
        } else if (strcmp(argv[i], "--lossy") == 0 && i + 1 < argc) {
            o.webp_lossless = 0;
            o.webp_quality = (float)atof(argv[++i]);
        } else if (pos == 0) {
            o.fps = atof(argv[i]), pos++;
        } else {
            o.crf = atoi(argv[i]);
        }
    }
    uint8_t *clip = synth_clip(t, w, h);
    if (!clip)
        return 1;
    cpdit_video_result r;
    cpdit_status st = cpdit_video_write(out, clip, t, h, w, &o, test_tags, N_TEST_TAGS, &r, &err);
    if (!st && raw) {
        FILE *fp = fopen(raw, "wb");
        if (!fp || fwrite(clip, 1, (size_t)t * w * h * 3, fp) != (size_t)t * w * h * 3)
            st = CPDIT_ERR_RUNTIME, snprintf(err.what, sizeof err.what, "cannot write %s", raw);
        if (fp)
            fclose(fp);
    }
    free(clip);
    if (st) {
        char buf[2048];
        fprintf(stderr, "%s\n", cpdit_error_format(&err, buf, sizeof buf));
        return (int)st;
    }
    printf("frames=%d\nwidth=%d\nheight=%d\nfps=%d/%d\nduration=%.6f\nformat=%s\ncodec=%s\n"
           "bytes=%lld\nfile=%s\n",
           r.frames, r.width, r.height, r.fps_num, r.fps_den, r.duration_s, r.format, r.codec,
           r.bytes, r.file);
    for (int i = 0; i < N_TEST_TAGS; i++)
        printf("tag.%s=%s\n", test_tags[i].key, test_tags[i].value);
    return 0;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = len > 0 ? malloc((size_t)len) : NULL;
    if (b && fread(b, 1, (size_t)len, fp) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(fp);
    *n = b ? (size_t)len : 0;
    return b;
}

static int cmd_mae(const char *a_path, const char *b_path)
{
    size_t na, nb;
    unsigned char *a = slurp(a_path, &na), *b = slurp(b_path, &nb);
    if (!a || !b || na != nb) {
        fprintf(stderr, "mae: cannot read both files with the same size (%zu vs %zu bytes)\n", na,
                nb);
        free(a);
        free(b);
        return 1;
    }
    double sum = 0;
    int mx = 0;
    for (size_t i = 0; i < na; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        sum += d;
        if (d > mx)
            mx = d;
    }
    printf("mae=%.4f max=%d\n", sum / (double)na, mx);
    free(a);
    free(b);
    return 0;
}

static int cmd_json(const char *file, const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(file, 0, &je);
    if (!root) {
        fprintf(stderr, "json: %s: %s\n", file, je.text);
        return 1;
    }
    json_t *v = root;
    char *copy = strdup(path), *save = NULL;
    for (char *part = strtok_r(copy, ".", &save); part && v; part = strtok_r(NULL, ".", &save))
        v = json_is_array(v) ? json_array_get(v, (size_t)atoi(part)) : json_object_get(v, part);
    free(copy);
    int rc = 0;
    if (!v) {
        fprintf(stderr, "json: %s: no %s\n", file, path);
        rc = 1;
    } else if (json_is_string(v)) {
        printf("%s\n", json_string_value(v));
    } else if (json_is_integer(v)) {
        printf("%lld\n", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        printf("%.9g\n", json_real_value(v));
    } else {
        char *s = json_dumps(v, JSON_COMPACT);
        printf("%s\n", s ? s : "");
        free(s);
    }
    json_decref(root);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (strcmp(argv[1], "write") == 0)
        return cmd_write(argc, argv);
    if (strcmp(argv[1], "available") == 0 && argc == 3) {
        cpdit_video_format f;
        cpdit_error err;
        char why[512];
        if (cpdit_video_format_parse(argv[2], &f, "format", &err))
            return EXIT_USAGE;
        if (cpdit_video_format_available(f, why, sizeof why))
            return 0;
        printf("%s\n", why);
        return EXIT_SKIP;
    }
    if (strcmp(argv[1], "mae") == 0 && argc == 4)
        return cmd_mae(argv[2], argv[3]);
    if (strcmp(argv[1], "json") == 0 && argc == 4)
        return cmd_json(argv[2], argv[3]);
    return usage();
}
