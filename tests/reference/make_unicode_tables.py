#!/usr/bin/python3
"""make_unicode_tables.py — generate lib/text/unicode_tables.c, the Unicode data behind lib/text/unicode_text.c.

The CLIP tokenizer of transformers runs on Python's `unicodedata` and `str` methods and on the
`regex` module's \\p{L} / \\p{N}; the T5 fast tokenizer splits text into extended grapheme
clusters. To behave the same, the C code needs the same character data, so this script reads it
from the very libraries the reference uses (and UAX #29 data for graphemes) and writes plain
sorted C tables:

  * property ranges: Python category C* (dropped as control), Zs, str.isspace(), regex \\p{L} and
    \\p{N}, the characters that the IGNORECASE CLIP pattern cannot match at all, and Python's
    Cased / Case_Ignorable (probed through str.lower()'s final-sigma rule);
  * str.lower() simple mappings (the one multi-character mapping, U+0130, is handled in code);
  * NFC: canonical combining classes, one-level canonical decompositions, primary composites;
  * Grapheme_Cluster_Break and Extended_Pictographic (from the Debian package unicode-data).

Run with Debian's /usr/bin/python3 (python3-regex and unicode-data installed):
    /usr/bin/python3 tests/reference/make_unicode_tables.py > lib/text/unicode_tables.c
"""
import sys
import unicodedata

import regex

GCB_FILE = "/usr/share/unicode/auxiliary/GraphemeBreakProperty.txt"
EMOJI_FILE = "/usr/share/unicode/emoji/emoji-data.txt"
MAX_CP = 0x110000

# must match enum values in lib/text/unicode_tables.h
FLAGS = {
    "CONTROL": 1 << 0,       # unicodedata.category startswith "C"
    "ZS": 1 << 1,            # category Zs
    "PYSPACE": 1 << 2,       # str.isspace()
    "LETTER": 1 << 3,        # regex \p{L}
    "NUMBER": 1 << 4,        # regex \p{N}
    "ICASE_NOMATCH": 1 << 5, # neither [\p{L}] nor [^\s\p{L}\p{N}] matches it under IGNORECASE
    "CASED": 1 << 6,         # Python _PyUnicode_IsCased
    "CASE_IGNORABLE": 1 << 7,  # Python _PyUnicode_IsCaseIgnorable
}
GCB_VALUES = ["Other", "CR", "LF", "Control", "Extend", "ZWJ", "Regional_Indicator", "Prepend",
              "SpacingMark", "L", "V", "T", "LV", "LVT"]
EXT_PICT = 0x80  # or-ed into the grapheme value


def is_surrogate(cp):
    return 0xD800 <= cp <= 0xDFFF


def case_props(c):
    """(cased, case_ignorable) as Python's str.lower() sees them (final sigma context)."""
    p1 = ("A" + c + "\u03a3").lower()[-1] == "\u03c2"  # ignorable or cased
    p2 = (c + "\u03a3").lower()[-1] == "\u03c2"        # cased and not ignorable
    if p2:
        return True, False
    if not p1:
        return False, False
    cased = c.islower() or c.isupper() or c.istitle()
    return cased, True


def property_flags():
    letter = regex.compile(r"\p{L}")
    number = regex.compile(r"\p{N}")
    other_i = regex.compile(r"[^\s\p{L}\p{N}]", regex.IGNORECASE)
    letter_i = regex.compile(r"[\p{L}]", regex.IGNORECASE)
    number_i = regex.compile(r"[\p{N}]", regex.IGNORECASE)
    space = regex.compile(r"\s")
    flags = [0] * MAX_CP
    for cp in range(MAX_CP):
        if is_surrogate(cp):
            continue
        c = chr(cp)
        f = 0
        cat = unicodedata.category(c)
        if cat.startswith("C"):
            f |= FLAGS["CONTROL"]
        if cat == "Zs":
            f |= FLAGS["ZS"]
        if c.isspace():
            f |= FLAGS["PYSPACE"]
        if letter.match(c):
            f |= FLAGS["LETTER"]
        if number.match(c):
            f |= FLAGS["NUMBER"]
        if not (letter_i.match(c) or number_i.match(c) or other_i.match(c) or space.match(c)):
            f |= FLAGS["ICASE_NOMATCH"]
        cased, ignorable = case_props(c)
        if cased:
            f |= FLAGS["CASED"]
        if ignorable:
            f |= FLAGS["CASE_IGNORABLE"]
        flags[cp] = f
    return flags


def ranges_of(values):
    """[(lo, hi, value)] for maximal runs of equal non-zero value."""
    out = []
    lo = None
    for cp in range(MAX_CP + 1):
        v = values[cp] if cp < MAX_CP else 0
        if lo is not None and v != values[lo]:
            out.append((lo, cp - 1, values[lo]))
            lo = None
        if lo is None and v != 0:
            lo = cp
    return out


def lower_map():
    pairs, multi = [], []
    for cp in range(MAX_CP):
        if is_surrogate(cp):
            continue
        low = chr(cp).lower()
        if low == chr(cp):
            continue
        if len(low) != 1:
            multi.append((cp, low))
            continue
        pairs.append((cp, ord(low)))
    return pairs, multi


def nfc_data():
    ccc = [0] * MAX_CP
    decomp = []
    compose = []
    for cp in range(MAX_CP):
        if is_surrogate(cp):
            continue
        c = chr(cp)
        ccc[cp] = unicodedata.combining(c)
        d = unicodedata.decomposition(c)
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        assert len(parts) in (1, 2), (hex(cp), d)
        decomp.append((cp, parts[0], parts[1] if len(parts) == 2 else 0))
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == c:
            compose.append((parts[0], parts[1], cp))
    compose.sort()
    return ranges_of(ccc), decomp, compose


def parse_ucd_ranges(path, wanted):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            rng, prop = [x.strip() for x in line.split(";")[:2]]
            if prop not in wanted:
                continue
            if ".." in rng:
                lo, hi = [int(x, 16) for x in rng.split("..")]
            else:
                lo = hi = int(rng, 16)
            out.append((lo, hi, prop))
    return out


def gcb_values():
    values = [0] * MAX_CP
    for lo, hi, prop in parse_ucd_ranges(GCB_FILE, set(GCB_VALUES[1:])):
        for cp in range(lo, hi + 1):
            values[cp] = GCB_VALUES.index(prop)
    for lo, hi, _ in parse_ucd_ranges(EMOJI_FILE, {"Extended_Pictographic"}):
        for cp in range(lo, hi + 1):
            values[cp] |= EXT_PICT
    return ranges_of(values)


def emit_rows(name, ctype, rows, fmt, per_line):
    print(f"const {ctype} {name}[] = {{")
    for i in range(0, len(rows), per_line):
        print("    " + " ".join(fmt(r) for r in rows[i:i + per_line]))
    print("};")
    print(f"const size_t {name}_count = sizeof {name} / sizeof {name}[0];\n")


def main():
    flags = property_flags()
    prop_ranges = ranges_of(flags)
    lowers, multi = lower_map()
    assert [cp for cp, _ in multi] == [0x130], multi  # handled in code: U+0130 -> i + U+0307
    ccc_ranges, decomp, compose = nfc_data()
    gcb = gcb_values()

    print("/* unicode_tables.c — GENERATED by tests/reference/make_unicode_tables.py; do not edit.")
    print(f" * Python unicodedata {unicodedata.unidata_version}, regex module {regex.__version__},")
    print(" * grapheme break data from the Debian package unicode-data (UAX #29).")
    print(" * Sorted tables; lookups in lib/text/unicode_text.c binary-search them. */")
    print('#include "lib/text/unicode_tables.h"\n')
    emit_rows("uni_prop_ranges", "uni_range", prop_ranges,
              lambda r: "{0x%X, 0x%X, 0x%X}," % r, 4)
    emit_rows("uni_lower_pairs", "uni_pair", lowers, lambda r: "{0x%X, 0x%X}," % r, 6)
    emit_rows("uni_ccc_ranges", "uni_range", ccc_ranges, lambda r: "{0x%X, 0x%X, %d}," % r, 5)
    emit_rows("uni_decomp", "uni_triple", decomp, lambda r: "{0x%X, 0x%X, 0x%X}," % r, 4)
    emit_rows("uni_compose", "uni_triple", compose, lambda r: "{0x%X, 0x%X, 0x%X}," % r, 4)
    emit_rows("uni_gcb_ranges", "uni_range", gcb, lambda r: "{0x%X, 0x%X, 0x%X}," % r, 4)


if __name__ == "__main__":
    sys.exit(main())
