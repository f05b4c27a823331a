/* test_backend_ops.c — the kernel table's conformance suite (in the spirit of ggml's
 * test-backend-ops): every op case of kernels/backend_ops.h, over its grid of shapes, on
 * seeded random inputs, on every backend of the build (and every attention kernel of each),
 * against the double-precision references of tests/backend_ops_reference.c. The error is
 * normalised, ||out - ref||_2 / ||ref||_2 (plain ||out - ref||_2 when the reference is all
 * zeros), and must not exceed the case's tolerance; infinities must match exactly (empty
 * attention rows give lse = -inf). Prints one line per op, backend and kernel with the worst
 * error over the shapes.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend_ops.h"
#include "tests/backend_ops_reference.h"
#include "tests/test_util.h"

/* Normalised error of out against ref (n values); INFINITY when infinities differ. */
static double normalised_error(const float *out, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i]) || isinf(out[i]) || isnan(out[i])) {
            if ((double)out[i] != ref[i])
                return INFINITY;
            continue;
        }
        const double e = (double)out[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One case on one backend and kernel over all its shapes; returns the worst error. */
static double check_case(const cpdit_backend *be, const cpdit_attention_kernel *k,
                         const backend_op_case *c, backend_op_reference_fn ref)
{
    double worst = 0;
    for (int s = 0; s < c->nshapes; s++) {
        const int *d = c->shapes[s].d;
        size_t ni, no;
        c->sizes(d, &ni, &no);
        float *in = malloc((ni + 1) * sizeof(float)), *out = malloc((no + 1) * sizeof(float));
        double *want = malloc((no + 1) * sizeof(double));
        CHECK(in && out && want);
        if (!in || !out || !want) {
            free(in);
            free(out);
            free(want);
            return INFINITY;
        }
        const uint64_t seed = 1000u * (uint64_t)s + 7u;
        if (c->fill)
            c->fill(d, in, ni, seed);
        else
            backend_op_fill_uniform(in, ni, seed);
        cpdit_error err;
        cpdit_error_clear(&err);
        char shape[96];
        backend_op_shape_text(c, d, shape, sizeof shape);
        const cpdit_status st = backend_op_run_host(be, k, c, d, out, in, &err);
        CHECK_MSG(st == CPDIT_OK, "%s on %s (%s) %s: %s: %s", c->name, be->name,
                  k ? k->name : "-", shape, err.where, err.what);
        if (st == CPDIT_OK) {
            ref(d, in, want);
            const double e = normalised_error(out, want, no);
            /* a lower-precision attention kernel (cudnn: bf16) states its own bound */
            const double tol = k && k->tolerance > c->tol ? k->tolerance : c->tol;
            CHECK_MSG(e <= tol, "%s on %s (%s) %s: normalised error %.3g > %.3g", c->name,
                      be->name, k ? k->name : "-", shape, e, tol);
            worst = e > worst ? e : worst;
        }
        free(in);
        free(out);
        free(want);
    }
    return worst;
}

/* The harness itself must catch a wrong result: perturb one output and see the error. */
static void test_harness_detects(void)
{
    const double ref[4] = {1, 2, 3, 4};
    const float same[4] = {1, 2, 3, 4}, off[4] = {1, 2, 3.001f, 4};
    CHECK(normalised_error(same, ref, 4) == 0);
    CHECK(normalised_error(off, ref, 4) > 1e-5);
    const double r_inf[2] = {-INFINITY, 1};
    const float o_inf[2] = {-INFINITY, 1}, o_fin[2] = {-1e30f, 1};
    CHECK(normalised_error(o_inf, r_inf, 2) == 0);
    CHECK(isinf(normalised_error(o_fin, r_inf, 2)));
}

/* usage: test_backend_ops [--backend NAME]  (default: every backend of the build; a named
 * backend that cannot run here is a skip, exit 77) */
int main(int argc, char **argv)
{
    const char *only = argc == 3 && !strcmp(argv[1], "--backend") ? argv[2] : NULL;
    if (argc != 1 && !only) {
        fprintf(stderr, "usage: test_backend_ops [--backend NAME]\n");
        return 2;
    }
    if (only) {
        const cpdit_backend *be = cpdit_backend_by_name(only);
        char why[256] = "not in this build";
        if (!be || !cpdit_backend_available(be, why, sizeof why)) {
            printf("SKIP: backend %s: %s\n", only, why);
            return 77;
        }
    }
    test_harness_detects();
    int cases = 0;
    for (const backend_op_case *const *c = backend_op_cases(); *c; c++) {
        backend_op_reference_fn ref = backend_op_reference_find((*c)->name);
        CHECK_MSG(ref != NULL, "op case %s has no reference in tests/backend_ops_reference.c",
                  (*c)->name);
        CHECK_MSG((*c)->nshapes >= 1 && (*c)->nshapes <= BACKEND_OP_MAX_SHAPES,
                  "op case %s: %d shapes", (*c)->name, (*c)->nshapes);
        if (!ref)
            continue;
        for (const cpdit_backend *const *b = cpdit_backend_list(); *b; b++) {
            if (only && strcmp(only, (*b)->name))
                continue;
            char why[256];
            if (!cpdit_backend_available(*b, why, sizeof why)) {
                printf("%-20s %-8s skipped: %s\n", (*c)->name, (*b)->name, why);
                continue;
            }
            const cpdit_attention_kernel *const *ks = (*b)->attention_kernels;
            const cpdit_attention_kernel *k = (*c)->per_kernel ? *ks : NULL;
            do {
                const double e = check_case(*b, k, *c, ref);
                printf("%-20s %-8s %-14s %d shapes  worst %.3g  (tol %.3g)\n", (*c)->name,
                       (*b)->name, k ? k->name : "-", (*c)->nshapes, e, (*c)->tol);
                cases++;
                k = (*c)->per_kernel ? *++ks : NULL;
            } while (k);
        }
    }
    CHECK(cases > 0);
    TEST_MAIN_END();
}
