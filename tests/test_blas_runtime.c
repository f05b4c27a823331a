/* test_blas_runtime.c — OpenBLAS core selection: the pure decision on a table of fake CPUs,
 * then the real thing in child processes (re-exec with OPENBLAS_CORETYPE, a user setting left
 * alone, the loop guard), SGEMM results checked against a naive GEMM on whichever core runs.
 *
 * Child processes are this program again (/proc/self/exe) with "--child" and a changed
 * environment; each prints one line "core=<name>|marker=<0|1>|err=<sgemm error>|desc=<...>".
 * SGEMM tolerance: max |C - C_naive| / max |C_naive| <= 1e-5 on a 67 x 45 x 33 product.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cblas.h>

#include "kernels/cpu/blas_runtime.h"
#include "tests/test_util.h"

#ifdef HAVE_OPENBLAS_GET_CONFIG
extern char *openblas_get_config(void);
#endif

#define SGEMM_TOL 1e-5

/* ------------------------------------------------------------------ the pure decision */

static blas_cpu_features cpu(const char *vendor, int avx, int fma, int avx2, int avx512, int vl,
                             int bf16, int os_ymm, int os_zmm)
{
    blas_cpu_features f;
    memset(&f, 0, sizeof f);
    snprintf(f.vendor, sizeof f.vendor, "%s", vendor);
    f.sse3 = 1;
    f.avx = avx, f.fma = fma, f.avx2 = avx2;
    f.avx512f = f.avx512bw = f.avx512dq = avx512;
    f.avx512vl = vl, f.avx512_bf16 = bf16;
    f.os_ymm = os_ymm, f.os_zmm = os_zmm;
    return f;
}

static void test_choose_table(void)
{
    const blas_cpu_features zen5 = cpu("AuthenticAMD", 1, 1, 1, 1, 1, 1, 1, 1);
    const blas_cpu_features spr = cpu("GenuineIntel", 1, 1, 1, 1, 1, 1, 1, 1);
    const blas_cpu_features skx_no_os = cpu("GenuineIntel", 1, 1, 1, 1, 1, 0, 1, 0);
    const blas_cpu_features zen3_no_os = cpu("AuthenticAMD", 1, 1, 1, 1, 1, 0, 1, 0);
    const blas_cpu_features zen2 = cpu("AuthenticAMD", 1, 1, 1, 0, 0, 0, 1, 0);
    const blas_cpu_features hygon = cpu("HygonGenuine", 1, 1, 1, 0, 0, 0, 1, 0);
    const blas_cpu_features hsw = cpu("GenuineIntel", 1, 1, 1, 0, 0, 0, 1, 0);
    const blas_cpu_features knl = cpu("GenuineIntel", 1, 1, 1, 1, 0, 0, 1, 1); /* no VL */
    const blas_cpu_features snb = cpu("GenuineIntel", 1, 0, 0, 0, 0, 0, 1, 0);
    const blas_cpu_features snb_no_os = cpu("GenuineIntel", 1, 0, 0, 0, 0, 0, 0, 0);
    const blas_cpu_features sse = cpu("GenuineIntel", 0, 0, 0, 0, 0, 0, 0, 0);
    const struct {
        const blas_cpu_features *f;
        const char *detected;
        const char *want; /* NULL: leave alone */
    } rows[] = {
        {&zen5, "Prescott", "SkylakeX"},
        {&zen5, "Haswell", "SkylakeX"},
        {&zen5, "Zen", "SkylakeX"},
        {&zen5, "PRESCOTT", "SkylakeX"},
        {&zen5, "SkylakeX", NULL},
        {&zen5, "Cooperlake", NULL},
        {&zen5, "SapphireRapids", NULL},
        {&zen5, "Zen4", NULL}, /* unknown: newer OpenBLAS */
        {&zen5, NULL, NULL},
        {&spr, "Sandybridge", "SkylakeX"},
        {&skx_no_os, "Prescott", "Haswell"},
        {&skx_no_os, "Haswell", NULL},
        {&zen3_no_os, "Prescott", "Zen"},
        {&zen2, "Prescott", "Zen"},
        {&zen2, "Barcelona", "Zen"},
        {&zen2, "Zen", NULL},
        {&zen2, "Haswell", NULL},
        {&hygon, "Core2", "Zen"},
        {&hsw, "Prescott", "Haswell"},
        {&hsw, "Nehalem", "Haswell"},
        {&hsw, "Sandybridge", "Haswell"},
        {&hsw, "Haswell", NULL},
        {&knl, "Prescott", "Haswell"},
        {&snb, "Prescott", "Sandybridge"},
        {&snb, "Sandybridge", NULL},
        {&snb_no_os, "Prescott", NULL},
        {&sse, "Prescott", NULL},
        {&sse, "Katmai", NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char why[96] = "";
        const char *got = blas_runtime_choose_core(rows[i].f, rows[i].detected, why, sizeof why);
        const int ok = rows[i].want ? got && strcmp(got, rows[i].want) == 0 : got == NULL;
        CHECK_MSG(ok, "row %zu: %s detected %s: got %s, want %s", i, rows[i].f->vendor,
                  rows[i].detected ? rows[i].detected : "(null)", got ? got : "(leave)",
                  rows[i].want ? rows[i].want : "(leave)");
        if (got && rows[i].want && strcmp(rows[i].want, "SkylakeX") == 0)
            CHECK_STR_CONTAINS(why, "avx512f");
    }
    CHECK(blas_core_tier("SkylakeX") == 3 && blas_core_tier("skylakex") == 3);
    CHECK(blas_core_tier("Cooperlake") == 3);
    CHECK(blas_core_tier("Haswell") == 2 && blas_core_tier("Zen") == 2);
    CHECK(blas_core_tier("Sandybridge") == 1);
    CHECK(blas_core_tier("Prescott") == 0 && blas_core_tier("Unknown") == 0);
    CHECK(blas_core_tier("NoSuchCore") == -1 && blas_core_tier(NULL) == -1);
}

/* ------------------------------------------------------------------ SGEMM correctness */

/* C (M x N) = A (M x K) B (K x N) by cblas_sgemm vs a double-precision triple loop;
 * returns max |diff| / max |naive|. */
static double sgemm_error(void)
{
    enum { M = 67, N = 45, K = 33 };
    static float a[M * K], b[K * N], c[M * N];
    uint32_t s = 12345;
    for (int i = 0; i < M * K; i++)
        s = s * 1664525u + 1013904223u, a[i] = (float)(s >> 8) / (float)(1u << 24) - 0.5f;
    for (int i = 0; i < K * N; i++)
        s = s * 1664525u + 1013904223u, b[i] = (float)(s >> 8) / (float)(1u << 24) - 0.5f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    double num = 0, den = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0;
            for (int p = 0; p < K; p++)
                ref += (double)a[i * K + p] * b[p * N + j];
            num = fmax(num, fabs(c[i * N + j] - ref));
            den = fmax(den, fabs(ref));
        }
    return num / den;
}

/* ------------------------------------------------------------------ child processes */

static int child_main(int argc, char **argv)
{
    /* argv: prog --child MODE; MODE "pretend": act as if OpenBLAS had detected Prescott */
    if (strcmp(argv[2], "pretend") == 0 && !getenv(BLAS_RUNTIME_MARKER_ENV)) {
        if (blas_runtime_reexec_for("Prescott", argc, argv) == 0)
            printf("noexec\n"); /* this CPU has nothing better than Prescott */
        else
            printf("exec-failed\n");
        return 0;
    }
    blas_runtime_ensure_best_core(argc, argv);
    char desc[512];
    printf("core=%s|marker=%d|err=%.3g|desc=%s\n", blas_runtime_core_name(),
           getenv(BLAS_RUNTIME_MARKER_ENV) != NULL, sgemm_error(),
           blas_runtime_describe(desc, sizeof desc));
    return 0;
}

/* Run this program with "--child mode", OPENBLAS_CORETYPE = coretype, the marker = marker and
 * CPDIT_BLAS_CORE = policy (NULL: unset); its stdout into out. Returns the exit status or -1. */
static int run_child(const char *argv0, const char *mode, const char *coretype, const char *marker,
                     const char *policy, char *out, size_t n)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    const pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        if (coretype)
            setenv("OPENBLAS_CORETYPE", coretype, 1);
        else
            unsetenv("OPENBLAS_CORETYPE");
        if (marker)
            setenv(BLAS_RUNTIME_MARKER_ENV, marker, 1);
        else
            unsetenv(BLAS_RUNTIME_MARKER_ENV);
        if (policy)
            setenv(BLAS_RUNTIME_POLICY_ENV, policy, 1);
        else
            unsetenv(BLAS_RUNTIME_POLICY_ENV);
        char *args[] = {(char *)argv0, "--child", (char *)mode, NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n &&
           ((r = read(fd[0], out + got, n - 1 - got)) > 0 || (r < 0 && errno == EINTR)))
        if (r > 0)
            got += (size_t)r;
    out[got] = '\0';
    close(fd[0]);
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* the value of key= in a child's line, copied into v */
static const char *field(const char *line, const char *key, char *v, size_t n)
{
    const char *p = strstr(line, key);
    v[0] = '\0';
    if (!p)
        return v;
    p += strlen(key);
    size_t len = strcspn(p, "|\n");
    if (len >= n)
        len = n - 1;
    memcpy(v, p, len);
    v[len] = '\0';
    return v;
}

static void test_children(const char *argv0, const blas_cpu_features *f)
{
    char out[1024], v[256];
    char why[96];
    const char *best = blas_runtime_choose_core(f, "Prescott", why, sizeof why);

    /* 1. OpenBLAS "detected" Prescott: the child re-executes itself onto the best core */
    CHECK(run_child(argv0, "pretend", NULL, NULL, NULL, out, sizeof out) == 0);
    if (!best) {
        CHECK_STR_CONTAINS(out, "noexec");
    } else {
        CHECK_MSG(strcmp(field(out, "core=", v, sizeof v), best) == 0, "pretend: %s", out);
        CHECK_STR_CONTAINS(out, "forced from Prescott via cpuid");
        CHECK_STR_CONTAINS(out, "marker=0"); /* consumed, children of it see none */
        CHECK_MSG(atof(field(out, "err=", v, sizeof v)) <= SGEMM_TOL, "forced core SGEMM: %s", out);
        fprintf(stderr, "forced: %s", out);
    }

    /* 2. with CPDIT_BLAS_CORE=keep a user's OPENBLAS_CORETYPE is left alone */
    CHECK(run_child(argv0, "plain", "Prescott", NULL, "keep", out, sizeof out) == 0);
    CHECK_MSG(strcmp(field(out, "core=", v, sizeof v), "Prescott") == 0, "user-set: %s", out);
    CHECK_STR_CONTAINS(out, "OPENBLAS_CORETYPE=Prescott kept by CPDIT_BLAS_CORE=keep");
    if (best)
        CHECK_STR_CONTAINS(out, "this CPU supports");
    CHECK_MSG(atof(field(out, "err=", v, sizeof v)) <= SGEMM_TOL, "Prescott SGEMM: %s", out);

    /* 3. the loop guard: a process with the marker never re-executes, and says what it got */
    CHECK(run_child(argv0, "plain", "Haswell", "Prescott|avx2 fma", NULL, out, sizeof out) == 0);
    CHECK_MSG(strcmp(field(out, "core=", v, sizeof v), "Haswell") == 0, "marker: %s", out);
    CHECK_STR_CONTAINS(out, "forced from Prescott via cpuid: avx2 fma");
    CHECK_STR_CONTAINS(out, "marker=0");
    CHECK(run_child(argv0, "plain", "NotACore", "Prescott|avx", NULL, out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "asked OpenBLAS for NotACore instead of Prescott");

    /* 4. nothing set: OpenBLAS's own detection, fixed if it is worse than the CPU allows */
    CHECK(run_child(argv0, "plain", NULL, NULL, NULL, out, sizeof out) == 0);
    field(out, "core=", v, sizeof v);
    CHECK_MSG(blas_runtime_choose_core(f, v, why, sizeof why) == NULL, "auto: %s", out);
    CHECK_MSG(atof(field(out, "err=", v, sizeof v)) <= SGEMM_TOL, "auto SGEMM: %s", out);
    fprintf(stderr, "automatic: %s", out);

    /* 5. by default (unset or "auto") a user's older core is replaced; =off touches nothing */
    for (int k = 0; k < 2; k++) {
        CHECK(run_child(argv0, "plain", "Prescott", NULL, k ? "auto" : NULL, out, sizeof out) == 0);
        if (best) {
            CHECK_MSG(strcmp(field(out, "core=", v, sizeof v), best) == 0, "auto policy: %s", out);
            CHECK_STR_CONTAINS(out, "forced from Prescott via cpuid");
        } else {
            CHECK_STR_CONTAINS(out, "as good as the CPU allows");
        }
    }
    CHECK(run_child(argv0, "plain", "Prescott", NULL, "off", out, sizeof out) == 0);
    CHECK_MSG(strcmp(field(out, "core=", v, sizeof v), "Prescott") == 0, "off policy: %s", out);
    CHECK_STR_CONTAINS(out, "CPDIT_BLAS_CORE=off");
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--child") == 0)
        return child_main(argc, argv);
    blas_runtime_ensure_best_core(argc, argv);

    test_choose_table();

    blas_cpu_features f;
    blas_cpu_features_detect(&f);
    char desc[512];
    blas_runtime_describe(desc, sizeof desc);
    fprintf(stderr, "this process: %s\n", desc);
    CHECK(sgemm_error() <= SGEMM_TOL);
    CHECK(blas_sgemm_gflops(0, 1) < 0 && blas_sgemm_gflops(8, 0) < 0);
    CHECK(blas_sgemm_gflops(64, 2) > 0);
    CHECK(blas_runtime_get_num_threads() >= 1);

#ifdef HAVE_OPENBLAS_GET_CORENAME
    CHECK_STR_CONTAINS(desc, "OpenBLAS");
    /* on a CPU with AVX2 this process does not run Prescott kernels unless a user asked */
    if (f.avx2 && f.fma && f.os_ymm && !strstr(desc, "set by the user"))
        CHECK_MSG(blas_core_tier(blas_runtime_core_name()) >= 2, "%s", desc);
    /* a single-target OpenBLAS ignores OPENBLAS_CORETYPE: nothing to re-exec for */
    const char *cfg = openblas_get_config();
    if (!cfg || !strstr(cfg, "DYNAMIC_ARCH"))
        fprintf(stderr, "OpenBLAS without DYNAMIC_ARCH: child-process checks skipped\n");
    else if (access("/proc/self/exe", X_OK) != 0)
        fprintf(stderr, "no /proc/self/exe: child-process checks skipped\n");
    else
        test_children(argv[0], &f);
#endif
    TEST_MAIN_END();
}
