/* contact_sheet.c — a grid PNG of an output folder's images and clips (first, middle and
 * last frame), prompts in a sidecar file, and the shapes colour check (see contact_sheet.h). */
#include "lib/builtin/contact_sheet.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/builtin/shapes_grammar.h"
#include "lib/io/png_reader.h"
#include "lib/io/png_writer.h"
#include "lib/io/regular_file.h"
#include "lib/io/video_reader.h"

#define PATH_LEN 4096
#define INDEX_FILE "index.jsonl"
#define SHEET_PNG "contact-sheet.png"
#define SHEET_TXT "contact-sheet.txt"
#define SHEET_TXT_MODE 0666 /* before the umask, as fopen() would */
#define MAX_ITEMS 4096 /* a sheet is for looking at: more cells than this is an error */
#define CLIP_TILES 3   /* first, middle, last frame */
#define GUTTER 6       /* pixels between cells and around the sheet */
#define FRAME_GAP 2    /* pixels between the frames of one clip */
#define GUTTER_RGB 64  /* dark grey: no colour of the shapes palette */
#define DEFAULT_COLS_IMAGES 4
#define DEFAULT_COLS_CLIPS 1

typedef struct cell {
    int used;
    char *file, *prompt;
    int frames;                          /* a clip's frame count (index "frames"); 0 = image */
    int tiles;                           /* 1 for an image, CLIP_TILES for a clip */
    int frame_of[CLIP_TILES];            /* which frame each tile shows */
    cpdit_png_image tile[CLIP_TILES];
} cell;

static void cells_free(cell *c, int n)
{
    for (int i = 0; i < n; i++) {
        free(c[i].file);
        free(c[i].prompt);
        for (int t = 0; t < CLIP_TILES; t++)
            cpdit_png_image_free(&c[i].tile[t]);
    }
    free(c);
}

/* The last "ok" line of each item index in DIR/index.jsonl; *n = 1 + the largest index. */
static cpdit_status read_index(const char *dir, cell **out, int *n, cpdit_error *err)
{
    char path[PATH_LEN];
    snprintf(path, sizeof path, "%s/%s", dir, INDEX_FILE);
    FILE *f = fopen(path, "r");
    if (!f)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                               "cannot open it: not an output folder of `cpdit run`?");
    cell *c = calloc(MAX_ITEMS, sizeof *c);
    if (!c) {
        fclose(f);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
    }
    char line[16384];
    int top = 0;
    cpdit_status st = CPDIT_OK;
    while (st == CPDIT_OK && fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *idx = json_object_get(j, "index");
        const char *status = json_string_value(json_object_get(j, "status"));
        const char *file = json_string_value(json_object_get(j, "file"));
        const char *prompt = json_string_value(json_object_get(j, "prompt"));
        json_t *frames = json_object_get(j, "frames");
        if (json_is_integer(idx) && status && !strcmp(status, "ok") && file && prompt) {
            const json_int_t i = json_integer_value(idx);
            if (i < 0 || i >= MAX_ITEMS) {
                st = cpdit_error_set(err, CPDIT_ERR_INPUT, path,
                                     "item %lld: a contact sheet holds items 0..%d",
                                     (long long)i, MAX_ITEMS - 1);
            } else {
                free(c[i].file);
                free(c[i].prompt);
                c[i].file = strdup(file);
                c[i].prompt = strdup(prompt);
                c[i].used = c[i].file && c[i].prompt;
                c[i].frames = json_is_integer(frames) ? (int)json_integer_value(frames) : 0;
                if (!c[i].used)
                    st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "out of memory");
                if (i + 1 > top)
                    top = (int)i + 1;
            }
        }
        json_decref(j);
    }
    fclose(f);
    if (st == CPDIT_OK && top == 0)
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "no finished item");
    if (st != CPDIT_OK) {
        cells_free(c, MAX_ITEMS);
        return st;
    }
    *out = c;
    *n = top;
    return CPDIT_OK;
}

/* The file of an index line: as written by cpdit run, relative to DIR unless absolute. */
static void image_path(char *path, size_t n, const char *dir, const char *file)
{
    if (file[0] == '/')
        snprintf(path, n, "%s", file);
    else
        snprintf(path, n, "%s/%s", dir, file);
}

/* The tiles of cell x: the image, or a clip's first, middle and last frame. */
static cpdit_status read_tiles(const char *dir, cell *x, cpdit_error *err)
{
    char path[PATH_LEN + 64];
    image_path(path, sizeof path, dir, x->file);
    if (x->frames <= 0) {
        x->tiles = 1;
        return cpdit_png_read_rgb8(path, &x->tile[0], err);
    }
    x->tiles = CLIP_TILES;
    x->frame_of[0] = 0;
    x->frame_of[1] = (x->frames - 1) / 2;
    x->frame_of[2] = x->frames - 1;
    int have = -1;
    cpdit_status st = cpdit_video_read_frames(path, x->frame_of, CLIP_TILES, x->tile, &have, err);
    if ((!st || st == CPDIT_ERR_INPUT) && have >= 0 && have != x->frames)
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, path, "holds %d frames, its index line says "
                             "%d", have, x->frames);
    return st;
}

/* The shapes colour check of cell x (its prompt names a full scene): every tile must be
 * right. Appends the verdicts to txt. */
static int check_cell(const cell *x, const shapes_scene *sc, FILE *txt)
{
    int right = 1;
    for (int t = 0; t < x->tiles; t++) {
        const cpdit_png_image *m = &x->tile[t];
        shapes_verdict v;
        shapes_check(m->rgb, m->width, m->height, sc, &v);
        right &= v.right;
        if (x->tiles > 1)
            fprintf(txt, " | frame %d:", x->frame_of[t]);
        else
            fprintf(txt, " |");
        fprintf(txt, " shape %s %.0f%% (want %s) background %s %.0f%% (want %s) %s",
                shapes_colour_name(v.shape_colour), 100 * v.shape_share,
                shapes_colour_name(sc->colour), shapes_colour_name(v.background_colour),
                100 * v.background_share, shapes_colour_name(sc->background),
                v.right ? "right" : "wrong");
    }
    return right;
}

cpdit_status contact_sheet_write(const char *dir, int cols, contact_sheet_result *res,
                                 cpdit_error *err)
{
    memset(res, 0, sizeof *res);
    cell *c = NULL;
    int n = 0;
    cpdit_status st = read_index(dir, &c, &n, err);
    if (st)
        return st;
    char path[PATH_LEN + 64];
    int tw = 0, th = 0, tiles = 1; /* the largest tile, the most tiles of a cell */
    for (int i = 0; st == CPDIT_OK && i < n; i++) {
        if (!c[i].used)
            continue;
        if ((st = read_tiles(dir, &c[i], err)))
            break;
        for (int t = 0; t < c[i].tiles; t++) {
            tw = c[i].tile[t].width > tw ? c[i].tile[t].width : tw;
            th = c[i].tile[t].height > th ? c[i].tile[t].height : th;
        }
        tiles = c[i].tiles > tiles ? c[i].tiles : tiles;
    }
    if (cols <= 0)
        cols = tiles > 1 ? DEFAULT_COLS_CLIPS : DEFAULT_COLS_IMAGES;
    /* cell = tiles frames FRAME_GAP apart; cells GUTTER apart and from the edges */
    const int cw = tiles * tw + (tiles - 1) * FRAME_GAP, ch = th;
    const int rows = (n + cols - 1) / cols;
    const int sw = cols * cw + (cols + 1) * GUTTER, sh = rows * ch + (rows + 1) * GUTTER;
    const size_t stride = (size_t)sw * 3;
    uint8_t *sheet = NULL;
    FILE *txt = NULL;
    if (st == CPDIT_OK) {
        sheet = malloc((size_t)sh * stride);
        if (sheet)
            memset(sheet, GUTTER_RGB, (size_t)sh * stride);
        snprintf(path, sizeof path, "%s/%s", dir, SHEET_TXT);
        int fd = -1;
        st = cpdit_open_output(path, NULL, O_WRONLY | O_CREAT | O_TRUNC, SHEET_TXT_MODE, &fd,
                               err);
        if (!st && !(txt = fdopen(fd, "w")))
            close(fd);
        if (!st && (!sheet || !txt))
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, path, "cannot write it (or out of "
                                 "memory)");
    }
    for (int i = 0; st == CPDIT_OK && i < n; i++) {
        const int r = i / cols, k = i % cols;
        if (!c[i].used) {
            fprintf(txt, "%d %d -: (missing)\n", r, k);
            continue;
        }
        const int x0 = GUTTER + k * (cw + GUTTER), y0 = GUTTER + r * (ch + GUTTER);
        for (int t = 0; t < c[i].tiles; t++) { /* black around tiles smaller than the largest */
            const cpdit_png_image *m = &c[i].tile[t];
            const int xt = x0 + t * (tw + FRAME_GAP);
            for (int y = 0; y < th; y++) {
                uint8_t *row = sheet + (size_t)(y0 + y) * stride + (size_t)xt * 3;
                memset(row, 0, (size_t)tw * 3);
                if (y < m->height)
                    memcpy(row, m->rgb + (size_t)y * m->width * 3, (size_t)m->width * 3);
            }
        }
        res->images++;
        res->clips += c[i].tiles > 1;
        fprintf(txt, "%d %d %s", r, k, c[i].file);
        if (c[i].tiles > 1)
            fprintf(txt, " (frames %d, %d, %d of %d)", c[i].frame_of[0], c[i].frame_of[1],
                    c[i].frame_of[2], c[i].frames);
        fprintf(txt, ": %s", c[i].prompt);
        shapes_scene sc;
        if (shapes_scene_parse(c[i].prompt, &sc)) {
            res->checked++;
            res->right += check_cell(&c[i], &sc, txt);
        }
        fputc('\n', txt);
    }
    if (txt) {
        if (st == CPDIT_OK)
            fprintf(txt, "checked: %d/%d right\n", res->right, res->checked);
        if (fclose(txt) != 0 && st == CPDIT_OK)
            st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "cannot write %s", SHEET_TXT);
    }
    if (st == CPDIT_OK) {
        snprintf(path, sizeof path, "%s/%s", dir, SHEET_PNG);
        const cpdit_png_text meta = {"Software", "cpdit builtin sheet"};
        st = cpdit_png_write_rgb8(path, sheet, sw, sh, &meta, 1, err);
    }
    free(sheet);
    cells_free(c, MAX_ITEMS);
    return st;
}
