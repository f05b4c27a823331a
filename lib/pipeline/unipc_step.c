/* unipc_step.c — UniPCMultistepScheduler.step for flow prediction: the B(h) predictor UniP
 * and corrector UniC on one rank's latent elements (see unipc_schedule.h).
 *
 * float32 throughout, one rounding per operation in the order diffusers' expressions
 * evaluate, so no fused multiply-add: */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "lib/pipeline/unipc_schedule.h"

#include <math.h>
#include <string.h>

/* The scalars of one B(h) update from sigma[s0] to sigma[t] that uses `order` x0 predictions
 * (the newest and order - 1 older ones, at sigma[s0 - k], k = 1 .. order - 1). */
typedef struct bh_coeffs {
    int older;                   /* order - 1 */
    float c_x;                   /* sigma_t / sigma_s0, times the sample */
    float c_m0;                  /* alpha_t · h·phi_1(h), times the newest x0 */
    float c_res;                 /* alpha_t · B(h), times the higher-order residual */
    float rk[UNIPC_MAX_ORDER];   /* (lambda_{s_k} - lambda_s0) / h, k = 1 .. older */
    float rho[UNIPC_MAX_ORDER];  /* predictor: rhos_p[0..older); corrector: rhos_c[0..older] */
} bh_coeffs;

/* log and expm1 of a float32, correctly rounded (through double); torch's float32 log is an
 * ulp off for about 1% of inputs, which is the only difference measured against diffusers. */
static float log32(float v) { return (float)log((double)v); }
static float expm1_32(float v) { return (float)expm1((double)v); }

/* lambda = log(1 - sigma) - log(sigma): +inf at sigma 0. */
static float lambda_of(float sigma)
{
    const float alpha = 1.0f - sigma;
    return log32(alpha) - log32(sigma);
}

/* a·x = b (n <= UNIPC_MAX_ORDER, float32) as torch.linalg.solve computes it for a row-major
 * a: LU with partial pivoting (the first largest |pivot|) of m = a^T, P·m = L·U, then
 * U^T·w = b, L^T·v = w (unit diagonal), x = P^T·v (LAPACK getrs with trans). */
static void solve_small(int n, float a[UNIPC_MAX_ORDER][UNIPC_MAX_ORDER],
                        const float b[UNIPC_MAX_ORDER], float x[UNIPC_MAX_ORDER])
{
    float m[UNIPC_MAX_ORDER][UNIPC_MAX_ORDER], w[UNIPC_MAX_ORDER], v[UNIPC_MAX_ORDER];
    int perm[UNIPC_MAX_ORDER];
    for (int i = 0; i < n; i++) {
        perm[i] = i;
        for (int j = 0; j < n; j++)
            m[i][j] = a[j][i];
    }
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabsf(m[r][c]) > fabsf(m[p][c]))
                p = r;
        if (p != c) {
            for (int k = 0; k < n; k++) {
                const float t = m[c][k];
                m[c][k] = m[p][k];
                m[p][k] = t;
            }
            const int t = perm[c];
            perm[c] = perm[p];
            perm[p] = t;
        }
        for (int r = c + 1; r < n; r++) {
            const float f = m[r][c] / m[c][c];
            m[r][c] = f;
            for (int k = c + 1; k < n; k++) {
                const float prod = f * m[c][k];
                m[r][k] = m[r][k] - prod;
            }
        }
    }
    for (int i = 0; i < n; i++) { /* U^T w = b */
        float acc = b[i];
        for (int k = 0; k < i; k++) {
            const float prod = m[k][i] * w[k];
            acc = acc - prod;
        }
        w[i] = acc / m[i][i];
    }
    for (int i = n - 1; i >= 0; i--) { /* L^T v = w */
        float acc = w[i];
        for (int k = i + 1; k < n; k++) {
            const float prod = m[k][i] * v[k];
            acc = acc - prod;
        }
        v[i] = acc;
    }
    for (int i = 0; i < n; i++)
        x[perm[i]] = v[i];
}

/* The coefficients for `order` >= 1; corrector: rhos_c = R⁻¹ b (0.5 for order 1), else
 * rhos_p = R[:-1,:-1]⁻¹ b[:-1] (0.5 for order 2, none for order 1), as diffusers. */
static void bh_coefficients(const unipc_schedule *s, int t, int s0, int order, bool corrector,
                            bh_coeffs *c)
{
    const float *sig = s->sigmas;
    const float sigma_t = sig[t], sigma_s0 = sig[s0];
    const float alpha_t = 1.0f - sigma_t;
    const float lambda_s0 = lambda_of(sigma_s0);
    const float h = lambda_of(sigma_t) - lambda_s0;
    float rks[UNIPC_MAX_ORDER];
    c->older = order - 1;
    for (int k = 1; k < order; k++) {
        const float dl = lambda_of(sig[s0 - k]) - lambda_s0;
        rks[k - 1] = dl / h;
        c->rk[k - 1] = rks[k - 1];
    }
    rks[order - 1] = 1.0f;
    const float hh = -h;                    /* predict_x0 */
    const float h_phi_1 = expm1_32(hh);     /* e^hh - 1 */
    const float b_h = s->config.solver_type == UNIPC_SOLVER_BH1 ? hh : h_phi_1;
    float h_phi_k = h_phi_1 / hh - 1.0f;
    float rmat[UNIPC_MAX_ORDER][UNIPC_MAX_ORDER], bvec[UNIPC_MAX_ORDER];
    int factorial = 1;
    for (int i = 1; i <= order; i++) {
        for (int k = 0; k < order; k++)     /* row i-1: rks^(i-1) */
            rmat[i - 1][k] = i == 1 ? 1.0f : i == 2 ? rks[k] : rks[k] * rks[k];
        const float scaled = h_phi_k * (float)factorial;
        bvec[i - 1] = scaled / b_h;
        factorial *= i + 1;
        const float q = h_phi_k / hh;
        h_phi_k = q - (float)(1.0 / (double)factorial);
    }
    c->c_x = sigma_t / sigma_s0;
    c->c_m0 = alpha_t * h_phi_1;
    c->c_res = alpha_t * b_h;
    if (corrector) {
        if (order == 1)
            c->rho[0] = 0.5f;
        else
            solve_small(order, rmat, bvec, c->rho);
    } else if (order == 2) {
        c->rho[0] = 0.5f;
    } else if (order > 2) {
        solve_small(order - 1, rmat, bvec, c->rho);
    }
}

/* sum_k rho[k]·(older[k][j] - m0)/rk[k], k = 0 .. c->older - 1 summed in that order, for
 * element j; older[k] is the (k+1)-th newest x0 prediction before m0 (n floats each). */
static float residual(const bh_coeffs *c, float *const *older, size_t j, float m0)
{
    float res = 0.0f;
    for (int k = 0; k < c->older; k++) {
        const float diff = older[k][j] - m0;
        const float d1 = diff / c->rk[k];
        const float term = c->rho[k] * d1;
        res = k == 0 ? term : res + term;
    }
    return res;
}

/* sigma_t/sigma_s0·x - alpha_t·h·phi_1·m0 for one element */
static float base_update(const bh_coeffs *c, float x, float m0)
{
    const float a = c->c_x * x, b = c->c_m0 * m0;
    return a - b;
}

size_t unipc_state_floats(const unipc_schedule *s, size_t n)
{
    return ((size_t)s->config.solver_order + 1) * n;
}

cpdit_status unipc_state_init(unipc_state *st, const unipc_schedule *s, size_t n,
                              float *workspace, cpdit_error *err)
{
    memset(st, 0, sizeof *st);
    if (!s || !s->sigmas || s->num_steps < 1)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "scheduler", "no schedule");
    if (n > 0 && !workspace)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "scheduler", "no workspace");
    st->sched = s;
    st->n = n;
    if (!workspace) /* n == 0: a rank that holds no elements still keeps the step count */
        return CPDIT_OK;
    for (int k = 0; k < s->config.solver_order; k++)
        st->x0[k] = workspace + (size_t)k * n;
    st->last_sample = workspace + (size_t)s->config.solver_order * n;
    return CPDIT_OK;
}

static bool corrector_disabled(const unipc_config *c, int step)
{
    for (int i = 0; i < c->n_disable_corrector; i++)
        if (c->disable_corrector[i] == step)
            return true;
    return false;
}

static int min_int(int a, int b) { return a < b ? a : b; }

cpdit_status unipc_step(unipc_state *st, float *x, const float *v, cpdit_error *err)
{
    const unipc_schedule *s = st->sched;
    const unipc_config *cfg = &s->config;
    const int i = st->step_index, p = cfg->solver_order;
    if (i >= s->num_steps)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "scheduler",
                               "all %d steps are done", s->num_steps);
    const bool correct = i > 0 && !corrector_disabled(cfg, i - 1);
    bh_coeffs cc, pc;
    if (correct)
        bh_coefficients(s, i, i - 1, st->this_order, true, &cc);
    int order = cfg->lower_order_final ? min_int(p, s->num_steps - i) : p;
    order = min_int(order, st->lower_order_nums + 1);
    bh_coefficients(s, i + 1, i, order, false, &pc);

    /* the history before this step: old[k] = the k-th newest x0 (old[0] the newest) */
    float *old[UNIPC_MAX_ORDER];
    for (int k = 0; k < p; k++)
        old[k] = st->x0[p - 1 - k];
    float *slot = st->x0[0]; /* the oldest: it receives this step's x0 */
    const float sigma = s->sigmas[i];
    for (size_t j = 0; j < st->n; j++) {
        const float sv = sigma * v[j];
        const float x0 = x[j] - sv;      /* convert_model_output, from the uncorrected x */
        float xs = x[j];
        if (correct) {                   /* UniC with x0 as the model output at x */
            const float m0 = old[0][j];
            const float res = residual(&cc, old + 1, j, m0);
            const float d1_t = x0 - m0;
            const float tail = cc.rho[cc.older] * d1_t;
            const float tot = cc.older > 0 ? res + tail : tail;
            const float scaled = cc.c_res * tot;
            xs = base_update(&cc, st->last_sample[j], m0) - scaled;
        }
        slot[j] = x0;  /* old[p-1][j] is not needed below: the predictor uses at most p - 1 */
        st->last_sample[j] = xs;
        float out = base_update(&pc, xs, x0);
        if (pc.older > 0) {              /* UniP: its older predictions are old[0 .. older) */
            const float res = residual(&pc, old, j, x0);
            const float scaled = pc.c_res * res;
            out = out - scaled;
        }
        x[j] = out;
    }
    /* rotate: the slot written becomes the newest */
    for (int k = 0; k + 1 < p; k++)
        st->x0[k] = st->x0[k + 1];
    st->x0[p - 1] = slot;
    st->this_order = order;
    if (st->lower_order_nums < p)
        st->lower_order_nums++;
    st->step_index++;
    return CPDIT_OK;
}
