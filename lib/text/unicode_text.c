/* unicode_text.c — UTF-8, character properties, str.lower(), NFC and grapheme clusters over
 * the generated tables of unicode_tables.c (see unicode_text.h). */
#include "lib/text/unicode_text.h"

#include <stdlib.h>
#include <string.h>

#include "lib/text/unicode_tables.h"

/* ---------------------------------------------------------------- UTF-8 */

/* Valid second-byte range of a multi-byte sequence by lead byte (Unicode Table 3-7). */
static int utf8_second_range(unsigned lead, unsigned *lo, unsigned *hi, size_t *need)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
        *need = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        *need = 3;
        if (lead == 0xE0)
            *lo = 0xA0; /* no overlongs */
        else if (lead == 0xED)
            *hi = 0x9F; /* no surrogates */
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        *need = 4;
        if (lead == 0xF0)
            *lo = 0x90;
        else if (lead == 0xF4)
            *hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return 0;
    }
    return 1;
}

size_t utf8_decode_next(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned lead = s[0];
    if (lead < 0x80) {
        *cp = lead;
        return 1;
    }
    unsigned lo, hi;
    size_t need;
    if (!utf8_second_range(lead, &lo, &hi, &need)) {
        *cp = UNI_REPLACEMENT_CHAR;
        return 1;
    }
    uint32_t v = lead & (0xFFu >> (need + 1));
    for (size_t i = 1; i < need; i++) {
        if (i >= len || s[i] < lo || s[i] > hi) {
            *cp = UNI_REPLACEMENT_CHAR; /* the maximal subpart s[0..i) is one error */
            return i;
        }
        v = (v << 6) | (s[i] & 0x3Fu);
        lo = 0x80;
        hi = 0xBF;
    }
    *cp = v;
    return need;
}

cpdit_status utf8_decode(const char *s, size_t len, uint32_t **cps, size_t *n, cpdit_error *err)
{
    uint32_t *out = malloc((len + 1) * sizeof *out);
    if (!out)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "utf-8", "out of memory (%zu bytes)", len);
    size_t k = 0;
    for (size_t i = 0; i < len;)
        i += utf8_decode_next((const unsigned char *)s + i, len - i, &out[k++]);
    *cps = out;
    *n = k;
    return CPDIT_OK;
}

size_t utf8_encode(uint32_t cp, char out[UTF8_MAX_BYTES])
{
    if (cp > UNI_MAX_CODE_POINT || (cp >= 0xD800 && cp <= 0xDFFF))
        cp = UNI_REPLACEMENT_CHAR;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

cpdit_status utf8_encode_all(const uint32_t *cps, size_t n, char **out, size_t *len,
                             cpdit_error *err)
{
    char *buf = malloc(n * UTF8_MAX_BYTES + 1);
    if (!buf)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "utf-8", "out of memory (%zu chars)", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += utf8_encode(cps[i], buf + k);
    buf[k] = '\0';
    *out = buf;
    *len = k;
    return CPDIT_OK;
}

cpdit_status utf8_sanitize(const char *s, size_t len, char **out, size_t *out_len,
                           cpdit_error *err)
{
    /* Each invalid byte becomes at most 3 bytes (one U+FFFD per byte in the worst case). */
    char *buf = malloc(3 * len + 1);
    if (!buf)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "utf-8", "out of memory (%zu bytes)", len);
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t used = utf8_decode_next((const unsigned char *)s + i, len - i, &cp);
        if (cp == UNI_REPLACEMENT_CHAR)
            k += utf8_encode(cp, buf + k); /* a genuine U+FFFD re-encodes to itself */
        else {
            memcpy(buf + k, s + i, used);
            k += used;
        }
        i += used;
    }
    buf[k] = '\0';
    *out = buf;
    *out_len = k;
    return CPDIT_OK;
}

/* ---------------------------------------------------------------- table lookups */

/* The value of the range holding cp in a sorted, non-overlapping range table, else 0. */
static uint32_t range_lookup(const uni_range *t, size_t count, uint32_t cp)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < t[mid].lo)
            hi = mid;
        else if (cp > t[mid].hi)
            lo = mid + 1;
        else
            return t[mid].value;
    }
    return 0;
}

static uint32_t prop(uint32_t cp)
{
    return range_lookup(uni_prop_ranges, uni_prop_ranges_count, cp);
}

int uni_is_py_control(uint32_t cp) { return (prop(cp) & UNI_F_CONTROL) != 0; }
int uni_is_zs(uint32_t cp) { return (prop(cp) & UNI_F_ZS) != 0; }
int uni_is_py_space(uint32_t cp) { return (prop(cp) & UNI_F_PYSPACE) != 0; }
int uni_is_letter(uint32_t cp) { return (prop(cp) & UNI_F_LETTER) != 0; }
int uni_is_number(uint32_t cp) { return (prop(cp) & UNI_F_NUMBER) != 0; }
int uni_is_clip_unmatched(uint32_t cp) { return (prop(cp) & UNI_F_ICASE_NOMATCH) != 0; }

int uni_is_white_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int uni_is_cjk_ideograph(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* ---------------------------------------------------------------- lower() */

#define CP_CAPITAL_SIGMA 0x03A3u
#define CP_SMALL_SIGMA 0x03C3u
#define CP_FINAL_SIGMA 0x03C2u
#define CP_CAPITAL_I_DOT 0x0130u
#define CP_COMBINING_DOT_ABOVE 0x0307u

static uint32_t simple_lower(uint32_t cp)
{
    size_t lo = 0, hi = uni_lower_pairs_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < uni_lower_pairs[mid].from)
            hi = mid;
        else if (cp > uni_lower_pairs[mid].from)
            lo = mid + 1;
        else
            return uni_lower_pairs[mid].to;
    }
    return cp;
}

/* CPython's handle_capital_sigma: final form when a cased letter precedes (skipping
 * case-ignorable characters) and none follows. */
static int is_final_sigma(const uint32_t *s, size_t n, size_t i)
{
    size_t j = i;
    uint32_t p = 0;
    while (j > 0) {
        p = prop(s[j - 1]);
        if (!(p & UNI_F_CASE_IGNORABLE))
            break;
        j--;
    }
    if (j == 0 || !(p & UNI_F_CASED))
        return 0;
    for (j = i + 1; j < n; j++) {
        p = prop(s[j]);
        if (!(p & UNI_F_CASE_IGNORABLE))
            return !(p & UNI_F_CASED);
    }
    return 1;
}

size_t uni_py_lower(const uint32_t *in, size_t n, uint32_t *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = in[i];
        if (c == CP_CAPITAL_SIGMA) {
            out[k++] = is_final_sigma(in, n, i) ? CP_FINAL_SIGMA : CP_SMALL_SIGMA;
        } else if (c == CP_CAPITAL_I_DOT) {
            out[k++] = 'i';
            out[k++] = CP_COMBINING_DOT_ABOVE;
        } else {
            out[k++] = simple_lower(c);
        }
    }
    return k;
}

/* ---------------------------------------------------------------- NFC */

/* Hangul syllable arithmetic (Unicode 3.12). */
enum {
    HANGUL_S_BASE = 0xAC00,
    HANGUL_L_BASE = 0x1100,
    HANGUL_V_BASE = 0x1161,
    HANGUL_T_BASE = 0x11A7,
    HANGUL_L_COUNT = 19,
    HANGUL_V_COUNT = 21,
    HANGUL_T_COUNT = 28,
    HANGUL_N_COUNT = HANGUL_V_COUNT * HANGUL_T_COUNT,
    HANGUL_S_COUNT = HANGUL_L_COUNT * HANGUL_N_COUNT
};
/* Longest full canonical decomposition of one code point (U+1F82 etc. give 3-4). */
#define NFC_MAX_DECOMP 8

static unsigned ccc(uint32_t cp)
{
    return range_lookup(uni_ccc_ranges, uni_ccc_ranges_count, cp);
}

static const uni_triple *decomp_entry(uint32_t cp)
{
    size_t lo = 0, hi = uni_decomp_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < uni_decomp[mid].a)
            hi = mid;
        else if (cp > uni_decomp[mid].a)
            lo = mid + 1;
        else
            return &uni_decomp[mid];
    }
    return NULL;
}

/* Full canonical decomposition of cp appended to out; returns the count written. */
static size_t decompose(uint32_t cp, uint32_t *out, int depth)
{
    if (cp >= HANGUL_S_BASE && cp < HANGUL_S_BASE + HANGUL_S_COUNT) {
        uint32_t s = cp - HANGUL_S_BASE;
        size_t k = 0;
        out[k++] = HANGUL_L_BASE + s / HANGUL_N_COUNT;
        out[k++] = HANGUL_V_BASE + (s % HANGUL_N_COUNT) / HANGUL_T_COUNT;
        if (s % HANGUL_T_COUNT)
            out[k++] = HANGUL_T_BASE + s % HANGUL_T_COUNT;
        return k;
    }
    const uni_triple *d = depth < NFC_MAX_DECOMP ? decomp_entry(cp) : NULL;
    if (!d) {
        out[0] = cp;
        return 1;
    }
    size_t k = decompose(d->b, out, depth + 1);
    if (d->c)
        k += decompose(d->c, out + k, depth + 1);
    return k;
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b)
{
    if (a >= HANGUL_L_BASE && a < HANGUL_L_BASE + HANGUL_L_COUNT && b >= HANGUL_V_BASE &&
        b < HANGUL_V_BASE + HANGUL_V_COUNT)
        return HANGUL_S_BASE + ((a - HANGUL_L_BASE) * HANGUL_V_COUNT + (b - HANGUL_V_BASE)) *
                                   HANGUL_T_COUNT;
    if (a >= HANGUL_S_BASE && a < HANGUL_S_BASE + HANGUL_S_COUNT &&
        (a - HANGUL_S_BASE) % HANGUL_T_COUNT == 0 && b > HANGUL_T_BASE &&
        b < HANGUL_T_BASE + HANGUL_T_COUNT)
        return a + (b - HANGUL_T_BASE);
    size_t lo = 0, hi = uni_compose_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uni_triple *t = &uni_compose[mid];
        if (a < t->a || (a == t->a && b < t->b))
            hi = mid;
        else if (a > t->a || b > t->b)
            lo = mid + 1;
        else
            return t->c;
    }
    return 0;
}

cpdit_status uni_nfc(const uint32_t *in, size_t n, uint32_t **out, size_t *n_out,
                     cpdit_error *err)
{
    uint32_t *d = malloc((n * NFC_MAX_DECOMP + 1) * sizeof *d);
    if (!d)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "nfc", "out of memory (%zu chars)", n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += decompose(in[i], d + m, 0);

    /* Canonical ordering: stable insertion sort of each run of non-starters by class. */
    for (size_t i = 1; i < m; i++) {
        unsigned ci = ccc(d[i]);
        if (ci == 0)
            continue;
        size_t j = i;
        uint32_t c = d[i];
        while (j > 0 && ccc(d[j - 1]) > ci) {
            d[j] = d[j - 1];
            j--;
        }
        d[j] = c;
    }

    /* Canonical composition (the algorithm of Unicode 3.11 / UAX #15 sample code). */
    size_t k = 0;
    if (m > 0) {
        size_t starter = 0;
        unsigned last_class = ccc(d[0]) ? 256u : 0u; /* nothing composes with a leading mark */
        k = 1;
        for (size_t i = 1; i < m; i++) {
            uint32_t c = d[i];
            unsigned cl = ccc(c);
            uint32_t comp = compose_pair(d[starter], c);
            if (comp && (last_class < cl || last_class == 0)) {
                d[starter] = comp;
                continue;
            }
            if (cl == 0)
                starter = k;
            last_class = cl;
            d[k++] = c;
        }
    }
    *out = d;
    *n_out = k;
    return CPDIT_OK;
}

/* ---------------------------------------------------------------- graphemes */

static unsigned gcb(uint32_t cp)
{
    return range_lookup(uni_gcb_ranges, uni_gcb_ranges_count, cp);
}

/* Is there a break between cps[i-1] and cps[i]? state carries GB11 (emoji ZWJ sequences)
 * and GB12/13 (regional indicator pairs) across the cluster. */
typedef struct grapheme_state {
    int ext_pict_run;  /* ExtPict Extend* seen, so ZWJ x ExtPict may join */
    int zwj_after_pict;
    size_t ri_count;   /* regional indicators in the current run */
} grapheme_state;

static int is_break(unsigned prev, unsigned cur, grapheme_state *st)
{
    unsigned p = prev & UNI_GCB_MASK, c = cur & UNI_GCB_MASK;
    if (p == UNI_GCB_CR && c == UNI_GCB_LF)
        return 0; /* GB3 */
    if (p == UNI_GCB_CONTROL || p == UNI_GCB_CR || p == UNI_GCB_LF)
        return 1; /* GB4 */
    if (c == UNI_GCB_CONTROL || c == UNI_GCB_CR || c == UNI_GCB_LF)
        return 1; /* GB5 */
    if (p == UNI_GCB_L &&
        (c == UNI_GCB_L || c == UNI_GCB_V || c == UNI_GCB_LV || c == UNI_GCB_LVT))
        return 0; /* GB6 */
    if ((p == UNI_GCB_LV || p == UNI_GCB_V) && (c == UNI_GCB_V || c == UNI_GCB_T))
        return 0; /* GB7 */
    if ((p == UNI_GCB_LVT || p == UNI_GCB_T) && c == UNI_GCB_T)
        return 0; /* GB8 */
    if (c == UNI_GCB_EXTEND || c == UNI_GCB_ZWJ || c == UNI_GCB_SPACING_MARK)
        return 0; /* GB9, GB9a */
    if (p == UNI_GCB_PREPEND)
        return 0; /* GB9b */
    if (st->zwj_after_pict && p == UNI_GCB_ZWJ && (cur & UNI_GCB_EXT_PICT))
        return 0; /* GB11 */
    if (p == UNI_GCB_REGIONAL_INDICATOR && c == UNI_GCB_REGIONAL_INDICATOR)
        return st->ri_count % 2 == 0; /* GB12, GB13 */
    return 1; /* GB999 */
}

static void grapheme_advance(grapheme_state *st, unsigned cur)
{
    unsigned c = cur & UNI_GCB_MASK;
    st->zwj_after_pict = st->ext_pict_run && c == UNI_GCB_ZWJ;
    if (cur & UNI_GCB_EXT_PICT)
        st->ext_pict_run = 1;
    else if (c != UNI_GCB_EXTEND)
        st->ext_pict_run = 0;
    st->ri_count = c == UNI_GCB_REGIONAL_INDICATOR ? st->ri_count + 1 : 0;
}

size_t uni_grapheme_end(const uint32_t *cps, size_t n, size_t start)
{
    grapheme_state st = {0, 0, 0};
    unsigned prev = gcb(cps[start]);
    grapheme_advance(&st, prev);
    size_t i = start + 1;
    for (; i < n; i++) {
        unsigned cur = gcb(cps[i]);
        if (is_break(prev, cur, &st))
            break;
        grapheme_advance(&st, cur);
        prev = cur;
    }
    return i;
}
