/* contact_sheet.c — a grid PNG of an output folder's images, prompts in a sidecar file, and
 * the shapes colour check (see contact_sheet.h). */
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

#define PATH_LEN 4096
#define INDEX_FILE "index.jsonl"
#define SHEET_PNG "contact-sheet.png"
#define SHEET_TXT "contact-sheet.txt"
#define SHEET_TXT_MODE 0666 /* before the umask, as fopen() would */
#define MAX_ITEMS 4096 /* a sheet is for looking at: more cells than this is an error */

typedef struct cell {
    int used;
    char *file, *prompt;
} cell;

static void cells_free(cell *c, int n)
{
    for (int i = 0; i < n; i++) {
        free(c[i].file);
        free(c[i].prompt);
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

cpdit_status contact_sheet_write(const char *dir, int cols, contact_sheet_result *res,
                                 cpdit_error *err)
{
    memset(res, 0, sizeof *res);
    if (cols < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "--cols", "must be at least 1");
    cell *c = NULL;
    int n = 0;
    cpdit_status st = read_index(dir, &c, &n, err);
    if (st)
        return st;
    cpdit_png_image *img = calloc((size_t)n, sizeof *img);
    char path[PATH_LEN + 64];
    int cw = 0, ch = 0;
    if (!img)
        st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, dir, "out of memory");
    for (int i = 0; st == CPDIT_OK && i < n; i++) {
        if (!c[i].used)
            continue;
        image_path(path, sizeof path, dir, c[i].file);
        if ((st = cpdit_png_read_rgb8(path, &img[i], err)))
            break;
        cw = img[i].width > cw ? img[i].width : cw;
        ch = img[i].height > ch ? img[i].height : ch;
    }
    uint8_t *sheet = NULL;
    FILE *txt = NULL;
    const int rows = (n + cols - 1) / cols;
    if (st == CPDIT_OK) {
        sheet = calloc((size_t)rows * ch * (size_t)cols * cw * 3, 1);
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
    const size_t stride = (size_t)cols * cw * 3;
    for (int i = 0; st == CPDIT_OK && i < n; i++) {
        const int r = i / cols, k = i % cols;
        if (!c[i].used) {
            fprintf(txt, "%d %d -: (missing)\n", r, k);
            continue;
        }
        const cpdit_png_image *m = &img[i];
        for (int y = 0; y < m->height; y++)
            memcpy(sheet + ((size_t)r * ch + y) * stride + (size_t)k * cw * 3,
                   m->rgb + (size_t)y * m->width * 3, (size_t)m->width * 3);
        res->images++;
        fprintf(txt, "%d %d %s: %s", r, k, c[i].file, c[i].prompt);
        shapes_scene sc;
        if (shapes_scene_parse(c[i].prompt, &sc)) {
            shapes_verdict v;
            shapes_check(m->rgb, m->width, m->height, &sc, &v);
            res->checked++;
            res->right += v.right;
            fprintf(txt, " | shape %s %.0f%% (want %s) background %s %.0f%% (want %s) %s",
                    shapes_colour_name(v.shape_colour), 100 * v.shape_share,
                    shapes_colour_name(sc.colour), shapes_colour_name(v.background_colour),
                    100 * v.background_share, shapes_colour_name(sc.background),
                    v.right ? "right" : "wrong");
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
        st = cpdit_png_write_rgb8(path, sheet, cols * cw, rows * ch, &meta, 1, err);
    }
    free(sheet);
    for (int i = 0; img && i < n; i++)
        cpdit_png_image_free(&img[i]);
    free(img);
    cells_free(c, MAX_ITEMS);
    return st;
}
