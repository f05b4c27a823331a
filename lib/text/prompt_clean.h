/* prompt_clean.h — the text cleaning WanPipeline applies to a prompt before its UMT5
 * tokenizer: prompt_clean(text) = whitespace_clean(basic_clean(text)), with
 *   basic_clean(text):      ftfy.fix_text(text) when ftfy is installed, then
 *                           html.unescape(html.unescape(text)), then strip();
 *   whitespace_clean(text): re.sub(r"\s+", " ", text).strip().
 * cpdit does the whitespace part exactly (Python's \s and strip() on str: Unicode White_Space
 * plus U+001C..U+001F), as diffusers runs without ftfy; it does not unescape HTML entities:
 * prompt_has_html_entity says when a prompt would differ.
 */
#ifndef CPDIT_PROMPT_CLEAN_H
#define CPDIT_PROMPT_CLEAN_H

#include <stddef.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* text[0..len) (UTF-8; invalid bytes are copied through) with every run of whitespace
 * replaced by one ' ' and none at either end, as a new NUL-terminated string (*out, free()),
 * *out_len bytes. Errors: RUNTIME (out of memory). */
cpdit_status prompt_whitespace_clean(const char *text, size_t len, char **out, size_t *out_len,
                                     cpdit_error *err);

/* 1 when text has '&' followed by '#' or an ASCII letter: html.unescape may change it. */
int prompt_has_html_entity(const char *text, size_t len);

#ifdef __cplusplus
}
#endif
#endif
