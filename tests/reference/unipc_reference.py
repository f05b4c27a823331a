#!/usr/bin/env python3
"""Expected Wan 2.1 sampler schedules and updates for tests/test_unipc_schedule.c.

Written from the definition of diffusers' UniPCMultistepScheduler (flow sigmas, flow
prediction, predict_x0, the B(h) predictor UniP and corrector UniC) and of
FlowMatchEulerDiscreteScheduler.set_timesteps(N) with a static shift, in plain numpy with
diffusers' dtypes: the schedule in float64 then rounded to float32 (timesteps truncated to
int64 for UniPC), every step in float32 (0-d float32 coefficients times float32 arrays, one
rounding per operation, in the order Python evaluates diffusers' expressions).

    /usr/bin/python3 tests/reference/unipc_reference.py > tests/data/unipc_expected.txt

Line formats (floats as float32 bit patterns in hex):
    unipc <config> <shift> <N> <sigmas: N+1> | <timesteps: N integers>
    x <config> <shift> <N> <k> <sample after step k: NELEM values>        k = 1..N
    euler <shift> <N> <sigmas: N+1> | <timesteps: N>
The sample before step 1 and the fake model outputs come from a 32-bit LCG (see lcg_floats) so
that the C test makes the same numbers: x0 = the first NELEM draws; the model output at each
step is v = 0.5*x + r with r the next NELEM draws (v depends on x as a real model's does).
Configs: wan (Wan 2.1's scheduler_config.json: order 2, bh2, lower_order_final, final sigma
zero), bh1 (final sigma "sigma_min": with "zero" diffusers' last bh1 step is NaN, B(h) = -inf
times 0, and cpdit refuses it), order1, order3, sigmamin (final_sigmas_type "sigma_min"),
nocorr (disable_corrector [0, 2]), nolof (lower_order_final false, final sigma "sigma_min" so
that the last step stays finite).
"""
import sys

import numpy as np

F32 = np.float32
TRAIN_STEPS = 1000
NELEM = 13
SEED = 20250301
FIRST_SIGMA_EPS = 1e-6  # set_timesteps pulls sigma 1.0 down by this to keep log(1 - sigma) finite

CONFIGS = {
    "wan": dict(order=2, bh="bh2", lof=True, final="zero", disable=()),
    "bh1": dict(order=2, bh="bh1", lof=True, final="sigma_min", disable=()),
    "order1": dict(order=1, bh="bh2", lof=True, final="zero", disable=()),
    "order3": dict(order=3, bh="bh2", lof=True, final="zero", disable=()),
    "sigmamin": dict(order=2, bh="bh2", lof=True, final="sigma_min", disable=()),
    "nocorr": dict(order=2, bh="bh2", lof=True, final="zero", disable=(0, 2)),
    "nolof": dict(order=2, bh="bh2", lof=False, final="sigma_min", disable=()),
}


def lcg_floats(state, count):
    """count floats in [-1, 1) from state (a 32-bit LCG, Numerical Recipes constants), each
    k * 2^-23 - 1 for the top 24 bits k: exact in float32. Returns (values, new state)."""
    out = np.empty(count, dtype=F32)
    for i in range(count):
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = F32((state >> 8) * 2.0 ** -23 - 1.0)
    return out, state


def unipc_schedule(steps, shift, final):
    """set_timesteps with use_flow_sigmas: float64 until the float32 cast."""
    s = np.linspace(1.0, 1.0 / TRAIN_STEPS, steps + 1)[:-1]
    s = shift * s / (1 + (shift - 1) * s)
    if abs(s[0] - 1.0) < FIRST_SIGMA_EPS:
        s[0] -= FIRST_SIGMA_EPS
    timesteps = np.trunc(s * TRAIN_STEPS).astype(np.int64)  # torch .to(int64) truncates
    last = 0.0 if final == "zero" else s[-1]
    sigmas = np.concatenate([s, [last]]).astype(F32)
    return sigmas, timesteps


def log32(v):
    """float32 log, correctly rounded (through float64); torch's float32 log agrees but for
    about 1% of inputs (an ulp), numpy's own float32 log and expm1 are further off."""
    with np.errstate(divide="ignore"):
        return F32(np.log(np.float64(v)))


def expm1_32(v):
    return F32(np.expm1(np.float64(v)))


def lam(sigma):
    """lambda = log(alpha) - log(sigma) with alpha = 1 - sigma (float32; +inf at sigma 0)."""
    return F32(log32(F32(F32(1) - sigma)) - log32(sigma))


def solve32(a, b):
    """a x = b in float32 as torch.linalg.solve does it: LU with partial pivoting of a^T (torch
    factors the transpose of a row-major matrix), then U^T w = b, L^T v = w and the row
    interchanges undone (LAPACK getrs with trans); one rounding per operation, no fused
    multiply-add. Bit-identical to torch 1.13 on 20000 random 2x2 systems of UniPC's form."""
    n = len(b)
    m = np.array(a, dtype=F32).T.copy()
    perm = list(range(n))
    for c in range(n):
        p = c + int(np.argmax(np.abs(m[c:, c])))  # the first largest
        if p != c:
            m[[c, p]] = m[[p, c]]
            perm[c], perm[p] = perm[p], perm[c]
        for r in range(c + 1, n):
            f = F32(m[r, c] / m[c, c])
            m[r, c] = f
            for k in range(c + 1, n):
                m[r, k] = F32(m[r, k] - F32(f * m[c, k]))
    w = np.zeros(n, dtype=F32)
    for i in range(n):  # U^T w = b
        acc = F32(b[i])
        for k in range(i):
            acc = F32(acc - F32(m[k, i] * w[k]))
        w[i] = F32(acc / m[i, i])
    v = np.zeros(n, dtype=F32)
    for i in range(n - 1, -1, -1):  # L^T v = w (unit diagonal)
        acc = w[i]
        for k in range(i + 1, n):
            acc = F32(acc - F32(m[k, i] * v[k]))
        v[i] = acc
    x = np.zeros(n, dtype=F32)
    for i in range(n):
        x[perm[i]] = v[i]
    return x


class UniPC:
    """One sample's UniPC state; sigmas float32 (N+1)."""

    def __init__(self, cfg, sigmas):
        self.cfg, self.sigmas = cfg, sigmas
        self.n = len(sigmas) - 1
        self.x0s = []          # converted model outputs (predicted x0), newest last
        self.last = None
        self.lower_nums = 0
        self.this_order = 0
        self.i = 0

    def coefficients(self, t_idx, s0_idx, order, back):
        """The scalars of one B(h) update from sigma[s0_idx] to sigma[t_idx] using `order`
        x0 predictions; back(k) is the sigma index of the k-th older prediction."""
        sig = self.sigmas
        sigma_t, sigma_s0 = sig[t_idx], sig[s0_idx]
        alpha_t = F32(F32(1) - sigma_t)
        lam_t, lam_s0 = lam(sigma_t), lam(sigma_s0)
        h = F32(lam_t - lam_s0)
        rks = [F32(F32(lam(sig[back(k)]) - lam_s0) / h) for k in range(1, order)]
        rks.append(F32(1))
        hh = F32(-h)
        h_phi_1 = expm1_32(hh)
        h_phi_k = F32(F32(h_phi_1 / hh) - F32(1))
        b_h = hh if self.cfg["bh"] == "bh1" else h_phi_1
        fact = 1
        rmat, bvec = [], []
        for k in range(1, order + 1):
            rmat.append([F32(r ** (k - 1)) for r in rks])
            bvec.append(F32(F32(h_phi_k * F32(fact)) / b_h))
            fact *= k + 1
            h_phi_k = F32(F32(h_phi_k / hh) - F32(1.0 / fact))
        return dict(c_x=F32(sigma_t / sigma_s0), c_m0=F32(alpha_t * h_phi_1),
                    c_res=F32(alpha_t * b_h), rks=rks[:-1], R=rmat, b=bvec)

    def predictor(self, x, order):
        i = self.i
        c = self.coefficients(i + 1, i, order, lambda k: i - k)
        m0 = self.x0s[-1]
        out = (c["c_x"] * x).astype(F32) - (c["c_m0"] * m0).astype(F32)
        if order >= 2:
            rhos = [F32(0.5)] if order == 2 else solve32(
                [row[:-1] for row in c["R"][:-1]], c["b"][:-1])
            res = None
            for k, rk in enumerate(c["rks"]):
                d1 = ((self.x0s[-(k + 2)] - m0).astype(F32) / rk).astype(F32)
                term = (rhos[k] * d1).astype(F32)
                res = term if res is None else (res + term).astype(F32)
            out = out - (c["c_res"] * res).astype(F32)
        return out.astype(F32)

    def corrector(self, x0_now, last, order):
        i = self.i
        c = self.coefficients(i, i - 1, order, lambda k: i - (k + 1))
        m0 = self.x0s[-1]
        rhos = [F32(0.5)] if order == 1 else solve32(c["R"], c["b"])
        out = (c["c_x"] * last).astype(F32) - (c["c_m0"] * m0).astype(F32)
        res = None
        for k, rk in enumerate(c["rks"]):
            d1 = ((self.x0s[-(k + 2)] - m0).astype(F32) / rk).astype(F32)
            term = (rhos[k] * d1).astype(F32)
            res = term if res is None else (res + term).astype(F32)
        d1_t = (x0_now - m0).astype(F32)
        tail = (rhos[-1] * d1_t).astype(F32)
        tot = tail if res is None else (res + tail).astype(F32)
        return (out - (c["c_res"] * tot).astype(F32)).astype(F32)

    def step(self, v, x):
        cfg, i = self.cfg, self.i
        x0_now = (x - (self.sigmas[i] * v).astype(F32)).astype(F32)
        if i > 0 and (i - 1) not in cfg["disable"] and self.last is not None:
            x = self.corrector(x0_now, self.last, self.this_order)
        self.x0s = (self.x0s + [x0_now])[-cfg["order"]:]
        order = min(cfg["order"], self.n - i) if cfg["lof"] else cfg["order"]
        self.this_order = min(order, self.lower_nums + 1)
        self.last = x
        out = self.predictor(x, self.this_order)
        self.lower_nums = min(self.lower_nums + 1, cfg["order"])
        self.i += 1
        return out


def euler_schedule(steps, shift):
    """FlowMatchEulerDiscreteScheduler(shift=shift).set_timesteps(steps): the shifted float32
    training sigmas give sigma_max/min; the float64 linspace between them is shifted again."""
    train = np.linspace(1, TRAIN_STEPS, TRAIN_STEPS, dtype=F32)[::-1].copy()
    s = (train / F32(TRAIN_STEPS)).astype(F32)
    s = (F32(shift) * s / (F32(1) + F32(shift - 1) * s)).astype(F32)
    sigma_max, sigma_min = float(s[0]), float(s[-1])
    t = np.linspace(sigma_max * TRAIN_STEPS, sigma_min * TRAIN_STEPS, steps)
    sig = t / TRAIN_STEPS
    sig = (shift * sig / (1 + (shift - 1) * sig)).astype(F32)
    timesteps = (sig * F32(TRAIN_STEPS)).astype(F32)
    return np.concatenate([sig, np.zeros(1, F32)]), timesteps


def hexs(a):
    return " ".join("%08x" % v for v in np.asarray(a, dtype=F32).view(np.uint32))


def run_case(out, name, shift, steps):
    cfg = CONFIGS[name]
    sigmas, timesteps = unipc_schedule(steps, shift, cfg["final"])
    out.write("unipc %s %g %d %s | %s\n" % (name, shift, steps, hexs(sigmas),
                                           " ".join(str(t) for t in timesteps)))
    x, state = lcg_floats(SEED, NELEM)
    sched = UniPC(cfg, sigmas)
    for k in range(1, steps + 1):
        r, state = lcg_floats(state, NELEM)
        v = ((F32(0.5) * x).astype(F32) + r).astype(F32)
        x = sched.step(v, x)
        out.write("x %s %g %d %d %s\n" % (name, shift, steps, k, hexs(x)))


def main():
    # The last step to sigma 0 has h = +inf and a repeated last sigma ("sigma_min") h = 0: the
    # infinities and NaNs land only in coefficients that the step does not use, as in diffusers.
    np.seterr(divide="ignore", invalid="ignore")
    out = sys.stdout
    out.write("# Wan 2.1 samplers, generated by tests/reference/unipc_reference.py with numpy %s\n"
              % np.__version__)
    for shift in (3.0, 5.0):
        for steps in (1, 2, 4, 10, 50):
            run_case(out, "wan", shift, steps)
    for name in ("bh1", "order1", "order3", "sigmamin", "nocorr", "nolof"):
        for steps in (3, 10):
            run_case(out, name, 3.0, steps)
    for shift in (1.0, 3.0, 5.0):
        for steps in (1, 2, 4, 10, 50):
            sig, ts = euler_schedule(steps, shift)
            out.write("euler %g %d %s | %s\n" % (shift, steps, hexs(sig), hexs(ts)))


if __name__ == "__main__":
    main()
