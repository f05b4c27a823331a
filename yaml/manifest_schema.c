/* manifest_schema.c — the manifest's keys, types, defaults and checks (yaml/README.md).
 *
 * Walks the document tree in document order, so the first problem in the file is the one
 * reported: an unknown key (with the allowed keys and the closest spelling), a duplicate key
 * (with where it first appeared), a wrong type ("expected an integer, got string \"abc\""),
 * a value out of range. Checks that involve several keys (a missing `model:`, no prompts at
 * all, `seeds:` together with `defaults.seed`) come after the walk.
 */
#include "yaml/manifest_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/models/model_defaults.h" /* model_run_defaults */
#include "lib/io/regular_file.h" /* cpdit_file_kind */
#include "yaml/name_template.h"   /* output.name */

#define BUILTIN_PREFIX "builtin:"
#define MAX_KEYS 16 /* more than any mapping of the schema has */
#define ALLOWED_LIST_MAX 256

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const char *const TOP_KEYS[] = {"model",   "output",  "defaults",     "seeds",   "sizes",
                                       "repeats", "prompts", "prompts_file", "parallel",
                                       "vae_tiling", "vae_parallel", "cache"};
enum { K_MODEL, K_OUTPUT, K_DEFAULTS, K_SEEDS, K_SIZES, K_REPEATS, K_PROMPTS, K_PROMPTS_FILE,
       K_PARALLEL, K_VAE_TILING, K_VAE_PARALLEL, K_CACHE };
static const char *const OUTPUT_KEYS[] = {"dir", "name", "format"};

/* `cache: fbcache[:THRESHOLD] | taylorseer[:ORDER,INTERVAL] | none` (limits: manifest.h). */
static cpdit_status parse_cache(mf_ctx *c, const mf_node *v, manifest *m)
{
    char *s = NULL;
    cpdit_status st = mf_get_string(c, v, "cache", &s);
    if (st)
        return st;
    cpdit_error e;
    cpdit_error_clear(&e);
    if (pipeline_cache_parse(s, "cache", &m->cache, &e))
        st = mf_error(c, v->mark, "cache: %s", e.what);
    free(s);
    return st;
}

/* `vae_parallel: on|off|world` (a string: YAML 1.2 reads on/off as strings). */
static cpdit_status parse_vae_parallel(mf_ctx *c, const mf_node *v, manifest *m)
{
    char *s = NULL;
    cpdit_status st = mf_get_string(c, v, "vae_parallel", &s);
    if (st)
        return st;
    int x = manifest_vae_parallel_from_name(s);
    free(s);
    if (x < 0)
        return mf_error(c, v->mark, "vae_parallel: \"%s\"; use on (split over the item's CP "
                        "group, the default), off (CP rank 0 alone) or world (every rank of the "
                        "job)", v->text);
    m->vae_parallel = x;
    return CPDIT_OK;
}
static const char *const DEFAULT_KEYS[] = {"steps",           "guidance", "width",
                                           "height",          "seed",     "negative_prompt",
                                           "true_cfg",        "max_sequence_length",
                                           "num_frames",      "fps",      "flow_shift"};
static const char *const PROMPT_KEYS[] = {"prompt",   "steps",    "guidance", "width",
                                          "height",   "seed",     "seeds",    "sizes",
                                          "negative_prompt", "true_cfg", "max_sequence_length",
                                          "repeats", "num_frames", "fps", "flow_shift"};
/* output.format values; an image model takes png only (manifest_format order) */
static const char *const FORMAT_NAMES[] = {"png", "mp4", "webp", "png-frames"};
static const char *const SEED_RANGE_KEYS[] = {"count", "start"};
static const char *const PARALLEL_KEYS[] = {"dp", "ring", "ulysses", "anything"};

static cpdit_status oom(mf_ctx *c)
{
    return cpdit_error_set(c->err, CPDIT_ERR_RUNTIME, c->file, "out of memory");
}

/* Check the keys of map against names (in document order): unknown and duplicate keys are
 * errors. seen[k] gets the key node of names[k], vals[k] its value (NULL when absent).
 * order[i] = k for the i-th pair, so callers can handle values in document order. */
static cpdit_status map_keys(mf_ctx *c, const mf_node *map, const char *what,
                             const char *const *names, size_t count, const mf_node **seen,
                             const mf_node **vals, int *order)
{
    for (size_t k = 0; k < count; k++)
        seen[k] = vals[k] = NULL;
    for (size_t i = 0; i < mf_map_size(map); i++) {
        const mf_node *key = mf_map_key(map, i);
        size_t k = 0;
        while (k < count && strcmp(key->text, names[k]) != 0)
            k++;
        if (k == count) {
            char allowed[ALLOWED_LIST_MAX] = "";
            for (size_t j = 0; j < count; j++) {
                strncat(allowed, j ? ", " : "", sizeof allowed - strlen(allowed) - 1);
                strncat(allowed, names[j], sizeof allowed - strlen(allowed) - 1);
            }
            const char *near = mf_closest(key->text, names, count);
            char hint[96] = "";
            if (near)
                snprintf(hint, sizeof hint, "; did you mean \"%s\"?", near);
            char q[MF_QUOTE_MAX * 4 + 8];
            mf_quote(key->text, key->len, q, sizeof q);
            return mf_error(c, key->mark, "unknown key \"%s\"%s%s%s (allowed: %s)", q,
                            what[0] ? " in " : "", what, hint, allowed);
        }
        if (seen[k])
            return mf_error(c, key->mark, "duplicate key \"%s\" (first given at line %d, "
                            "column %d)", names[k], seen[k]->mark.line, seen[k]->mark.col);
        seen[k] = key;
        vals[k] = mf_map_value(map, i);
        order[i] = (int)k;
    }
    return CPDIT_OK;
}

/* "prefix.name" (or "name" for an empty prefix) into buf. */
static const char *dotted(char *buf, size_t size, const char *prefix, const char *name)
{
    snprintf(buf, size, "%s%s%s", prefix, prefix[0] ? "." : "", name);
    return buf;
}

static cpdit_status get_side(mf_ctx *c, const mf_node *n, const char *what, int *out)
{
    int64_t v;
    if (n->kind != MF_INT)
        return mf_get_int(c, n, what, 0, 0, &v); /* the type error */
    /* decimal, leading zeros allowed ("0032" is 32), as every integer of the manifest */
    errno = 0;
    v = strtoll(n->text, NULL, 10);
    if (errno == ERANGE || v < MANIFEST_SIDE_MIN || v > MANIFEST_SIDE_MAX)
        return mf_error(c, n->mark, "%s: %s is out of range (%d to %d pixels)", what, n->text,
                        MANIFEST_SIDE_MIN, MANIFEST_SIDE_MAX);
    if (v % MANIFEST_SIDE_MULTIPLE) {
        int64_t lo = v / MANIFEST_SIDE_MULTIPLE * MANIFEST_SIDE_MULTIPLE;
        return mf_error(c, n->mark, "%s: %lld is not a multiple of %d (try %lld or %lld)", what,
                        (long long)v, MANIFEST_SIDE_MULTIPLE, (long long)lo,
                        (long long)(lo + MANIFEST_SIDE_MULTIPLE));
    }
    *out = (int)v;
    return CPDIT_OK;
}

/* sizes: [[W, H], ...] */
static cpdit_status get_sizes(mf_ctx *c, const mf_node *n, const char *what,
                              manifest_settings *s)
{
    cpdit_status st = mf_expect(c, n, MF_SEQ, what);
    if (st)
        return st;
    if (n->n_items == 0)
        return mf_error(c, n->mark, "%s: the list is empty", what);
    s->sizes = calloc(n->n_items, sizeof *s->sizes);
    if (!s->sizes)
        return oom(c);
    for (size_t i = 0; i < n->n_items; i++) {
        const mf_node *pair = &n->items[i];
        char w[96];
        snprintf(w, sizeof w, "%s[%zu]", what, i);
        if (pair->kind == MF_SEQ && pair->n_items != 2)
            return mf_error(c, pair->mark, "%s: expected [width, height], got a list of %zu "
                            "%s", w, pair->n_items, pair->n_items == 1 ? "value" : "values");
        if (pair->kind != MF_SEQ) {
            char d[MF_QUOTE_MAX * 4 + 32];
            return mf_error(c, pair->mark, "%s: expected [width, height], got %s", w,
                            mf_describe(pair, d, sizeof d));
        }
        char wn[112], hn[112];
        snprintf(wn, sizeof wn, "%s width", w);
        snprintf(hn, sizeof hn, "%s height", w);
        if ((st = get_side(c, &pair->items[0], wn, &s->sizes[i].width)) ||
            (st = get_side(c, &pair->items[1], hn, &s->sizes[i].height)))
            return st;
        s->n_sizes++;
    }
    s->set |= MANIFEST_SET_SIZES;
    return CPDIT_OK;
}

/* seeds: [S, ...] or {count: N, start: S} */
static cpdit_status get_seeds(mf_ctx *c, const mf_node *n, const char *what,
                              manifest_settings *s)
{
    cpdit_status st;
    int64_t v;
    char w[96];
    if (n->kind == MF_SEQ) {
        if (n->n_items == 0)
            return mf_error(c, n->mark, "%s: the list is empty", what);
        if (n->n_items > MANIFEST_SEEDS_MAX)
            return mf_error(c, n->mark, "%s: more than %d seeds", what, MANIFEST_SEEDS_MAX);
        s->seeds.list = calloc(n->n_items, sizeof *s->seeds.list);
        if (!s->seeds.list)
            return oom(c);
        for (size_t i = 0; i < n->n_items; i++) {
            snprintf(w, sizeof w, "%s[%zu]", what, i);
            if ((st = mf_get_int(c, &n->items[i], w, 0, MANIFEST_SEED_MAX, &v)))
                return st;
            s->seeds.list[i] = (uint64_t)v;
            s->seeds.n++;
        }
    } else if (n->kind == MF_MAP) {
        const mf_node *seen[N_OF(SEED_RANGE_KEYS)], *vals[N_OF(SEED_RANGE_KEYS)];
        int order[MAX_KEYS * 4];
        if (mf_map_size(n) > N_OF(order))
            return mf_error(c, n->mark, "%s: too many keys", what);
        if ((st = map_keys(c, n, what, SEED_RANGE_KEYS, N_OF(SEED_RANGE_KEYS), seen, vals,
                           order)))
            return st;
        if (!vals[0])
            return mf_error(c, n->mark, "%s: missing key \"count\" (how many seeds)", what);
        int64_t count, start = 0;
        if ((st = mf_get_int(c, vals[0], dotted(w, sizeof w, what, "count"), 1,
                             MANIFEST_SEEDS_MAX, &count)))
            return st;
        if (vals[1] && (st = mf_get_int(c, vals[1], dotted(w, sizeof w, what, "start"), 0,
                                        MANIFEST_SEED_MAX - count + 1, &start)))
            return st;
        s->seeds.start = (uint64_t)start;
        s->seeds.n = (size_t)count;
    } else {
        char d[MF_QUOTE_MAX * 4 + 32];
        return mf_error(c, n->mark, "%s: expected a list of seeds or {count: N, start: S}, "
                        "got %s", what, mf_describe(n, d, sizeof d));
    }
    s->set |= MANIFEST_SET_SEEDS;
    return CPDIT_OK;
}

/* One settings key (defaults, a prompt's overrides, or the top-level seeds/sizes/repeats)
 * into s. name is the schema's spelling. */
static cpdit_status settings_field(mf_ctx *c, const char *name, const mf_node *v,
                                   const char *prefix, manifest_settings *s)
{
    char w[96];
    int64_t iv;
    cpdit_status st;
    dotted(w, sizeof w, prefix, name);
    if (!strcmp(name, "steps")) {
        if ((st = mf_get_int(c, v, w, 1, MANIFEST_STEPS_MAX, &iv)))
            return st;
        s->steps = (int)iv, s->set |= MANIFEST_SET_STEPS;
    } else if (!strcmp(name, "guidance")) {
        if ((st = mf_get_number(c, v, w, 0, MANIFEST_GUIDANCE_MAX, &s->guidance)))
            return st;
        s->set |= MANIFEST_SET_GUIDANCE;
    } else if (!strcmp(name, "true_cfg")) {
        if ((st = mf_get_number(c, v, w, 0, MANIFEST_GUIDANCE_MAX, &s->true_cfg)))
            return st;
        s->set |= MANIFEST_SET_TRUE_CFG;
    } else if (!strcmp(name, "max_sequence_length")) {
        if ((st = mf_get_int(c, v, w, 1, MANIFEST_SEQ_LEN_MAX, &iv)))
            return st;
        s->max_sequence_length = (int)iv, s->set |= MANIFEST_SET_SEQ_LEN;
    } else if (!strcmp(name, "negative_prompt")) {
        free(s->negative_prompt);
        s->negative_prompt = NULL;
        if ((st = mf_get_string(c, v, w, &s->negative_prompt)))
            return st;
        s->set |= MANIFEST_SET_NEGATIVE;
    } else if (!strcmp(name, "seed")) {
        if ((st = mf_get_int(c, v, w, 0, MANIFEST_SEED_MAX, &iv)))
            return st;
        s->seed = (uint64_t)iv, s->set |= MANIFEST_SET_SEED;
    } else if (!strcmp(name, "width")) {
        if ((st = get_side(c, v, w, &s->width)))
            return st;
        s->set |= MANIFEST_SET_WIDTH;
    } else if (!strcmp(name, "height")) {
        if ((st = get_side(c, v, w, &s->height)))
            return st;
        s->set |= MANIFEST_SET_HEIGHT;
    } else if (!strcmp(name, "seeds")) {
        return get_seeds(c, v, w, s);
    } else if (!strcmp(name, "sizes")) {
        return get_sizes(c, v, w, s);
    } else if (!strcmp(name, "repeats")) {
        if ((st = mf_get_int(c, v, w, 1, MANIFEST_REPEATS_MAX, &iv)))
            return st;
        s->repeats = (int)iv, s->set |= MANIFEST_SET_REPEATS;
    } else if (!strcmp(name, "num_frames")) {
        if ((st = mf_get_int(c, v, w, 1, MANIFEST_FRAMES_MAX, &iv)))
            return st;
        if (iv % MANIFEST_FRAMES_STEP != 1) {
            int64_t lo = iv / MANIFEST_FRAMES_STEP * MANIFEST_FRAMES_STEP + 1;
            if (lo > iv)
                lo -= MANIFEST_FRAMES_STEP;
            return mf_error(c, v->mark, "%s: %lld is not 4k + 1 (the VAE makes 1 + 4(T-1) "
                            "frames from T latent frames; try %lld or %lld)", w, (long long)iv,
                            (long long)lo, (long long)(lo + MANIFEST_FRAMES_STEP));
        }
        s->num_frames = (int)iv, s->set |= MANIFEST_SET_FRAMES;
    } else if (!strcmp(name, "fps")) {
        if ((st = mf_get_number(c, v, w, MANIFEST_FPS_MIN, MANIFEST_FPS_MAX, &s->fps)))
            return st;
        s->set |= MANIFEST_SET_FPS;
    } else if (!strcmp(name, "flow_shift")) {
        if ((st = mf_get_number(c, v, w, 0, MANIFEST_FLOW_SHIFT_MAX, &s->flow_shift)))
            return st;
        if (!(s->flow_shift > 0))
            return mf_error(c, v->mark, "%s: must be greater than 0 (Wan uses 3.0 at 480p, "
                            "5.0 at 720p)", w);
        s->set |= MANIFEST_SET_FLOW_SHIFT;
    }
    return CPDIT_OK;
}

/* "give A or B, not both" at the later of the two keys. */
static cpdit_status not_both(mf_ctx *c, const mf_node *a, const char *an, const mf_node *b,
                             const char *bn)
{
    const mf_node *later = (b->mark.line > a->mark.line ||
                            (b->mark.line == a->mark.line && b->mark.col > a->mark.col))
                               ? b
                               : a;
    return mf_error(c, later->mark, "give %s or %s, not both", an, bn);
}

static int text_is_blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
            return 0;
    return 1;
}

cpdit_status mf_schema_prompt(const mf_node *n, manifest_prompt *out, mf_ctx *c)
{
    cpdit_status st;
    memset(out, 0, sizeof *out);
    out->mark = n->mark;
    if (n->kind == MF_NULL)
        return mf_error(c, n->mark, "empty prompt");
    if (n->kind != MF_MAP) {
        if ((st = mf_get_string(c, n, "prompt", &out->text)))
            return st;
        if (text_is_blank(out->text))
            return mf_error(c, n->mark, "empty prompt");
        return CPDIT_OK;
    }
    const mf_node *seen[N_OF(PROMPT_KEYS)], *vals[N_OF(PROMPT_KEYS)];
    int order[MAX_KEYS];
    if (mf_map_size(n) > MAX_KEYS)
        return mf_error(c, n->mark, "a prompt mapping has more than %d keys", MAX_KEYS);
    if ((st = map_keys(c, n, "a prompt", PROMPT_KEYS, N_OF(PROMPT_KEYS), seen, vals, order)))
        return st;
    for (size_t i = 0; i < mf_map_size(n); i++) {
        int k = order[i];
        if (k == 0) {
            if ((st = mf_get_string(c, vals[0], "prompt", &out->text)))
                return st;
            if (text_is_blank(out->text))
                return mf_error(c, vals[0]->mark, "empty prompt");
        } else if ((st = settings_field(c, PROMPT_KEYS[k], vals[k], "", &out->over))) {
            return st;
        }
    }
    if (!vals[0])
        return mf_error(c, n->mark, "missing key \"prompt\" (the text) in this prompt mapping");
    if (seen[5] && seen[6]) /* seed, seeds */
        return not_both(c, seen[5], "seed", seen[6], "seeds");
    if (seen[7] && (seen[3] || seen[4])) /* sizes, width/height */
        return not_both(c, seen[7], "sizes", seen[3] ? seen[3] : seen[4], "width/height");
    return CPDIT_OK;
}

static cpdit_status parse_output(mf_ctx *c, const mf_node *n, manifest *m)
{
    const mf_node *seen[N_OF(OUTPUT_KEYS)], *vals[N_OF(OUTPUT_KEYS)];
    int order[MAX_KEYS];
    cpdit_status st = mf_expect(c, n, MF_MAP, "output");
    if (!st && mf_map_size(n) > MAX_KEYS)
        st = mf_error(c, n->mark, "output: too many keys");
    if (!st)
        st = map_keys(c, n, "output", OUTPUT_KEYS, N_OF(OUTPUT_KEYS), seen, vals, order);
    for (size_t i = 0; !st && i < mf_map_size(n); i++) {
        const mf_node *v = vals[order[i]];
        if (order[i] == 0) {
            free(m->output_dir);
            m->output_dir = NULL;
            st = mf_get_string(c, v, "output.dir", &m->output_dir);
            m->output_dir_mark = v->mark;
            if (!st && !m->output_dir[0])
                st = mf_error(c, v->mark, "output.dir: empty folder name");
        } else if (order[i] == 1) {
            free(m->name_template);
            m->name_template = NULL;
            st = mf_get_string(c, v, "output.name", &m->name_template);
            m->name_mark = v->mark;
            name_template t;
            cpdit_error terr;
            /* the syntax now; the extension once the format is known (check_name) */
            if (!st && name_template_parse_as(m->name_template, "", &t, &terr))
                st = mf_error(c, v->mark, "output.name: %s", terr.what);
            else if (!st)
                name_template_free(&t);
        } else {
            char *f = NULL;
            st = mf_get_string(c, v, "output.format", &f);
            size_t k = 0;
            while (!st && k < N_OF(FORMAT_NAMES) && strcmp(f, FORMAT_NAMES[k]) != 0)
                k++;
            if (!st && k == N_OF(FORMAT_NAMES))
                st = mf_error(c, v->mark, "output.format: \"%s\"; use mp4, webp or png-frames "
                              "(a video model) or png (an image model)", v->text);
            free(f);
            m->format = (manifest_format)k;
            m->format_mark = v->mark;
        }
    }
    return st;
}

static cpdit_status parse_parallel(mf_ctx *c, const mf_node *n, manifest_parallel *p)
{
    cpdit_status st;
    if (n->kind == MF_STRING && !strcmp(n->text, "auto"))
        return CPDIT_OK;
    if (n->kind != MF_MAP) {
        char d[MF_QUOTE_MAX * 4 + 32];
        return mf_error(c, n->mark, "parallel: expected \"auto\" or a mapping {dp, ring, "
                        "ulysses, anything}, got %s", mf_describe(n, d, sizeof d));
    }
    const mf_node *seen[N_OF(PARALLEL_KEYS)], *vals[N_OF(PARALLEL_KEYS)];
    int order[MAX_KEYS];
    if (mf_map_size(n) > MAX_KEYS)
        return mf_error(c, n->mark, "parallel: too many keys");
    if ((st = map_keys(c, n, "parallel", PARALLEL_KEYS, N_OF(PARALLEL_KEYS), seen, vals,
                       order)))
        return st;
    p->is_auto = 0;
    for (size_t i = 0; i < mf_map_size(n); i++) {
        int k = order[i];
        int64_t v;
        char w[64];
        dotted(w, sizeof w, "parallel", PARALLEL_KEYS[k]);
        if (k == 3) {
            st = mf_get_bool(c, vals[k], w, &p->anything);
        } else {
            st = mf_get_int(c, vals[k], w, 1, MANIFEST_DEGREE_MAX, &v);
            if (!st)
                *(k == 0 ? &p->dp : k == 1 ? &p->ring : &p->ulysses) = (int)v;
        }
        if (st)
            return st;
    }
    return CPDIT_OK;
}

static cpdit_status parse_model(mf_ctx *c, const mf_node *n, manifest *m, unsigned flags)
{
    char *text = NULL;
    cpdit_status st = mf_get_string(c, n, "model", &text);
    if (st)
        return st;
    m->model_mark = n->mark;
    size_t pl = strlen(BUILTIN_PREFIX);
    if (!strncmp(text, BUILTIN_PREFIX, pl)) {
        const char *name = text + pl;
        int ok = name[0] != '\0';
        for (const char *p = name; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                  *p == '_' || *p == '.'))
                ok = 0;
        if (!ok) {
            free(text);
            return mf_error(c, n->mark, "model: \"builtin:\" needs a name such as "
                            "builtin:tiny (lower-case letters, digits, - _ .)");
        }
        m->model = text;
        m->model_is_builtin = 1;
        return CPDIT_OK;
    }
    if (!text[0]) {
        free(text);
        return mf_error(c, n->mark, "model: empty; give a model folder or builtin:tiny");
    }
    m->model = manifest_resolve_path(m->base_dir, text);
    free(text);
    if (!m->model)
        return oom(c);
    struct stat sb;
    if (!(flags & MANIFEST_CHECK_FILES))
        return CPDIT_OK;
    if (stat(m->model, &sb) != 0)
        return mf_error(c, n->mark, "model folder \"%s\" %s", m->model,
                        errno == ENOENT ? "does not exist"
                        : errno == ELOOP ? "is a symbolic link loop" : strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return mf_error(c, n->mark, "model folder \"%s\" is not a folder (it is %s)",
                        m->model, cpdit_file_kind(sb.st_mode));
    return CPDIT_OK;
}

static cpdit_status parse_prompts_file(mf_ctx *c, const mf_node *n, manifest *m,
                                       unsigned flags)
{
    char *text = NULL;
    cpdit_status st = mf_get_string(c, n, "prompts_file", &text);
    if (st)
        return st;
    m->prompts_file_mark = n->mark;
    if (!text[0]) {
        free(text);
        return mf_error(c, n->mark, "prompts_file: empty file name");
    }
    m->prompts_file = manifest_resolve_path(m->base_dir, text);
    free(text);
    if (!m->prompts_file)
        return oom(c);
    size_t len = strlen(m->prompts_file);
    m->prompts_format = (len >= 6 && !strcmp(m->prompts_file + len - 6, ".jsonl")) ||
                                (len >= 5 && !strcmp(m->prompts_file + len - 5, ".json"))
                            ? MANIFEST_PROMPTS_JSONL
                            : MANIFEST_PROMPTS_TEXT;
    if (flags & MANIFEST_CHECK_FILES) {
        /* stat first: a FIFO or a device is refused without opening it (opening a FIFO
         * would wait for a writer, or take a one-shot writer's data) */
        struct stat sb;
        if (stat(m->prompts_file, &sb) != 0)
            return mf_error(c, n->mark, "prompts file \"%s\" %s", m->prompts_file,
                            errno == ENOENT ? "does not exist" : strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return mf_error(c, n->mark, "prompts file \"%s\" is %s, not a regular file",
                            m->prompts_file, cpdit_file_kind(sb.st_mode));
        int fd = open(m->prompts_file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            return mf_error(c, n->mark, "prompts file \"%s\" cannot be read: %s",
                            m->prompts_file, strerror(errno));
        close(fd);
    }
    return CPDIT_OK;
}

static cpdit_status parse_prompts(mf_ctx *c, const mf_node *n, manifest *m)
{
    cpdit_status st = mf_expect(c, n, MF_SEQ, "prompts");
    if (st)
        return st;
    if (n->n_items == 0)
        return mf_error(c, n->mark, "prompts: the list is empty");
    m->prompts = calloc(n->n_items, sizeof *m->prompts);
    if (!m->prompts)
        return oom(c);
    for (size_t i = 0; i < n->n_items; i++) {
        if ((st = mf_schema_prompt(&n->items[i], &m->prompts[i], c))) {
            mf_prompt_free(&m->prompts[i]);
            return st;
        }
        m->n_prompts++;
    }
    return CPDIT_OK;
}

static cpdit_status parse_defaults(mf_ctx *c, const mf_node *n, manifest *m,
                                   const mf_node **seen)
{
    const mf_node *vals[N_OF(DEFAULT_KEYS)];
    int order[MAX_KEYS];
    cpdit_status st = mf_expect(c, n, MF_MAP, "defaults");
    if (!st && mf_map_size(n) > MAX_KEYS)
        st = mf_error(c, n->mark, "defaults: too many keys");
    if (!st)
        st = map_keys(c, n, "defaults", DEFAULT_KEYS, N_OF(DEFAULT_KEYS), seen, vals, order);
    for (size_t i = 0; !st && i < mf_map_size(n); i++)
        st = settings_field(c, DEFAULT_KEYS[order[i]], vals[order[i]], "defaults", &m->base);
    return st;
}

#define VIDEO_BITS (MANIFEST_SET_FRAMES | MANIFEST_SET_FPS | MANIFEST_SET_FLOW_SHIFT)
enum { D_NUM_FRAMES = 8, D_FPS = 9, D_FLOW_SHIFT = 10 }; /* in DEFAULT_KEYS */

/* The first video key of the manifest (defaults, then inline prompts), or NULL; *mark where. */
static const char *first_video_key(const manifest *m, const mf_node *const *dseen,
                                   manifest_mark *mark)
{
    for (int k = D_NUM_FRAMES; k <= D_FLOW_SHIFT; k++)
        if (dseen[k]) {
            *mark = dseen[k]->mark;
            return DEFAULT_KEYS[k];
        }
    for (size_t i = 0; i < m->n_prompts; i++) {
        unsigned set = m->prompts[i].over.set;
        if (set & VIDEO_BITS) {
            *mark = m->prompts[i].mark;
            return set & MANIFEST_SET_FRAMES ? "num_frames"
                   : set & MANIFEST_SET_FPS  ? "fps"
                                             : "flow_shift";
        }
    }
    return NULL;
}

/* The model's run defaults (lib/models/model_defaults.h, shared with `cpdit run --model`) for
 * the settings the manifest leaves out: builtin:shapes runs as trained (128 x 128, 32 T5
 * tokens, 20 steps, true CFG against the empty prompt), a Wan model as WanPipeline (81 frames,
 * CFG 5 against "", mp4 at 16 fps); a FLUX folder keeps FLUX.1's (MANIFEST_DEFAULT_*). Video
 * keys and formats are refused for an image model. */
static cpdit_status model_defaults(mf_ctx *c, manifest *m, unsigned flags,
                                   const mf_node *const *dseen)
{
    builtin_run_defaults d;
    manifest_settings *b = &m->base;
    model_kind kind = model_run_defaults(m->model, (flags & MANIFEST_READ_MODEL) != 0, &d);
    manifest_mark vmark = {0, 0};
    const char *vkey = first_video_key(m, dseen, &vmark);
    const int video_format = m->format_mark.line > 0 && m->format != MANIFEST_FORMAT_PNG;
    if (kind == MODEL_KIND_UNKNOWN) { /* a folder not read: the manifest's keys say */
        kind = vkey || video_format ? MODEL_KIND_VIDEO : MODEL_KIND_IMAGE;
        if (kind == MODEL_KIND_VIDEO) {
            d.width = MODEL_WAN_DEFAULT_WIDTH, d.height = MODEL_WAN_DEFAULT_HEIGHT;
            d.frames = MODEL_WAN_DEFAULT_FRAMES, d.true_cfg = MODEL_WAN_DEFAULT_GUIDANCE;
            d.negative_prompt = "";
        }
    }
    const int builtin = m->model_is_builtin;
    if (kind == MODEL_KIND_IMAGE) {
        if (vkey)
            return mf_error(c, vmark, "%s: %s makes images, not videos (num_frames, fps and "
                            "flow_shift are for video models such as Wan 2.1)", vkey, m->model);
        if (video_format)
            return mf_error(c, m->format_mark, "output.format: %s is for video models; %s "
                            "makes images (png)", manifest_format_name(m->format), m->model);
        if (!builtin)
            return CPDIT_OK; /* FLUX.1's: MANIFEST_DEFAULT_* */
    } else {
        m->is_video = 1;
        if (m->format_mark.line == 0)
            m->format = MANIFEST_FORMAT_MP4;
        else if (m->format == MANIFEST_FORMAT_PNG)
            return mf_error(c, m->format_mark, "output.format: png is for image models; %s "
                            "makes videos: use mp4, webp or png-frames", m->model);
        if (!(b->set & MANIFEST_SET_FRAMES))
            b->num_frames = d.frames;
        if (!(b->set & MANIFEST_SET_FPS))
            b->fps = MANIFEST_DEFAULT_FPS;
        /* Wan's guidance_scale is true CFG: guidance: says it too, as --guidance does */
        if ((b->set & MANIFEST_SET_GUIDANCE) && !(b->set & MANIFEST_SET_TRUE_CFG))
            b->true_cfg = b->guidance, b->set |= MANIFEST_SET_TRUE_CFG;
    }
    if (!(b->set & (MANIFEST_SET_WIDTH | MANIFEST_SET_SIZES)))
        b->width = d.width;
    if (!(b->set & (MANIFEST_SET_HEIGHT | MANIFEST_SET_SIZES)))
        b->height = d.height;
    if (!(b->set & MANIFEST_SET_STEPS) && d.steps > 0)
        b->steps = d.steps;
    if (!(b->set & MANIFEST_SET_SEQ_LEN) && d.max_sequence_length > 0)
        b->max_sequence_length = d.max_sequence_length;
    if (!(b->set & MANIFEST_SET_TRUE_CFG))
        b->true_cfg = d.true_cfg;
    if (!(b->set & MANIFEST_SET_NEGATIVE) && d.negative_prompt) {
        free(b->negative_prompt);
        if (!(b->negative_prompt = strdup(d.negative_prompt)))
            return oom(c);
    }
    return CPDIT_OK;
}

/* output.name against the format's extension (the default name takes it). */
static cpdit_status check_name(mf_ctx *c, manifest *m)
{
    const char *ext = manifest_format_extension(m->format);
    if (m->name_mark.line == 0 && m->format != MANIFEST_FORMAT_PNG) {
        free(m->name_template);
        size_t n = strlen(MANIFEST_DEFAULT_NAME_STEM) + strlen(ext) + 1;
        if (!(m->name_template = malloc(n)))
            return oom(c);
        snprintf(m->name_template, n, "%s%s", MANIFEST_DEFAULT_NAME_STEM, ext);
    }
    name_template t;
    cpdit_error terr;
    if (name_template_parse_as(m->name_template, ext, &t, &terr)) {
        if (!m->is_video)
            return mf_error(c, m->name_mark, "output.name: %s", terr.what);
        return mf_error(c, m->name_mark, "output.name: %s (output.format %s%s)", terr.what,
                        manifest_format_name(m->format),
                        m->format_mark.line ? "" : ": the default for a video model");
    }
    name_template_free(&t);
    return CPDIT_OK;
}

cpdit_status mf_schema_manifest(const mf_node *root, manifest *m, unsigned flags, mf_ctx *c)
{
    cpdit_status st;
    if (root->kind != MF_MAP) {
        char d[MF_QUOTE_MAX * 4 + 32];
        return mf_error(c, root->mark, "a manifest is a mapping of keys (model:, prompts:, "
                        "...), got %s", mf_describe(root, d, sizeof d));
    }
    manifest_settings *b = &m->base;
    b->steps = MANIFEST_DEFAULT_STEPS;
    b->guidance = MANIFEST_DEFAULT_GUIDANCE;
    b->true_cfg = MANIFEST_DEFAULT_TRUE_CFG;
    b->max_sequence_length = MANIFEST_DEFAULT_SEQ_LEN;
    b->seed = MANIFEST_DEFAULT_SEED;
    b->width = b->height = MANIFEST_DEFAULT_SIDE;
    b->repeats = 1;
    m->parallel.is_auto = 1;
    m->parallel.ring = m->parallel.ulysses = 1;
    m->output_dir = strdup(MANIFEST_DEFAULT_OUTPUT_DIR);
    m->name_template = strdup(MANIFEST_DEFAULT_NAME);
    if (!m->output_dir || !m->name_template)
        return oom(c);

    const mf_node *seen[N_OF(TOP_KEYS)], *vals[N_OF(TOP_KEYS)];
    const mf_node *dseen[N_OF(DEFAULT_KEYS)] = {0};
    int *order = calloc(mf_map_size(root) + 1, sizeof *order);
    if (!order)
        return oom(c);
    st = map_keys(c, root, "", TOP_KEYS, N_OF(TOP_KEYS), seen, vals, order);
    for (size_t i = 0; !st && i < mf_map_size(root); i++) {
        int k = order[i];
        const mf_node *v = vals[k];
        switch (k) {
        case K_MODEL: st = parse_model(c, v, m, flags); break;
        case K_OUTPUT: st = parse_output(c, v, m); break;
        case K_DEFAULTS: st = parse_defaults(c, v, m, dseen); break;
        case K_SEEDS: st = get_seeds(c, v, "seeds", b); break;
        case K_SIZES: st = get_sizes(c, v, "sizes", b); break;
        case K_REPEATS: st = settings_field(c, "repeats", v, "", b); break;
        case K_PROMPTS: st = parse_prompts(c, v, m); break;
        case K_PROMPTS_FILE: st = parse_prompts_file(c, v, m, flags); break;
        case K_PARALLEL: st = parse_parallel(c, v, &m->parallel); break;
        case K_VAE_TILING: st = mf_get_bool(c, v, "vae_tiling", &m->vae_tiling); break;
        case K_VAE_PARALLEL: st = parse_vae_parallel(c, v, m); break;
        case K_CACHE: st = parse_cache(c, v, m); break;
        }
    }
    free(order);
    if (st)
        return st;
    if (!vals[K_MODEL])
        return mf_error(c, root->mark, "missing key \"model\" (a model folder, or "
                        "builtin:tiny)");
    if (!vals[K_PROMPTS] && !vals[K_PROMPTS_FILE])
        return mf_error(c, root->mark, "no prompts: give prompts: (a list) or prompts_file: "
                        "(a text or JSONL file)");
    if ((st = model_defaults(c, m, flags, dseen)) || (st = check_name(c, m)))
        return st;
    if (seen[K_SEEDS] && dseen[4])
        return not_both(c, seen[K_SEEDS], "seeds", dseen[4], "defaults.seed");
    if (seen[K_SIZES] && (dseen[2] || dseen[3]))
        return not_both(c, seen[K_SIZES], "sizes", dseen[2] ? dseen[2] : dseen[3],
                        "defaults.width/height");
    /* Without seeds:/sizes:, the defaults give one seed and one size. */
    if (!(b->set & MANIFEST_SET_SEEDS)) {
        b->seeds.start = b->seed;
        b->seeds.n = 1;
    }
    if (!(b->set & MANIFEST_SET_SIZES)) {
        b->sizes = malloc(sizeof *b->sizes);
        if (!b->sizes)
            return oom(c);
        b->sizes[0].width = b->width;
        b->sizes[0].height = b->height;
        b->n_sizes = 1;
    }
    /* count the inline prompts' items now (no item is made): a prompts file's are counted
     * the same way line by line while it is read (jobs/job_items.c) */
    uint64_t total = 0;
    for (size_t i = 0; i < m->n_prompts; i++)
        if ((st = manifest_items_add(m, &m->prompts[i], c->file, &total, c->err)))
            return st;
    return CPDIT_OK;
}

void mf_settings_free(manifest_settings *s)
{
    free(s->negative_prompt);
    free(s->seeds.list);
    free(s->sizes);
    memset(s, 0, sizeof *s);
}

void mf_prompt_free(manifest_prompt *p)
{
    free(p->text);
    mf_settings_free(&p->over);
    memset(p, 0, sizeof *p);
}
