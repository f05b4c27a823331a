/* unicode_text.h — the Unicode text handling the tokenizers need: UTF-8 decoding that never
 * fails (invalid bytes become U+FFFD), character properties as Python / the `regex` module see
 * them, Python's str.lower(), NFC, and extended grapheme clusters (UAX #29).
 *
 * Text is either UTF-8 bytes (const char *, length in bytes) or an array of code points
 * (uint32_t, length in code points). The character data comes from lib/text/unicode_tables.c,
 * generated from Python 3.11's unicodedata (Unicode 14.0) and the regex module, which is
 * what the reference tokenizers run on.
 */
#ifndef CPDIT_UNICODE_TEXT_H
#define CPDIT_UNICODE_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "lib/core/cpdit_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UNI_REPLACEMENT_CHAR 0xFFFDu
#define UNI_MAX_CODE_POINT 0x10FFFFu
#define UTF8_MAX_BYTES 4 /* bytes of one encoded code point */

/* ---------------------------------------------------------------- UTF-8 */

/* Decode the code point at s[0..len) (len >= 1) into *cp; returns the bytes used (1..4).
 * An invalid sequence (bad lead byte, truncated, overlong, surrogate, > U+10FFFF) yields
 * U+FFFD and consumes its maximal valid prefix (at least one byte), as Python's
 * bytes.decode("utf-8", "replace") does. */
size_t utf8_decode_next(const unsigned char *s, size_t len, uint32_t *cp);

/* Decode all of s[0..len) into a new array (*cps, *n code points; the caller frees *cps;
 * never NULL on success, even for len 0). Errors: out of memory (RUNTIME). */
cpdit_status utf8_decode(const char *s, size_t len, uint32_t **cps, size_t *n, cpdit_error *err);

/* Encode cp (values above U+10FFFF and surrogates encode U+FFFD) into out; returns 1..4. */
size_t utf8_encode(uint32_t cp, char out[UTF8_MAX_BYTES]);

/* Encode cps[0..n) as a new NUL-terminated UTF-8 string (*len bytes, not counting the NUL;
 * the caller frees *out). Errors: out of memory. */
cpdit_status utf8_encode_all(const uint32_t *cps, size_t n, char **out, size_t *len,
                             cpdit_error *err);

/* Copy s[0..len) to a new NUL-terminated string in which every invalid sequence is
 * replaced by U+FFFD (EF BF BD), as utf8_decode_next decides. */
cpdit_status utf8_sanitize(const char *s, size_t len, char **out, size_t *out_len,
                           cpdit_error *err);

/* ---------------------------------------------------------------- properties */

int uni_is_py_control(uint32_t cp);   /* unicodedata.category(c) starts with "C" */
int uni_is_zs(uint32_t cp);           /* category Zs (space separator) */
int uni_is_py_space(uint32_t cp);     /* Python str.isspace() */
int uni_is_letter(uint32_t cp);       /* regex \p{L} */
int uni_is_number(uint32_t cp);       /* regex \p{N} */
/* No class of CLIP's IGNORECASE pattern matches cp (only U+0345 in Unicode 14): the regex
 * search skips it. */
int uni_is_clip_unmatched(uint32_t cp);
int uni_is_white_space(uint32_t cp);  /* White_Space property (Rust char::is_whitespace) */
/* transformers' BasicTokenizer._is_chinese_char: the CJK Unified Ideographs blocks and
 * extensions A-E plus the compatibility ideographs. */
int uni_is_cjk_ideograph(uint32_t cp);

/* ---------------------------------------------------------------- transforms */

/* Python str.lower() of in[0..n) into out (capacity 2*n: U+0130 becomes two code points),
 * with the final-sigma rule (U+03A3 -> U+03C2 at the end of a word). Returns the count. */
size_t uni_py_lower(const uint32_t *in, size_t n, uint32_t *out);

/* Python unicodedata.normalize("NFC", in[0..n)) as a new array (*out, *n_out; the caller
 * frees *out). Errors: out of memory. */
cpdit_status uni_nfc(const uint32_t *in, size_t n, uint32_t **out, size_t *n_out,
                     cpdit_error *err);

/* Index one past the end of the extended grapheme cluster that starts at cps[start]
 * (start < n), by the rules of UAX #29 (Unicode 15.0 data). */
size_t uni_grapheme_end(const uint32_t *cps, size_t n, size_t start);

#ifdef __cplusplus
}
#endif
#endif
