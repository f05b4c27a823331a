/* utf8.h — UTF-8 well-formedness, shared by the manifest parser (yaml/) and the PNG writer
 * (lib/io), which both take user text. */
#ifndef CPDIT_UTF8_H
#define CPDIT_UTF8_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if s (NUL-terminated) is well-formed UTF-8 (no overlong forms, no surrogates, nothing
 * above U+10FFFF), else 0. */
int cpdit_utf8_valid(const char *s);

#ifdef __cplusplus
}
#endif
#endif
