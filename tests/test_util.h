/* test_util.h — minimal assertions for cpdit's C tests.
 * Each CHECK prints file:line and the failed expression and counts a failure; the test's
 * main() ends with TEST_MAIN_END() which returns 1 (fail) if any check failed, else 0.
 * Exit code 77 means "skipped" to the automake harness (TEST_SKIP()). */
#ifndef CPDIT_TEST_UTIL_H
#define CPDIT_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int test_failures = 0;
static int test_checks = 0;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        test_checks++;                                                                       \
        if (!(cond)) {                                                                       \
            test_failures++;                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);        \
        }                                                                                    \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                 \
    do {                                                                                     \
        test_checks++;                                                                       \
        if (!(cond)) {                                                                       \
            test_failures++;                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);        \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

/* |a - b| <= tol (absolute). */
#define CHECK_NEAR(a, b, tol)                                                                \
    do {                                                                                     \
        double _a = (double)(a), _b = (double)(b), _t = (double)(tol);                       \
        test_checks++;                                                                       \
        if (!(fabs(_a - _b) <= _t)) {                                                        \
            test_failures++;                                                                 \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s=%.9g %s=%.9g tol=%.3g\n", __FILE__, \
                    __LINE__, #a, _a, #b, _b, _t);                                           \
        }                                                                                    \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                                      \
    do {                                                                                     \
        const char *_h = (hay), *_n = (needle);                                              \
        test_checks++;                                                                       \
        if (!_h || !strstr(_h, _n)) {                                                        \
            test_failures++;                                                                 \
            fprintf(stderr, "%s:%d: expected \"%s\" to contain \"%s\"\n", __FILE__, __LINE__, \
                    _h ? _h : "(null)", _n);                                                 \
        }                                                                                    \
    } while (0)

#define TEST_SKIP(...)                                                                       \
    do {                                                                                     \
        fprintf(stderr, "SKIP: " __VA_ARGS__);                                               \
        fputc('\n', stderr);                                                                 \
        return 77;                                                                           \
    } while (0)

#define TEST_MAIN_END()                                                                      \
    do {                                                                                     \
        fprintf(stderr, "%d checks, %d failed\n", test_checks, test_failures);              \
        return test_failures ? 1 : 0;                                                        \
    } while (0)

#endif
