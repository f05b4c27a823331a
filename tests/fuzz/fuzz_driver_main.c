/* fuzz_driver_main.c — runs a libFuzzer target (LLVMFuzzerTestOneInput) without libFuzzer, so
 * that every fuzz target builds with the normal compiler and runs in `make check`.
 *
 * Usage: prog [FILE|DIR]...   runs the target on each file (each file of each DIR).
 * Without arguments it reads $top_srcdir/tests/fuzz/corpus/FUZZ_CORPUS_NAME (FUZZ_CORPUS_NAME
 * is a compile-time string). Besides each seed it runs, deterministically, every prefix of the
 * seed (up to PREFIX_MAX bytes) and MUTATIONS_PER_SEED copies with a few bytes changed — a
 * small fixed fuzz pass. A crash or sanitizer report fails the test; exit 0 otherwise.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_MAX 4096
#define MUTATIONS_PER_SEED 2000
#define MAX_FLIPS 4
#define MAX_INPUT_BYTES (16u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) /* xorshift64 */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* One input through the target, from a private heap copy of exactly size bytes so that
 * AddressSanitizer sees any read past the end. */
static void run_one(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return;
    if (size)
        memcpy(copy, data, size);
    LLVMFuzzerTestOneInput(copy, size);
    free(copy);
}

/* Interesting replacement bytes: boundaries of lengths, JSON punctuation, digits. */
static uint8_t pick_byte(void)
{
    static const uint8_t special[] = {0x00, 0xff, 0x7f, 0x80, '"', '{', '}', '[', ']', ',',
                                      ':', '-', '0', '9', 'e', '.', ' ', '\\'};
    uint64_t r = rng_next();
    return (r & 1) ? special[(r >> 1) % sizeof special] : (uint8_t)(r >> 8);
}

static int run_seed(const char *path)
{
    FILE *fp = fopen(path, "rb");
    uint8_t *buf, *mut;
    size_t n, k, m;
    if (!fp) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    buf = malloc(MAX_INPUT_BYTES);
    n = buf ? fread(buf, 1, MAX_INPUT_BYTES, fp) : 0;
    fclose(fp);
    if (!buf)
        return -1;
    run_one(buf, n);
    for (k = 0; k < n && k <= PREFIX_MAX; k++)
        run_one(buf, k);
    mut = malloc(n ? n : 1);
    for (m = 0; mut && n && m < MUTATIONS_PER_SEED; m++) {
        int flips = 1 + (int)(rng_next() % MAX_FLIPS), j;
        memcpy(mut, buf, n);
        for (j = 0; j < flips; j++)
            mut[rng_next() % n] = pick_byte();
        run_one(mut, n);
    }
    free(mut);
    free(buf);
    return 0;
}

/* Run every regular file of dir (sorted by name); returns the count or -1. */
static int run_dir(const char *dir)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort), i, done = 0;
    if (n < 0)
        return -1;
    for (i = 0; i < n; i++) {
        char path[4096];
        if (list[i]->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
            if (run_seed(path) == 0)
                done++;
        }
        free(list[i]);
    }
    free(list);
    return done;
}

int main(int argc, char **argv)
{
    int i, total = 0;
    if (argc < 2) {
#ifdef FUZZ_CORPUS_NAME
        const char *top = getenv("top_srcdir");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", top ? top : ".", FUZZ_CORPUS_NAME);
        total = run_dir(dir);
        if (total <= 0) {
            fprintf(stderr, "no seed inputs in %s\n", dir);
            return 1;
        }
#else
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
#endif
    }
    for (i = 1; i < argc; i++) {
        int k = run_dir(argv[i]);
        if (k < 0)
            k = run_seed(argv[i]) == 0 ? 1 : -1;
        if (k < 0)
            return 1;
        total += k;
    }
    fprintf(stderr, "%d seed inputs run (with prefixes and %d mutations each)\n", total,
            MUTATIONS_PER_SEED);
    return 0;
}
