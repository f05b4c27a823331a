/* unicode_tables.h — the generated Unicode data tables (lib/text/unicode_tables.c, written by
 * tests/reference/make_unicode_tables.py). Internal to lib/text/unicode_text.c; every table is
 * sorted by its first field so lookups binary-search it. */
#ifndef CPDIT_UNICODE_TABLES_H
#define CPDIT_UNICODE_TABLES_H

#include <stddef.h>
#include <stdint.h>

/* Bits of uni_prop_ranges[].value (same values as FLAGS in the generator). */
enum {
    UNI_F_CONTROL = 1 << 0,        /* Python unicodedata category C* */
    UNI_F_ZS = 1 << 1,             /* category Zs */
    UNI_F_PYSPACE = 1 << 2,        /* Python str.isspace() */
    UNI_F_LETTER = 1 << 3,         /* regex \p{L} */
    UNI_F_NUMBER = 1 << 4,         /* regex \p{N} */
    UNI_F_ICASE_NOMATCH = 1 << 5,  /* no class of the CLIP pattern matches it under IGNORECASE */
    UNI_F_CASED = 1 << 6,          /* Python Cased (final-sigma context) */
    UNI_F_CASE_IGNORABLE = 1 << 7  /* Python Case_Ignorable */
};

/* Grapheme_Cluster_Break values of uni_gcb_ranges[].value (low 7 bits); bit 0x80 marks
 * Extended_Pictographic. */
enum {
    UNI_GCB_OTHER = 0,
    UNI_GCB_CR,
    UNI_GCB_LF,
    UNI_GCB_CONTROL,
    UNI_GCB_EXTEND,
    UNI_GCB_ZWJ,
    UNI_GCB_REGIONAL_INDICATOR,
    UNI_GCB_PREPEND,
    UNI_GCB_SPACING_MARK,
    UNI_GCB_L,
    UNI_GCB_V,
    UNI_GCB_T,
    UNI_GCB_LV,
    UNI_GCB_LVT
};
#define UNI_GCB_EXT_PICT 0x80u
#define UNI_GCB_MASK 0x7Fu

typedef struct uni_range {
    uint32_t lo, hi; /* inclusive code point range */
    uint32_t value;
} uni_range;

typedef struct uni_pair {
    uint32_t from, to;
} uni_pair;

typedef struct uni_triple {
    uint32_t a, b, c;
} uni_triple;

extern const uni_range uni_prop_ranges[];   /* value: UNI_F_* bits; absent = 0 */
extern const size_t uni_prop_ranges_count;
extern const uni_pair uni_lower_pairs[];    /* str.lower() single-code-point mappings */
extern const size_t uni_lower_pairs_count;
extern const uni_range uni_ccc_ranges[];    /* canonical combining class; absent = 0 */
extern const size_t uni_ccc_ranges_count;
extern const uni_triple uni_decomp[];       /* cp -> (first, second or 0), canonical, one level */
extern const size_t uni_decomp_count;
extern const uni_triple uni_compose[];      /* (first, second) -> primary composite, sorted */
extern const size_t uni_compose_count;
extern const uni_range uni_gcb_ranges[];    /* UNI_GCB_* | UNI_GCB_EXT_PICT; absent = Other */
extern const size_t uni_gcb_ranges_count;

#endif
