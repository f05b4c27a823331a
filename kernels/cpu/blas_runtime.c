/* blas_runtime.c — choose OpenBLAS's kernel core from cpuid, re-execute once with
 * OPENBLAS_CORETYPE when OpenBLAS guessed an older core, describe the result, and measure SGEMM.
 * See blas_runtime.h for the reasoning and the tier table.
 */
#include "config.h"

#include "kernels/cpu/blas_runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define BLAS_RUNTIME_X86 1
#endif

#if defined(HAVE_OPENBLAS_GET_CORENAME) && defined(HAVE_OPENBLAS_GET_CONFIG)
#define BLAS_RUNTIME_OPENBLAS 1
/* OpenBLAS's own declarations differ between versions (char* vs const char*); these match. */
extern char *openblas_get_corename(void);
extern char *openblas_get_config(void);
#endif
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
extern void openblas_set_num_threads(int num_threads);
extern int openblas_get_num_threads(void);
#endif

/* XCR0 bits (Intel SDM vol. 1, 13.3): x87|SSE|AVX state, and opmask|ZMM_Hi256|Hi16_ZMM. */
#define XCR0_YMM_MASK 0x6u
#define XCR0_ZMM_MASK 0xe0u

/* ------------------------------------------------------------------ CPU features */

#ifdef BLAS_RUNTIME_X86
static unsigned read_xcr0(void)
{
    unsigned lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return lo;
}
#endif

/* f: filled from cpuid leaves 0, 1, 7.0, 7.1 and XCR0. */
void blas_cpu_features_detect(blas_cpu_features *f)
{
    memset(f, 0, sizeof *f);
#ifdef BLAS_RUNTIME_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return;
    const unsigned max_leaf = a;
    memcpy(f->vendor, &b, 4);
    memcpy(f->vendor + 4, &d, 4);
    memcpy(f->vendor + 8, &c, 4);
    f->vendor[12] = '\0';
    if (max_leaf < 1 || !__get_cpuid(1, &a, &b, &c, &d))
        return;
    const int base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
    f->family = base_family == 0xf ? base_family + (int)((a >> 20) & 0xff) : base_family;
    f->model = (base_family == 0x6 || base_family == 0xf) ? (int)((a >> 12) & 0xf0) + base_model
                                                          : base_model;
    f->sse3 = (c >> 0) & 1;
    f->fma = (c >> 12) & 1;
    const int osxsave = (c >> 27) & 1;
    f->avx = (c >> 28) & 1;
    if (osxsave) {
        const unsigned xcr0 = read_xcr0();
        f->os_ymm = (xcr0 & XCR0_YMM_MASK) == XCR0_YMM_MASK;
        f->os_zmm = f->os_ymm && (xcr0 & XCR0_ZMM_MASK) == XCR0_ZMM_MASK;
    }
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        const unsigned max_sub = a;
        f->avx2 = (b >> 5) & 1;
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            f->avx512_bf16 = (a >> 5) & 1;
        }
    }
#endif
}

/* ------------------------------------------------------------------ the decision */

static const struct {
    const char *name;
    int tier;
} core_tiers[] = {
    {"Unknown", 0},    {"Katmai", 0},       {"Coppermine", 0},  {"Northwood", 0},
    {"Prescott", 0},   {"Banias", 0},       {"Atom", 0},        {"Core2", 0},
    {"Penryn", 0},     {"Dunnington", 0},   {"Nehalem", 0},     {"Athlon", 0},
    {"Opteron", 0},    {"Opteron_SSE3", 0}, {"Barcelona", 0},   {"Nano", 0},
    {"Bobcat", 0},     {"generic", 0},      {"Sandybridge", 1}, {"Bulldozer", 1},
    {"Piledriver", 1}, {"Steamroller", 1},  {"Excavator", 1},   {"Haswell", 2},
    {"Zen", 2},        {"SkylakeX", 3},     {"Cooperlake", 3},  {"SapphireRapids", 3},
};

int blas_core_tier(const char *core_name)
{
    if (!core_name)
        return -1;
    for (size_t i = 0; i < sizeof core_tiers / sizeof core_tiers[0]; i++)
        if (strcasecmp(core_name, core_tiers[i].name) == 0)
            return core_tiers[i].tier;
    return -1;
}

/* f: CPU features; detected: OpenBLAS's core name. Returns the core to force or NULL. */
const char *blas_runtime_choose_core(const blas_cpu_features *f, const char *detected, char *why,
                                     size_t why_n)
{
    const int have = blas_core_tier(detected);
    if (have < 0)
        return NULL; /* a name this table does not know: a newer OpenBLAS, trust it */
    const int amd =
        strcmp(f->vendor, "AuthenticAMD") == 0 || strcmp(f->vendor, "HygonGenuine") == 0;
    int want = 0;
    const char *name = NULL, *reason = "";
    if (f->os_zmm && f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->avx2 && f->fma) {
        want = 3;
        name = "SkylakeX";
        reason = "avx512f avx512bw avx512dq avx512vl";
    } else if (f->os_ymm && f->avx && f->avx2 && f->fma) {
        want = 2;
        name = amd ? "Zen" : "Haswell";
        reason = "avx2 fma";
    } else if (f->os_ymm && f->avx) {
        want = 1;
        name = "Sandybridge";
        reason = "avx";
    }
    if (!name || have >= want)
        return NULL;
    if (why && why_n)
        snprintf(why, why_n, "%s", reason);
    return name;
}

/* ------------------------------------------------------------------ state of this process */

/* How the core came to be, for blas_runtime_describe(); filled by ensure_best_core(). */
static char how_chosen[512] = "";

const char *blas_runtime_core_name(void)
{
#ifdef BLAS_RUNTIME_OPENBLAS
    const char *c = openblas_get_corename();
    return c ? c : "Unknown";
#else
    return "n/a";
#endif
}

/* The marker of a re-executed process: record how its core was chosen and clear the marker.
 * marker: "from|why". */
static void record_forced(const char *marker, const char *user)
{
    char from[64] = "?";
    const char *bar = strchr(marker, '|');
    size_t len = bar ? (size_t)(bar - marker) : strlen(marker);
    if (len >= sizeof from)
        len = sizeof from - 1;
    memcpy(from, marker, len);
    from[len] = '\0';
    const char *now = blas_runtime_core_name();
    if (user && strcasecmp(user, now) != 0)
        snprintf(how_chosen, sizeof how_chosen,
                 "asked OpenBLAS for %s instead of %s via cpuid: %s, but it chose %s", user, from,
                 bar ? bar + 1 : "", now);
    else
        snprintf(how_chosen, sizeof how_chosen, "forced from %s via cpuid: %s", from,
                 bar ? bar + 1 : "");
    unsetenv(BLAS_RUNTIME_MARKER_ENV); /* our children see a plain user setting */
}

int blas_runtime_reexec_for(const char *detected, int argc, char **argv)
{
#ifdef BLAS_RUNTIME_OPENBLAS
    blas_cpu_features f;
    blas_cpu_features_detect(&f);
    char why[96] = "";
    const char *best = blas_runtime_choose_core(&f, detected, why, sizeof why);
    if (!best) {
        snprintf(how_chosen, sizeof how_chosen, "detected by OpenBLAS");
        return 0;
    }
    const char *cfg = openblas_get_config();
    if (!cfg || !strstr(cfg, "DYNAMIC_ARCH")) {
        /* a single-target build ignores OPENBLAS_CORETYPE: re-executing would change nothing */
        snprintf(how_chosen, sizeof how_chosen,
                 "built for one core, without DYNAMIC_ARCH; this CPU supports %s (%s)", best, why);
        return -1;
    }
    if (argc < 1 || !argv || !argv[0]) {
        snprintf(how_chosen, sizeof how_chosen,
                 "detected by OpenBLAS; %s would be faster (%s), no argv to re-exec with: "
                 "set OPENBLAS_CORETYPE=%s",
                 best, why, best);
        return -1;
    }
    char mark[192];
    snprintf(mark, sizeof mark, "%s|%s", detected, why);
    if (setenv("OPENBLAS_CORETYPE", best, 1) == 0 &&
        setenv(BLAS_RUNTIME_MARKER_ENV, mark, 1) == 0) {
        fflush(NULL);
        execv("/proc/self/exe", argv);
    }
    /* exec failed (no /proc, seccomp, ...): keep running on the detected core */
    const int e = errno;
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(BLAS_RUNTIME_MARKER_ENV);
    snprintf(how_chosen, sizeof how_chosen,
             "detected by OpenBLAS; re-exec to use %s (%s) failed: %s; set OPENBLAS_CORETYPE=%s",
             best, why, strerror(e), best);
    return -1;
#else
    (void)detected;
    (void)argc;
    (void)argv;
    return 0;
#endif
}

void blas_runtime_ensure_best_core(int argc, char **argv)
{
#ifdef BLAS_RUNTIME_OPENBLAS
    static int done = 0; /* a second call would read our own OPENBLAS_CORETYPE as the user's */
    if (done)
        return;
    done = 1;
    const char *user = getenv("OPENBLAS_CORETYPE");
    const char *marker = getenv(BLAS_RUNTIME_MARKER_ENV);
    const char *policy = getenv(BLAS_RUNTIME_POLICY_ENV);
    if (marker) { /* we are the re-executed process: never exec again */
        record_forced(marker, user);
        return;
    }
    if (policy && strcmp(policy, "off") == 0) {
        snprintf(how_chosen, sizeof how_chosen, "%s%s; %s=off", user ? "OPENBLAS_CORETYPE=" : "",
                 user ? user : "detected by OpenBLAS", BLAS_RUNTIME_POLICY_ENV);
        return;
    }
    if (user && !(policy && strcmp(policy, "keep") == 0)) {
        /* default ("auto"): an OPENBLAS_CORETYPE naming an older core than the CPU supports is
         * replaced — sites pin old cores in login environments and forget them; the user can
         * say CPDIT_BLAS_CORE=keep to keep it */
        blas_runtime_reexec_for(blas_runtime_core_name(), argc, argv);
        if (strncmp(how_chosen, "detected by OpenBLAS", 20) == 0)
            snprintf(how_chosen, sizeof how_chosen,
                     "OPENBLAS_CORETYPE=%s set by the user, as good as the CPU allows", user);
        return;
    }
    if (user) { /* respect it, but say when the CPU could do better */
        blas_cpu_features f;
        blas_cpu_features_detect(&f);
        char why[96] = "";
        const char *best = blas_runtime_choose_core(&f, blas_runtime_core_name(), why, sizeof why);
        if (best)
            snprintf(how_chosen, sizeof how_chosen,
                     "OPENBLAS_CORETYPE=%s kept by %s=keep; this CPU supports %s (%s): unset "
                     "%s for faster SGEMM",
                     user, BLAS_RUNTIME_POLICY_ENV, best, why, BLAS_RUNTIME_POLICY_ENV);
        else
            snprintf(how_chosen, sizeof how_chosen, "OPENBLAS_CORETYPE=%s kept by %s=keep", user,
                     BLAS_RUNTIME_POLICY_ENV);
        return;
    }
    blas_runtime_reexec_for(blas_runtime_core_name(), argc, argv);
#else
    (void)argc;
    (void)argv;
#endif
}

const char *blas_runtime_describe(char *buf, size_t n)
{
    if (!buf || n == 0)
        return buf;
#ifdef BLAS_RUNTIME_OPENBLAS
    /* openblas_get_config() starts "OpenBLAS 0.3.21 ..."; keep the first two words */
    const char *cfg = openblas_get_config();
    char version[64] = "OpenBLAS";
    if (cfg) {
        while (*cfg == ' ')
            cfg++;
        const char *sp = strchr(cfg, ' ');
        if (sp)
            sp = strchr(sp + 1, ' ');
        size_t len = sp ? (size_t)(sp - cfg) : strlen(cfg);
        if (len >= sizeof version)
            len = sizeof version - 1;
        memcpy(version, cfg, len);
        version[len] = '\0';
    }
    if (how_chosen[0])
        snprintf(buf, n, "%s core %s (%s)", version, blas_runtime_core_name(), how_chosen);
    else
        snprintf(buf, n, "%s core %s", version, blas_runtime_core_name());
#else
    snprintf(buf, n, "%s (CBLAS; kernel selection is the library's own)", CPDIT_BLAS_MODULE);
#endif
    return buf;
}

int blas_runtime_get_num_threads(void)
{
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    const int t = openblas_get_num_threads();
    return t > 0 ? t : 1;
#else
    return 1;
#endif
}

void blas_runtime_set_num_threads(int n)
{
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(n > 0 ? n : 1);
#else
    (void)n;
#endif
}

/* ------------------------------------------------------------------ SGEMM rate */

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* C (n x n) = A (n x n) * B (n x n), fp32 row-major; 2 n^3 flops per call. */
double blas_sgemm_gflops(int n, int reps)
{
    if (n < 1 || reps < 1)
        return -1.0;
    const size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return -1.0;
    }
    /* small integers scaled by 1/8: exact in fp32, no denormals */
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((int)(i % 7) - 3) * 0.125f;
        b[i] = (float)((int)(i % 5) - 2) * 0.125f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double best = 1e300;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        const double dt = now_seconds() - t0;
        if (dt < best)
            best = dt;
    }
    free(a);
    free(b);
    free(c);
    return best > 0 ? 2.0 * (double)n * (double)n * (double)n / best * 1e-9 : -1.0;
}
