/* test_safetensors.c — safetensors reader, writer and sharded sets (lib/io/safetensors.h).
 *
 * - round trip of every dtype through safetensors_write + safetensors_open: bytes identical
 *   (copied dtypes) or identical to cpdit_dtype_from_f32 (converted from f32), shapes, metadata,
 *   sorted/padded header, element-size alignment of every tensor in the file;
 * - a table of malformed files built here from byte strings, each refused with
 *   CPDIT_ERR_INPUT, where = the file path, and an expected message fragment; the same table
 *   through safetensors_parse_buffer and safetensors_open;
 * - atomic replacement (no temporary file left, old file kept when a write fails);
 * - sharded index: good set, folder resolution, missing shard, tensor not in its shard,
 *   tensor in two shards, unlisted tensor, escaping shard name.
 * Files go to a mkdtemp folder under $TMPDIR (or /tmp), removed at the end.
 */
#include "lib/io/safetensors.h"
#include "tests/test_util.h"

#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[4096];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static const char *tmp_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
    return buf;
}

static int write_bytes(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    int ok;
    if (!fp)
        return -1;
    ok = fwrite(data, 1, len, fp) == len;
    return (fclose(fp) == 0 && ok) ? 0 : -1;
}

/* Number of directory entries of dir whose name starts with prefix. */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* ---------------------------------------------------------------- round trip */

static void fill_values(float *v, size_t n, unsigned seed)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.5f, 448.0f, 65504.0f, 1e-7f,
                                    3.0e-5f, -2.75f, 0.1f};
    size_t i;
    for (i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = i < sizeof special / sizeof special[0]
                   ? special[i]
                   : ldexpf((float)(seed >> 8) / 16777216.0f - 0.5f, (int)(seed % 24) - 12);
    }
}

static void test_round_trip(void)
{
    enum { N = 60 };
    const int64_t shape[3] = {3, 4, 5};
    static float src[CPDIT_DTYPE_COUNT][N], back[N];
    static unsigned char raw[CPDIT_DTYPE_COUNT][N * 8], want[N * 8];
    static char names[2 * CPDIT_DTYPE_COUNT][32];
    safetensors_write_tensor w[2 * CPDIT_DTYPE_COUNT];
    safetensors_kv meta[2] = {{"format", "pt"}, {"note", "ünïcode ✓"}};
    safetensors_file *f = NULL;
    cpdit_error err;
    char path[4200];
    size_t nw = 0, i, hlen;
    int d;
    FILE *fp;
    unsigned char head[16];

    memset(w, 0, sizeof w);
    for (d = CPDIT_DTYPE_F32; d < CPDIT_DTYPE_COUNT; d++) {
        size_t k;
        for (k = 0; k < sizeof raw[d]; k++) /* raw bytes, every pattern of a byte appears */
            raw[d][k] = (unsigned char)(k * 37u + (unsigned)d);
        snprintf(names[nw], sizeof names[nw], "raw.%s", cpdit_dtype_name((cpdit_dtype)d));
        w[nw] = (safetensors_write_tensor){names[nw], (cpdit_dtype)d, 3, shape, raw[d],
                                           CPDIT_DTYPE_INVALID};
        nw++;
        if (cpdit_dtype_is_float((cpdit_dtype)d)) {
            fill_values(src[d], N, (unsigned)d);
            snprintf(names[nw], sizeof names[nw], "conv.%s", cpdit_dtype_name((cpdit_dtype)d));
            w[nw] = (safetensors_write_tensor){names[nw], (cpdit_dtype)d, 3, shape, src[d],
                                               CPDIT_DTYPE_F32};
            nw++;
        }
    }
    tmp_path(path, sizeof path, "roundtrip.safetensors");
    cpdit_error_clear(&err);
    CHECK(safetensors_write(path, w, nw, meta, 2, &err) == CPDIT_OK);
    CHECK_MSG(err.status == CPDIT_OK, "%s: %s", err.where, err.what);
    CHECK(count_entries(tmpdir, ".roundtrip") == 0); /* no temporary file left */

    /* header: length multiple of 8, sorted keys, space padding */
    fp = fopen(path, "rb");
    CHECK(fp && fread(head, 1, sizeof head, fp) == sizeof head);
    if (fp)
        fclose(fp);
    hlen = 0;
    for (i = 0; i < 8; i++)
        hlen |= (size_t)head[i] << (8 * i);
    CHECK(hlen % 8 == 0);
    CHECK(memcmp(head + 8, "{\"__met", 7) == 0);

    CHECK(safetensors_open(&f, path, &err) == CPDIT_OK);
    if (!f) {
        fprintf(stderr, "%s: %s\n", err.where, err.what);
        test_failures++;
        return;
    }
    CHECK(safetensors_count(f) == nw);
    CHECK(safetensors_metadata_count(f) == 2);
    CHECK(strcmp(safetensors_metadata_get(f, "format"), "pt") == 0);
    CHECK(strcmp(safetensors_metadata_get(f, "note"), "ünïcode ✓") == 0);
    CHECK(safetensors_metadata_get(f, "absent") == NULL);
    for (i = 0; i < nw; i++) {
        const safetensors_tensor *t = safetensors_find(f, w[i].name);
        size_t es = cpdit_dtype_size(w[i].dtype), k;
        CHECK_MSG(t != NULL, "%s missing", w[i].name);
        if (!t)
            continue;
        CHECK(t->dtype == w[i].dtype && t->ndim == 3 && t->shape[0] == 3 && t->shape[1] == 4 &&
              t->shape[2] == 5 && t->nelem == N && t->nbytes == N * es);
        CHECK_MSG((uintptr_t)t->data % es == 0, "%s not aligned to %zu", t->name, es);
        CHECK(strcmp(t->file, path) == 0);
        if (w[i].src_dtype == CPDIT_DTYPE_F32) { /* converted: bits = from_f32 output */
            CHECK(cpdit_dtype_from_f32(want, w[i].dtype, src[w[i].dtype], N, NULL) == CPDIT_OK);
            CHECK_MSG(memcmp(t->data, want, t->nbytes) == 0, "%s bytes differ", t->name);
            CHECK(safetensors_read_f32(f, t->name, back, N, &err) == CPDIT_OK);
            for (k = 0; k < N; k++) {
                const float expect = src[w[i].dtype][k];
                const cpdit_dtype dt = w[i].dtype;
                float tol = fabsf(expect) * (dt == CPDIT_DTYPE_F16    ? 1e-3f /* 2^-11 */
                                             : dt == CPDIT_DTYPE_BF16 ? 4e-3f /* 2^-9 */
                                             : cpdit_dtype_is_float(dt) && cpdit_dtype_size(dt) == 1
                                                 ? 0.13f /* 2^-4, 2^-3 */
                                                 : 0.0f);
                if (dt == CPDIT_DTYPE_F8_E4M3 && fabsf(expect) < 0.0156f)
                    tol = 1e-3f; /* below 2^-6: absolute error <= 2^-10 */
                if ((dt == CPDIT_DTYPE_F8_E5M2 || dt == CPDIT_DTYPE_F16) && fabsf(expect) < 6.2e-5f)
                    tol = dt == CPDIT_DTYPE_F16 ? 3e-8f : 8e-6f; /* 2^-25, 2^-17 */
                if (fabsf(expect) > cpdit_dtype_max_finite(dt)) /* max, or inf / NaN (E4M3) */
                    CHECK(isinf(back[k]) || isnan(back[k]) || fabsf(back[k] - expect) <= tol);
                else
                    CHECK_NEAR(back[k], expect, tol);
            }
        } else {
            CHECK_MSG(memcmp(t->data, raw[w[i].dtype], t->nbytes) == 0, "%s bytes", t->name);
        }
    }
    CHECK(safetensors_read_f32(f, "raw.F32", back, N - 1, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "has 60 elements but the destination holds 59");
    CHECK(safetensors_read_f32(f, "nope", back, N, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "no tensor named \"nope\"");
    for (i = 1; i < safetensors_count(f); i++) /* listed in name order */
        CHECK(strcmp(safetensors_tensor_at(f, i - 1)->name, safetensors_tensor_at(f, i)->name) < 0);
    CHECK(safetensors_tensor_at(f, nw) == NULL);
    safetensors_close(f);
}

/* Small tensors (scalar, empty, no metadata) and writer argument errors. */
static void test_writer_edges(void)
{
    const int64_t zero_shape[2] = {0, 7}, neg[1] = {-2}, one[1] = {1};
    const float one_value = 3.5f;
    safetensors_write_tensor w[3] = {
        {"scalar", CPDIT_DTYPE_BF16, 0, NULL, &one_value, CPDIT_DTYPE_F32},
        {"empty", CPDIT_DTYPE_F16, 2, zero_shape, NULL, CPDIT_DTYPE_F32},
        {"v", CPDIT_DTYPE_F32, 1, one, &one_value, CPDIT_DTYPE_INVALID},
    };
    safetensors_write_tensor bad;
    safetensors_file *f = NULL;
    cpdit_error err;
    char path[4200], missing[4200];
    float x = 0;

    tmp_path(path, sizeof path, "edges.safetensors");
    CHECK(safetensors_write(path, w, 3, NULL, 0, &err) == CPDIT_OK);
    CHECK(safetensors_open(&f, path, &err) == CPDIT_OK);
    if (f) {
        const safetensors_tensor *s = safetensors_find(f, "scalar");
        CHECK(s && s->ndim == 0 && s->nelem == 1 && s->nbytes == 2);
        CHECK(safetensors_read_f32(f, "scalar", &x, 1, &err) == CPDIT_OK && x == 3.5f);
        CHECK(safetensors_find(f, "empty") && safetensors_find(f, "empty")->nelem == 0);
        CHECK(safetensors_metadata_count(f) == 0);
        safetensors_close(f);
    }
    /* rewrite in place with other content: the new file replaces the old one */
    w[2].dtype = CPDIT_DTYPE_F64;
    w[2].src_dtype = CPDIT_DTYPE_F32;
    CHECK(safetensors_write(path, &w[2], 1, NULL, 0, &err) == CPDIT_OK);
    CHECK(safetensors_open(&f, path, &err) == CPDIT_OK);
    if (f) {
        CHECK(safetensors_count(f) == 1 && safetensors_find(f, "v")->dtype == CPDIT_DTYPE_F64);
        safetensors_close(f);
    }
    /* failures leave the existing file alone and no temporary file behind */
    bad = w[2];
    bad.name = "__metadata__";
    CHECK(safetensors_write(path, &bad, 1, NULL, 0, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "cannot be a tensor name");
    bad = w[2];
    bad.dtype = CPDIT_DTYPE_I32;
    CHECK(safetensors_write(path, &bad, 1, NULL, 0, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "cannot write dtype I32 from F32 data");
    bad = w[2];
    bad.shape = neg;
    CHECK(safetensors_write(path, &bad, 1, NULL, 0, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "negative");
    bad = w[2];
    bad.name = "bad\xff";
    CHECK(safetensors_write(path, &bad, 1, NULL, 0, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "not valid UTF-8");
    {
        safetensors_write_tensor twice[2] = {w[2], w[2]};
        CHECK(safetensors_write(path, twice, 2, NULL, 0, &err) == CPDIT_ERR_INPUT);
        CHECK_STR_CONTAINS(err.what, "tensor \"v\" given twice");
    }
    CHECK(safetensors_open(&f, path, &err) == CPDIT_OK); /* still the previous good file */
    if (f) {
        CHECK(safetensors_count(f) == 1);
        safetensors_close(f);
    }
    CHECK(count_entries(tmpdir, ".edges") == 0);
    tmp_path(missing, sizeof missing, "no/such/dir/x.safetensors");
    CHECK(safetensors_write(missing, w, 1, NULL, 0, &err) != CPDIT_OK);
    CHECK_STR_CONTAINS(err.what, "cannot create the output file");
}

/* ---------------------------------------------------------------- malformed files */

#define USE_ACTUAL_LEN UINT64_MAX

typedef struct bad_case {
    const char *label;
    const char *header;     /* JSON text (may hold any bytes) */
    size_t data_len;        /* zero bytes appended after the header */
    uint64_t header_len;    /* value written in the length field, or USE_ACTUAL_LEN */
    size_t truncate;        /* if nonzero: keep only this many bytes of the file */
    const char *expect;     /* fragment of err.what */
} bad_case;

static const bad_case bad_cases[] = {
    {"shorter than 8 bytes", "", 0, 5, 3, "too short for the 8-byte header length"},
    {"empty file", "", 0, 0, 0, "file is 0 bytes, too short"},
    {"header length 0", "", 0, 0, 0, "header length 0 is too small"},
    {"header length 1", "{", 0, 1, 0, "too small to hold a JSON object"},
    {"header length past the file", "{}", 0, 1000, 0, "runs past the end of the file"},
    {"header length 2^63", "{}", 0, UINT64_C(1) << 63, 0, "exceeds the limit of 100000000"},
    {"header truncated", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     USE_ACTUAL_LEN, 20, "runs past the end of the file"},
    {"invalid JSON", "{\"a\":", 0, USE_ACTUAL_LEN, 0, "header is not valid JSON"},
    {"trailing garbage", "{} x", 0, USE_ACTUAL_LEN, 0, "header is not valid JSON"},
    {"NUL padding", "{}\0\0", 0, USE_ACTUAL_LEN, 0, "header is not valid JSON"},
    {"JSON array", "[1, 2]", 0, USE_ACTUAL_LEN, 0, "must be a JSON object, not an array"},
    {"JSON scalar", "17", 0, USE_ACTUAL_LEN, 0, "not valid JSON: '[' or '{' expected"},
    {"duplicate key",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, USE_ACTUAL_LEN, 0,
     "duplicate"},
    {"not UTF-8", "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     USE_ACTUAL_LEN, 0, "header is not valid UTF-8 (bad byte 0xff at header offset 3)"},
    {"overlong UTF-8", "{\"\xc0\xaf\":1}", 0, USE_ACTUAL_LEN, 0, "not valid UTF-8"},
    {"NUL escape in name", "{\"a\\u0000b\":{}}", 0, USE_ACTUAL_LEN, 0, "not valid JSON"},
    {"entry not object", "{\"w\":5}", 0, USE_ACTUAL_LEN, 0,
     "tensor \"w\": entry must be an object"},
    {"unknown dtype", "{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     USE_ACTUAL_LEN, 0, "tensor \"w\": unknown dtype \"F33\""},
    {"dtype not string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     USE_ACTUAL_LEN, 0, "tensor \"w\": \"dtype\" must be a string"},
    {"shape negative", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
     USE_ACTUAL_LEN, 0, "tensor \"w\": \"shape\"[0] = -1 is negative"},
    {"shape string", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]}}",
     8, USE_ACTUAL_LEN, 0, "tensor \"w\": \"shape\"[1] is not an integer"},
    {"shape float", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
     USE_ACTUAL_LEN, 0, "\"shape\"[0] is not an integer"},
    {"shape not list", "{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8,
     USE_ACTUAL_LEN, 0, "\"shape\" must be a list of non-negative integers"},
    {"rank 9", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
     1, USE_ACTUAL_LEN, 0, "has 9 dimensions, more than the 8 supported"},
    {"element count overflow",
     "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}", 0,
     USE_ACTUAL_LEN, 0, "element count of its shape overflows"},
    {"byte size overflow",
     "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0,
     USE_ACTUAL_LEN, 0, "byte size of its shape overflows"},
    {"missing data_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, USE_ACTUAL_LEN, 0,
     "tensor \"w\": missing field \"data_offsets\""},
    {"missing shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, USE_ACTUAL_LEN, 0,
     "missing field \"shape\""},
    {"extra field",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4,
     USE_ACTUAL_LEN, 0, "tensor \"w\": unexpected field \"extra\""},
    {"offsets three numbers",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, USE_ACTUAL_LEN, 0,
     "\"data_offsets\" must be [begin, end]"},
    {"offsets negative", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
     4, USE_ACTUAL_LEN, 0, "\"data_offsets\" must be [begin, end]"},
    {"offsets reversed", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
     USE_ACTUAL_LEN, 0, "data_offsets [8, 4] end before begin"},
    {"end past data", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
     USE_ACTUAL_LEN, 0, "data_offsets end 16 is past the end of the data region (8 bytes)"},
    {"huge end", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[9223372036854775803,9223372036854775807]}}", 8,
     USE_ACTUAL_LEN, 0, "past the end of the data region"},
    {"size mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
     USE_ACTUAL_LEN, 0, "shape [3] of dtype F32 needs 12 bytes but data_offsets [0, 8] hold 8"},
    {"overlap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, USE_ACTUAL_LEN, 0,
     "tensors \"a\" [0, 8) and \"b\" [4, 12) overlap"},
    {"same range twice",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, USE_ACTUAL_LEN, 0,
     "overlap"},
    {"hole",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, USE_ACTUAL_LEN, 0,
     "bytes [4, 8) of the data region belong to no tensor (a hole before tensor \"b\")"},
    {"trailing data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12,
     USE_ACTUAL_LEN, 0, "bytes [4, 12) at the end of the data region belong to no tensor"},
    {"data but no tensors", "{}", 4, USE_ACTUAL_LEN, 0, "belong to no tensor"},
    {"metadata value not string", "{\"__metadata__\":{\"k\":1}}", 0, USE_ACTUAL_LEN, 0,
     "\"__metadata__\" value for key \"k\" is not a string"},
    {"metadata not object", "{\"__metadata__\":[\"k\"]}", 0, USE_ACTUAL_LEN, 0,
     "\"__metadata__\" must be an object"},
};

/* The bytes of a case: length field, header, zero data; truncated if asked. */
static size_t build_case(const bad_case *c, unsigned char *out, size_t cap, size_t header_bytes)
{
    uint64_t n = c->header_len == USE_ACTUAL_LEN ? header_bytes : c->header_len;
    size_t len = 8 + header_bytes + c->data_len, i;
    if (len > cap)
        return 0;
    for (i = 0; i < 8; i++)
        out[i] = (unsigned char)(n >> (8 * i));
    memcpy(out + 8, c->header, header_bytes);
    memset(out + 8 + header_bytes, 0, c->data_len);
    if (c->truncate && c->truncate < len)
        len = c->truncate;
    return len;
}

static void test_malformed(void)
{
    size_t i;
    CHECK(sizeof bad_cases / sizeof bad_cases[0] >= 15);
    for (i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        unsigned char buf[512];
        /* header strings with embedded NULs: the NUL padding case is 4 bytes long */
        size_t hb = strcmp(c->label, "NUL padding") == 0 ? 4 : strlen(c->header);
        size_t len = build_case(c, buf, sizeof buf, hb);
        safetensors_file *f = NULL;
        cpdit_error err;
        char path[4200], name[64];
        snprintf(name, sizeof name, "bad%02zu.safetensors", i);
        tmp_path(path, sizeof path, name);
        if (strcmp(c->label, "empty file") == 0)
            len = 0;
        cpdit_error_clear(&err);
        CHECK_MSG(safetensors_parse_buffer(&f, buf, len, "mem", &err) == CPDIT_ERR_INPUT,
                  "case '%s' accepted", c->label);
        CHECK(f == NULL);
        CHECK_MSG(strstr(err.what, c->expect) != NULL, "case '%s': got \"%s\", want \"%s\"",
                  c->label, err.what, c->expect);
        CHECK(strcmp(err.where, "mem") == 0);
        CHECK(write_bytes(path, buf, len) == 0);
        cpdit_error_clear(&err);
        CHECK_MSG(safetensors_open(&f, path, &err) == CPDIT_ERR_INPUT, "file case '%s'",
                  c->label);
        CHECK(f == NULL);
        CHECK_MSG(strstr(err.what, c->expect) != NULL, "file case '%s': got \"%s\"", c->label,
                  err.what);
        CHECK_STR_CONTAINS(err.where, name);
    }
}

/* Odd but valid headers: leading/trailing whitespace, metadata null, zero-size tensors at
 * boundaries, unpadded header (odd data start), every integer dtype read as f32. */
static void test_valid_oddities(void)
{
    static const char header[] =
        "  {\"__metadata__\":null, \"z0\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
        "\"i\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[0,4]},"
        "\"z1\":{\"shape\":[3,0],\"dtype\":\"BF16\",\"data_offsets\":[4,4]},"
        "\"b\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[4,5]}}   ";
    unsigned char buf[512];
    size_t hb = strlen(header), i;
    int16_t iv[2] = {-300, 7};
    float out[2];
    safetensors_file *f = NULL;
    cpdit_error err;
    for (i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hb >> (8 * i));
    memcpy(buf + 8, header, hb);
    memcpy(buf + 8 + hb, iv, sizeof iv);
    buf[8 + hb + 4] = 2;
    CHECK(safetensors_parse_buffer(&f, buf, 8 + hb + 5, NULL, &err) == CPDIT_OK);
    if (!f) {
        fprintf(stderr, "%s: %s\n", err.where, err.what);
        test_failures++;
        return;
    }
    CHECK(safetensors_count(f) == 4 && safetensors_metadata_count(f) == 0);
    CHECK(strcmp(safetensors_path(f), "<buffer>") == 0);
    CHECK(safetensors_read_f32(f, "i", out, 2, &err) == CPDIT_OK);
    CHECK(out[0] == -300.0f && out[1] == 7.0f);
    CHECK(safetensors_read_f32(f, "b", out, 1, &err) == CPDIT_OK && out[0] == 1.0f);
    CHECK(safetensors_find(f, "z1")->nelem == 0 && safetensors_find(f, "z1")->ndim == 2);
    safetensors_close(f);
}

/* ---------------------------------------------------------------- sharded sets */

static void write_shard(const char *name, const char *const *tensors, size_t n, float base)
{
    const int64_t shape[1] = {2};
    float values[8][2];
    safetensors_write_tensor w[8];
    char path[4200];
    cpdit_error err;
    size_t i;
    for (i = 0; i < n; i++) {
        values[i][0] = base + (float)i;
        values[i][1] = -(base + (float)i);
        w[i] = (safetensors_write_tensor){tensors[i], CPDIT_DTYPE_BF16, 1, shape, values[i],
                                          CPDIT_DTYPE_F32};
    }
    CHECK(safetensors_write(tmp_path(path, sizeof path, name), w, n, NULL, 0, &err) == CPDIT_OK);
}

static void write_text(const char *name, const char *text)
{
    char path[4200];
    CHECK(write_bytes(tmp_path(path, sizeof path, name), text, strlen(text)) == 0);
}

/* Open name (relative to tmpdir) as a set expecting failure with fragment expect. */
static void expect_set_error(const char *name, const char *expect)
{
    safetensors_set *s = NULL;
    cpdit_error err;
    char path[4200];
    cpdit_error_clear(&err);
    CHECK_MSG(safetensors_set_open(&s, tmp_path(path, sizeof path, name), &err) ==
                  CPDIT_ERR_INPUT, "%s accepted", name);
    CHECK(s == NULL);
    CHECK_MSG(strstr(err.what, expect) != NULL, "%s: got \"%s\", want \"%s\"", name, err.what,
              expect);
    safetensors_set_close(s);
}

static void test_sets(void)
{
    static const char *const s1[] = {"a", "b"}, *const s2[] = {"c"}, *const s3[] = {"b"};
    safetensors_set *s = NULL;
    cpdit_error err;
    char path[4200];
    float v[2];

    CHECK(mkdir(tmp_path(path, sizeof path, "sharded"), 0755) == 0);
    write_shard("sharded/part-1.safetensors", s1, 2, 1.0f);
    write_shard("sharded/part-2.safetensors", s2, 1, 10.0f);
    write_shard("sharded/part-3.safetensors", s3, 1, 20.0f);
    write_text("sharded/diffusion_pytorch_model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":12},\"weight_map\":{\"a\":\"part-1.safetensors\","
               "\"b\":\"part-1.safetensors\",\"c\":\"part-2.safetensors\"}}");
    /* the folder resolves to the index */
    CHECK(safetensors_set_open(&s, tmp_path(path, sizeof path, "sharded"), &err) == CPDIT_OK);
    if (s) {
        CHECK_STR_CONTAINS(safetensors_set_path(s), "diffusion_pytorch_model.safetensors.index");
        CHECK(safetensors_set_count(s) == 3 && safetensors_set_file_count(s) == 2);
        CHECK(safetensors_set_find(s, "c") != NULL);
        CHECK_STR_CONTAINS(safetensors_set_find(s, "c")->file, "sharded/part-2.safetensors");
        CHECK(safetensors_set_read_f32(s, "c", v, 2, &err) == CPDIT_OK);
        CHECK(v[0] == 10.0f && v[1] == -10.0f);
        CHECK(safetensors_set_read_f32(s, "b", v, 2, &err) == CPDIT_OK && v[0] == 2.0f);
        CHECK(safetensors_set_find(s, "zz") == NULL);
        CHECK(safetensors_set_read_f32(s, "zz", v, 2, &err) == CPDIT_ERR_INPUT);
        CHECK(strcmp(safetensors_set_tensor_at(s, 0)->name, "a") == 0);
        CHECK(safetensors_set_tensor_at(s, 3) == NULL);
        CHECK(safetensors_set_file_at(s, 1) && safetensors_set_file_at(s, 2) == NULL);
        safetensors_set_close(s);
        s = NULL;
    }
    /* a single file is a set of one; a folder with model.safetensors resolves to it */
    CHECK(mkdir(tmp_path(path, sizeof path, "single"), 0755) == 0);
    write_shard("single/model.safetensors", s1, 2, 5.0f);
    CHECK(safetensors_set_open(&s, tmp_path(path, sizeof path, "single/"), &err) == CPDIT_OK);
    if (s) {
        CHECK_STR_CONTAINS(safetensors_set_path(s), "single/model.safetensors");
        CHECK(safetensors_set_count(s) == 2 && safetensors_set_file_count(s) == 1);
        safetensors_set_close(s);
        s = NULL;
    }
    /* diffusers' name wins over transformers' when both are there */
    write_shard("single/diffusion_pytorch_model.safetensors", s2, 1, 5.0f);
    CHECK(safetensors_set_open(&s, tmp_path(path, sizeof path, "single"), &err) == CPDIT_OK);
    if (s) {
        CHECK(safetensors_set_count(s) == 1 && safetensors_set_find(s, "c"));
        safetensors_set_close(s);
        s = NULL;
    }
    CHECK(mkdir(tmp_path(path, sizeof path, "nothing"), 0755) == 0);
    expect_set_error("nothing", "folder has no diffusion_pytorch_model.safetensors");
    expect_set_error("absent.safetensors", "cannot open");

    write_text("sharded/missing-shard.index.json",
               "{\"weight_map\":{\"a\":\"part-1.safetensors\",\"x\":\"part-9.safetensors\"}}");
    expect_set_error("sharded/missing-shard.index.json",
                     "part-9.safetensors listed in the weight_map cannot be opened");
    write_text("sharded/not-in-shard.index.json",
               "{\"weight_map\":{\"a\":\"part-1.safetensors\",\"b\":\"part-1.safetensors\","
               "\"c\":\"part-1.safetensors\"}}");
    expect_set_error("sharded/not-in-shard.index.json",
                     "tensor \"c\" is mapped to shard");
    expect_set_error("sharded/not-in-shard.index.json", "part-1.safetensors, which does not "
                                                        "contain it");
    write_text("sharded/two-shards.index.json",
               "{\"weight_map\":{\"a\":\"part-1.safetensors\",\"b\":\"part-3.safetensors\"}}");
    expect_set_error("sharded/two-shards.index.json", "tensor \"b\" is present in two shards");
    write_text("sharded/unlisted.index.json", "{\"weight_map\":{\"a\":\"part-1.safetensors\"}}");
    expect_set_error("sharded/unlisted.index.json",
                     "tensor \"b\" of shard");
    write_text("sharded/escape.index.json", "{\"weight_map\":{\"a\":\"../part-1.safetensors\"}}");
    expect_set_error("sharded/escape.index.json", "must be a relative path without \"..\"");
    write_text("sharded/no-map.index.json", "{\"metadata\":{}}");
    expect_set_error("sharded/no-map.index.json", "index has no \"weight_map\" object");
    write_text("sharded/dup.index.json",
               "{\"weight_map\":{\"a\":\"part-1.safetensors\",\"a\":\"part-1.safetensors\"}}");
    expect_set_error("sharded/dup.index.json", "duplicate");
    write_text("sharded/bad-value.index.json", "{\"weight_map\":{\"a\":3}}");
    expect_set_error("sharded/bad-value.index.json", "is not a file name");
    /* a bad shard reports the shard's own error */
    CHECK(write_bytes(tmp_path(path, sizeof path, "sharded/part-bad.safetensors"),
                      "\x02\0\0\0\0\0\0\0[]", 10) == 0);
    write_text("sharded/bad-shard.index.json", "{\"weight_map\":{\"a\":\"part-bad.safetensors\"}}");
    expect_set_error("sharded/bad-shard.index.json", "must be a JSON object, not an array");
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/cpdit-safetensors-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_writer_edges();
    test_malformed();
    test_valid_oddities();
    test_sets();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_MAIN_END();
}
