/* name_template.h — the output.name template language of manifests: parsing and checking.
 * The grammar is described in jobs/job_items.h (FILE NAMES); jobs/job_template.c expands a
 * parsed template for an item. It lives with the manifest parser because the schema checks
 * output.name while parsing (yaml/ does not depend on jobs/).
 */
#ifndef CPDIT_NAME_TEMPLATE_H
#define CPDIT_NAME_TEMPLATE_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NAME_TEMPLATE_SLUG_MAX 48      /* longest {slug}, bytes */
#define NAME_TEMPLATE_FILE_MAX 255     /* NAME_MAX of common file systems, bytes */
#define NAME_TEMPLATE_INT_WIDTH_MAX 20 /* largest N of {name:0Nd} */
#define NAME_TEMPLATE_U64_DIGITS 20    /* decimal digits of the largest {index} */

typedef enum name_template_kind {
    NT_LITERAL = 0,
    NT_INDEX,
    NT_SEED,
    NT_SLUG,
    NT_WIDTH,
    NT_HEIGHT,
    NT_STEPS,
    NT_REPEAT
} name_template_kind;

typedef struct name_template_part {
    name_template_kind kind;
    char *literal; /* NT_LITERAL: the text (braces already unescaped) */
    int width;     /* integers: minimum digits (zero-padded), 0 = none */
} name_template_part;

typedef struct name_template {
    name_template_part *parts;
    size_t n_parts;
    size_t max_len; /* longest name it can produce, bytes */
} name_template;

/* Parse text. Errors: CPDIT_ERR_INPUT, err->where = "", err->what = the problem (the
 * manifest parser adds "FILE:LINE:COL: output.name: "). */
cpdit_status name_template_parse(const char *text, name_template *out, cpdit_error *err);
/* As name_template_parse, for names that must end in ext (".png", ".mp4", ".webp"; "" = any
 * ending: a folder of PNG frames). name_template_parse is name_template_parse_as(".png"). */
cpdit_status name_template_parse_as(const char *text, const char *ext, name_template *out,
                                    cpdit_error *err);
void name_template_free(name_template *t);

#ifdef __cplusplus
}
#endif
#endif
