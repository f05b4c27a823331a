/* prompt_clean.c — WanPipeline's prompt whitespace cleaning (see prompt_clean.h). */
#include "lib/text/prompt_clean.h"

#include <stdint.h>
#include <stdlib.h>

#include "lib/text/unicode_text.h"

/* U+001C..U+001F (the ASCII information separators): str.isspace() but not White_Space */
#define INFO_SEPARATOR_FIRST 0x1C
#define INFO_SEPARATOR_LAST 0x1F

/* Python's str.isspace() for one code point. */
static int py_isspace(uint32_t cp)
{
    return uni_is_white_space(cp) || (cp >= INFO_SEPARATOR_FIRST && cp <= INFO_SEPARATOR_LAST);
}

cpdit_status prompt_whitespace_clean(const char *text, size_t len, char **out, size_t *out_len,
                                     cpdit_error *err)
{
    *out = NULL;
    *out_len = 0;
    char *o = malloc(len + 1); /* never longer: a run of >= 1 bytes becomes one byte */
    if (!o)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "prompt", "out of memory");
    const unsigned char *s = (const unsigned char *)text;
    size_t k = 0;
    int pending_space = 0; /* a run of whitespace after some text, not yet written */
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t l = utf8_decode_next(s + i, len - i, &cp);
        if (py_isspace(cp)) {
            pending_space = k > 0;
        } else {
            if (pending_space)
                o[k++] = ' ';
            pending_space = 0;
            for (size_t b = 0; b < l; b++)
                o[k++] = (char)s[i + b];
        }
        i += l;
    }
    o[k] = '\0';
    *out = o;
    *out_len = k;
    return CPDIT_OK;
}

static int is_ascii_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

int prompt_has_html_entity(const char *text, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++)
        if (text[i] == '&' && (text[i + 1] == '#' || is_ascii_letter(text[i + 1])))
            return 1;
    return 0;
}
