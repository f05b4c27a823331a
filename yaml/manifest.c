/* manifest.c — the manifest's public entry points: read, parse (tree + schema), overrides,
 * prompts-file lines, paths, free (see manifest.h). */
#include "yaml/manifest_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/core/utf8.h"
#include "lib/io/regular_file.h"

/* Bytes read from the manifest file per fread call. */
#define READ_CHUNK (64 * 1024)
#define UTF8_BOM "\xef\xbb\xbf"
#define UTF8_BOM_LEN 3

char *manifest_resolve_path(const char *base_dir, const char *rel)
{
    if (!rel)
        return NULL;
    if (rel[0] == '/' || !base_dir || !base_dir[0])
        return strdup(rel);
    size_t a = strlen(base_dir), b = strlen(rel);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, base_dir, a);
    p[a] = '/';
    memcpy(p + a + 1, rel, b + 1);
    return p;
}

/* The folder part of path ("" when there is none, "/" for "/x"). */
static char *folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup("");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

cpdit_status manifest_parse_bytes(const char *path, const char *bytes, size_t len,
                                  unsigned flags, manifest **out, cpdit_error *err)
{
    *out = NULL;
    if (!path)
        path = "manifest";
    mf_ctx c = {path, err};
    manifest *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path)) || !(m->base_dir = folder_of(path))) {
        manifest_free(m);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    if (len > MANIFEST_MAX_BYTES) {
        manifest_free(m);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "larger than %u MiB; put long "
                               "prompt lists in a prompts_file", MANIFEST_MAX_BYTES >> 20);
    }
    mf_node root;
    cpdit_status st = mf_parse_yaml(bytes, len, &root, &c);
    if (!st) {
        st = mf_schema_manifest(&root, m, flags, &c);
        mf_node_free(&root);
    }
    if (st) {
        manifest_free(m);
        return st;
    }
    *out = m;
    return CPDIT_OK;
}

cpdit_status manifest_read_file(const char *path, char **bytes, size_t *len, cpdit_error *err)
{
    *bytes = NULL;
    *len = 0;
    /* a FIFO is refused unopened (no hang, a one-shot writer keeps its data) */
    FILE *f = cpdit_fopen_regular(path, "cannot open the manifest", err);
    if (!f)
        return err->status;
    size_t cap = READ_CHUNK, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            if (cap > MANIFEST_MAX_BYTES)
                break;
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    if (bad) {
        free(buf);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "read error (is it a folder?)");
    }
    if (n > MANIFEST_MAX_BYTES) {
        free(buf);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path, "larger than %u MiB; put long "
                               "prompt lists in a prompts_file", MANIFEST_MAX_BYTES >> 20);
    }
    buf[n] = '\0';
    *bytes = buf;
    *len = n;
    return CPDIT_OK;
}

cpdit_status manifest_load(const char *path, unsigned flags, manifest **out, cpdit_error *err)
{
    char *bytes;
    size_t len;
    *out = NULL;
    cpdit_status st = manifest_read_file(path, &bytes, &len, err);
    if (st)
        return st;
    st = manifest_parse_bytes(path, bytes, len, flags, out, err);
    free(bytes);
    return st;
}

static cpdit_status check_degree(int v, const char *opt, cpdit_error *err)
{
    if (v < 0 || v > MANIFEST_DEGREE_MAX)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, opt, "must be between 1 and %d, got %d",
                               MANIFEST_DEGREE_MAX, v);
    return CPDIT_OK;
}

cpdit_status manifest_apply_overrides(manifest *m, const manifest_overrides *ov,
                                      cpdit_error *err)
{
    if (!ov)
        return CPDIT_OK;
    cpdit_status st;
    if ((st = check_degree(ov->dp, "--dp", err)) || (st = check_degree(ov->ring, "--ring", err)) ||
        (st = check_degree(ov->ulysses, "--ulysses", err)))
        return st;
    if (ov->output_dir) {
        if (!ov->output_dir[0])
            return cpdit_error_set(err, CPDIT_ERR_INPUT, "--output", "empty folder name");
        char *d = strdup(ov->output_dir);
        if (!d)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "--output", "out of memory");
        free(m->output_dir);
        m->output_dir = d;
        m->output_dir_mark.line = m->output_dir_mark.col = 0;
        m->output_dir_from_option = 1;
    }
    if (ov->dp || ov->ring || ov->ulysses) {
        manifest_parallel *p = &m->parallel;
        if (p->is_auto) {
            p->is_auto = 0;
            p->dp = 0;
            p->ring = p->ulysses = 1;
        }
        if (ov->dp)
            p->dp = ov->dp;
        if (ov->ring)
            p->ring = ov->ring;
        if (ov->ulysses)
            p->ulysses = ov->ulysses;
    }
    if (ov->anything >= 0)
        m->parallel.anything = ov->anything ? 1 : 0;
    if (ov->vae_tiling)
        m->vae_tiling = 1;
    if (ov->vae_parallel) {
        int v = manifest_vae_parallel_from_name(ov->vae_parallel);
        if (v < 0)
            return cpdit_error_set(err, CPDIT_ERR_INPUT, "--vae-parallel",
                                   "'%s'; use on, off or world", ov->vae_parallel);
        m->vae_parallel = v;
    }
    if (ov->cache && pipeline_cache_parse(ov->cache, "--cache", &m->cache, err))
        return CPDIT_ERR_INPUT;
    if (m->vae_tiling && m->vae_parallel == MANIFEST_VAE_WORLD)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "vae_parallel",
                               "world splits the decode over every rank, tiling decodes on one "
                               "rank: choose one (vae_tiling / --vae-tiling, or vae_parallel: "
                               "world / --vae-parallel world)");
    return CPDIT_OK;
}

const char *manifest_format_name(manifest_format f)
{
    switch (f) {
    case MANIFEST_FORMAT_MP4: return "mp4";
    case MANIFEST_FORMAT_WEBP: return "webp";
    case MANIFEST_FORMAT_PNG_FRAMES: return "png-frames";
    default: return "png";
    }
}

const char *manifest_format_extension(manifest_format f)
{
    switch (f) {
    case MANIFEST_FORMAT_MP4: return ".mp4";
    case MANIFEST_FORMAT_WEBP: return ".webp";
    case MANIFEST_FORMAT_PNG_FRAMES: return ""; /* a folder */
    default: return ".png";
    }
}

int manifest_vae_parallel_from_name(const char *name)
{
    if (!name)
        return -1;
    if (strcmp(name, "on") == 0)
        return MANIFEST_VAE_ON;
    if (strcmp(name, "off") == 0)
        return MANIFEST_VAE_OFF;
    if (strcmp(name, "world") == 0)
        return MANIFEST_VAE_WORLD;
    return -1;
}

void manifest_free(manifest *m)
{
    if (!m)
        return;
    free(m->path);
    free(m->base_dir);
    free(m->model);
    free(m->output_dir);
    free(m->name_template);
    mf_settings_free(&m->base);
    for (size_t i = 0; i < m->n_prompts; i++)
        mf_prompt_free(&m->prompts[i]);
    free(m->prompts);
    free(m->prompts_file);
    free(m);
}

/* a * b, or UINT64_MAX when it does not fit */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

uint64_t manifest_prompt_items(const manifest *m, const manifest_prompt *p)
{
    const manifest_settings *b = &m->base, *o = &p->over;
    uint64_t seeds = (o->set & MANIFEST_SET_SEEDS) ? o->seeds.n
                     : (o->set & MANIFEST_SET_SEED) ? 1 : b->seeds.n;
    uint64_t sizes = (o->set & MANIFEST_SET_SIZES) ? o->n_sizes
                     : (o->set & (MANIFEST_SET_WIDTH | MANIFEST_SET_HEIGHT)) ? 1 : b->n_sizes;
    uint64_t repeats = (uint64_t)((o->set & MANIFEST_SET_REPEATS) ? o->repeats : b->repeats);
    return mul_sat(mul_sat(seeds, sizes), repeats);
}

cpdit_status manifest_items_add(const manifest *m, const manifest_prompt *p, const char *file,
                                uint64_t *total, cpdit_error *err)
{
    uint64_t n = manifest_prompt_items(m, p);
    uint64_t sum = n > UINT64_MAX - *total ? UINT64_MAX : *total + n;
    *total = sum;
    if (sum <= MANIFEST_ITEMS_MAX)
        return CPDIT_OK;
    mf_ctx c = {file, err};
    return mf_error(&c, p->mark, "too many items: this prompt (%llu item%s: seeds x sizes x "
                    "repeats) brings the manifest to %s%llu, more than the maximum of %d items "
                    "per manifest; split the batch into several manifests",
                    (unsigned long long)n, n == 1 ? "" : "s",
                    sum == UINT64_MAX ? "more than " : "", (unsigned long long)sum,
                    MANIFEST_ITEMS_MAX);
}

uint64_t manifest_seed_at(const manifest_seeds *s, size_t k)
{
    return s->list ? s->list[k] : s->start + (uint64_t)k;
}

void manifest_prompt_free(manifest_prompt *p)
{
    if (p)
        mf_prompt_free(p);
}

static int is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r'; }

/* The first control character of valid UTF-8 text s, as the manifest's pre-check refuses
 * them (C0 but tab, DEL, C1 U+0080..U+009F), or 0 when there is none. */
static unsigned control_character(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            return *p;
        if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) /* U+0080..U+009F in UTF-8 */
            return p[1];
    }
    return 0;
}

cpdit_status manifest_prompt_parse_line(manifest_prompts_format format, const char *file,
                                        int line_no, const char *line, size_t len,
                                        manifest_prompt *out, cpdit_error *err)
{
    mf_ctx c = {file, err};
    manifest_mark at = {line_no, 0};
    memset(out, 0, sizeof *out);
    out->mark = at;
    /* a UTF-8 byte order mark (Windows editors) before line 1: dropped, as in the manifest */
    if (line_no == 1 && len >= UTF8_BOM_LEN && memcmp(line, UTF8_BOM, UTF8_BOM_LEN) == 0)
        line += UTF8_BOM_LEN, len -= UTF8_BOM_LEN;
    while (len > 0 && is_space(line[len - 1]))
        len--;
    while (len > 0 && is_space(line[0]))
        line++, len--;
    if (len == 0 || (format == MANIFEST_PROMPTS_TEXT && line[0] == '#'))
        return CPDIT_OK;
    if (memchr(line, '\0', len))
        return mf_error(&c, at, "NUL byte in the line");
    if (format == MANIFEST_PROMPTS_TEXT) {
        out->text = strndup(line, len);
        if (!out->text)
            return cpdit_error_set(err, CPDIT_ERR_RUNTIME, file, "out of memory");
        if (!cpdit_utf8_valid(out->text)) {
            mf_prompt_free(out);
            return mf_error(&c, at, "not valid UTF-8; save the prompts file as UTF-8");
        }
        unsigned cc = control_character(out->text);
        if (cc) { /* as in the manifest itself: ESC and the like never reach a prompt */
            mf_prompt_free(out);
            return mf_error(&c, at, "control character U+%04X is not allowed", cc);
        }
        return CPDIT_OK;
    }
    json_error_t jerr;
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!j)
        return mf_error(&c, at, "invalid JSON: %s", jerr.text);
    cpdit_status st;
    if (!json_is_object(j) && !json_is_string(j)) {
        st = mf_error(&c, at, "expected a JSON object {\"prompt\": ...} or a string");
    } else {
        mf_node n;
        st = mf_node_from_json(j, line_no, &n, &c);
        if (!st)
            st = mf_schema_prompt(&n, out, &c);
        mf_node_free(&n);
    }
    json_decref(j);
    if (st)
        mf_prompt_free(out);
    return st;
}
