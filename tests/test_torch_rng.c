/* test_torch_rng.c — torch_rng against values PyTorch produced.
 *
 * tests/data/torch_rng_expected.txt (made by tests/reference/torch_rng_reference.py with
 * Debian's python3-torch 1.13) holds, per case, a seed, the sizes of successive torch.randn
 * calls on one generator, an FNV-1a hash of all float32 values and the first/last 8 values as
 * bit patterns. Tolerance: none — every value must have the same bits (the emulation is exact,
 * so any difference is a bug; a one-ulp difference in 1 value of 10^6 changes the hash).
 * The "default" kernel and "bf16" cases call the C library's logf/sinf/cosf, like PyTorch's
 * portable kernel: they hold for glibc (the library PyTorch used when making them).
 * Also: MT19937's published first output, the 32-bit seed truncation, the state after a
 * twist, and argument errors.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"
#include "lib/pipeline/torch_rng.h"

#define FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define FNV_PRIME UINT64_C(0x100000001b3)
#define MAX_SIZES 8
#define MAX_SHOWN 8

static uint64_t fnv1a64_floats(const float *v, size_t n)
{
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        for (int b = 0; b < 4; b++) { /* little-endian bytes, as numpy wrote them */
            h ^= (u >> (8 * b)) & 0xffu;
            h *= FNV_PRIME;
        }
    }
    return h;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* One line of the expected file; returns 1 if it was a case (checked), 0 otherwise. */
static int run_case(char *line, int lineno)
{
    char kname[16], sizes_txt[256];
    unsigned long long seed, n_expected;
    uint64_t hash;
    int k, used;
    if (line[0] == '#' || line[0] == '\n')
        return 0;
    if (sscanf(line, "%15s %llu %255s %llu %" SCNx64 " %d%n", kname, &seed, sizes_txt,
               &n_expected, &hash, &k, &used) != 6) {
        CHECK_MSG(0, "line %d: cannot parse", lineno);
        return 0;
    }
    torch_normal_kernel kernel = TORCH_NORMAL_AVX2;
    cpdit_error err;
    const int bf16 = strcmp(kname, "bf16") == 0;
    CHECK(bf16 || torch_normal_kernel_from_name(kname, &kernel, &err) == CPDIT_OK);

    size_t sizes[MAX_SIZES], n = 0;
    int nsizes = 0;
    for (char *tok = strtok(sizes_txt, ","); tok && nsizes < MAX_SIZES; tok = strtok(NULL, ","))
        n += sizes[nsizes++] = strtoull(tok, NULL, 10);
    CHECK_MSG(n == n_expected, "line %d: sizes add up to %zu, not %llu", lineno, n, n_expected);

    float *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) {
        CHECK_MSG(0, "out of memory");
        return 1;
    }
    torch_generator g;
    torch_generator_init(&g, (uint64_t)seed);
    size_t off = 0;
    for (int i = 0; i < nsizes; i++) {
        if (bf16)
            torch_randn_bf16(&g, v + off, sizes[i]);
        else
            torch_randn_f32(&g, v + off, sizes[i], kernel);
        off += sizes[i];
    }

    const char *p = line + used;
    int bad = 0;
    for (int part = 0; part < 2; part++) { /* head then tail */
        for (int i = 0; i < k && i < MAX_SHOWN; i++) {
            unsigned long w;
            int adv;
            if (sscanf(p, "%lx%n", &w, &adv) != 1) {
                CHECK_MSG(0, "line %d: short value list", lineno);
                free(v);
                return 1;
            }
            p += adv;
            size_t idx = part == 0 ? (size_t)i : n - (size_t)k + (size_t)i;
            if (bits(v[idx]) != (uint32_t)w && bad++ < 3)
                fprintf(stderr, "line %d (%s seed %llu sizes %s): value %zu = %08x (%.9g), "
                        "PyTorch %08lx\n", lineno, kname, seed, sizes_txt, idx, bits(v[idx]),
                        v[idx], w);
        }
    }
    uint64_t got = fnv1a64_floats(v, n);
    CHECK_MSG(bad == 0, "line %d: %d shown values differ", lineno, bad);
    CHECK_MSG(got == hash, "line %d (%s seed %llu, n %zu): hash %016" PRIx64 ", PyTorch %016"
              PRIx64, lineno, kname, seed, n, got, hash);
    free(v);
    return 1;
}

static void test_expected_file(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    char line[4096];
    int lineno = 0, cases = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        cases += run_case(line, lineno);
    }
    fclose(f);
    fprintf(stderr, "%d PyTorch cases checked\n", cases);
    CHECK_MSG(cases >= 50, "only %d cases in %s", cases, path);
}

static void test_engine(void)
{
    torch_generator g, h;
    /* MT19937 with init_genrand(5489): the 10000th output is 4123659995 (C++ std::mt19937). */
    torch_generator_init(&g, 5489);
    uint32_t x = 0;
    for (int i = 0; i < 10000; i++)
        x = torch_generator_random(&g);
    CHECK(x == 4123659995u);
    /* Only the low 32 bits of the seed matter. */
    torch_generator_init(&g, 5);
    torch_generator_init(&h, (UINT64_C(1) << 32) + 5);
    CHECK(h.seed == (UINT64_C(1) << 32) + 5);
    int same = 1;
    for (int i = 0; i < 2000; i++)
        same &= torch_generator_random(&g) == torch_generator_random(&h);
    CHECK(same);
    /* random64 = two draws, first in the high half. */
    torch_generator_init(&g, 7);
    torch_generator_init(&h, 7);
    uint64_t hi = torch_generator_random(&h), lo = torch_generator_random(&h);
    CHECK(torch_generator_random64(&g) == ((hi << 32) | lo));
    /* uniforms are in [0, 1) with 24 / 53 bits */
    torch_generator_init(&g, 11);
    int ok = 1;
    for (int i = 0; i < 100000; i++) {
        float u = torch_uniform_f32(&g);
        double d = torch_uniform_f64(&g);
        ok &= u >= 0.0f && u < 1.0f && d >= 0.0 && d < 1.0;
        ok &= (float)(u * 16777216.0f) == floorf(u * 16777216.0f);
    }
    CHECK(ok);
    /* the scalar path's cache: randn(1) twice = the two Box-Muller values of one pair */
    float a[2], b[2];
    torch_generator_init(&g, 3);
    torch_randn_f32(&g, a, 1, TORCH_NORMAL_AVX2);
    torch_randn_f32(&g, a + 1, 1, TORCH_NORMAL_AVX2);
    torch_generator_init(&g, 3);
    torch_randn_f32(&g, b, 2, TORCH_NORMAL_AVX2);
    CHECK(bits(a[0]) == bits(b[0]) && bits(a[1]) == bits(b[1]));
    /* re-seeding clears the cache */
    torch_generator_init(&g, 3);
    torch_randn_f32(&g, a, 1, TORCH_NORMAL_AVX2);
    torch_generator_init(&g, 3);
    torch_randn_f32(&g, b, 1, TORCH_NORMAL_AVX2);
    CHECK(bits(a[0]) == bits(b[0]));
}

static void test_api_errors(void)
{
    cpdit_error err;
    torch_normal_kernel k;
    CHECK(torch_normal_kernel_from_name("avx512", &k, &err) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(err.what, "avx2");
    CHECK(torch_normal_kernel_from_name("default", &k, &err) == CPDIT_OK &&
          k == TORCH_NORMAL_DEFAULT);
    CHECK(strcmp(torch_normal_kernel_name(TORCH_NORMAL_AVX2), "avx2") == 0);
    CHECK(torch_randn_seeded(0, NULL, 4, TORCH_NORMAL_AVX2, &err) == CPDIT_ERR_INPUT);
    CHECK(torch_randn_seeded(0, NULL, 0, TORCH_NORMAL_AVX2, &err) == CPDIT_OK);
    float v[32];
    CHECK(torch_randn_seeded(0, v, 32, TORCH_NORMAL_AVX2, &err) == CPDIT_OK);
    CHECK_NEAR(v[0], -1.1258f, 1e-4); /* torch.randn(32), seed 0: -1.1258, -1.1524, ... */
}

int main(int argc, char **argv)
{
    const char *srcdir = getenv("top_srcdir");
    char path[4096];
    if (argc > 1)
        snprintf(path, sizeof path, "%s", argv[1]);
    else
        snprintf(path, sizeof path, "%s/tests/data/torch_rng_expected.txt", srcdir ? srcdir : ".");
    test_engine();
    test_api_errors();
    test_expected_file(path);
    TEST_MAIN_END();
}
