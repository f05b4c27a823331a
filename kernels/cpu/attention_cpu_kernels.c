/* attention_cpu_kernels.c — the attention kernels of the CPU table (--attention-backend):
 *   cpu-flash      the blocked online-softmax kernel (attention_cpu.c) for unmasked attention;
 *                  with a causal mask or an additive bias (the text encoders' short sequences)
 *                  the dense per-head kernel (attention_dense_cpu.c);
 *   cpu-reference  the plain loops with double accumulation (attention_cpu_reference.c): slow,
 *                  for checking.
 * The "cpu" table's activations are host fp32 arrays: q, k, v and out go to the float kernels
 * as they are (cpdit_buf_host). The "cpu-bf16" table wraps the same kernels
 * (backend_cpu_bf16.c).
 */
#include "config.h"

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/profile_cpu.h"

static cpdit_status cpu_flash_forward(cpdit_buf *out, float *lse, const cpdit_buf *q,
                                      const cpdit_buf *k, const cpdit_buf *v,
                                      const cpdit_attention_args *a, cpdit_error *err)
{
    return attention_cpu_flash_or_dense(cpdit_buf_host(out), lse, cpdit_buf_host(q),
                                        cpdit_buf_host(k), cpdit_buf_host(v), a, err);
}

static cpdit_status cpu_reference_forward(cpdit_buf *out, float *lse, const cpdit_buf *q,
                                          const cpdit_buf *k, const cpdit_buf *v,
                                          const cpdit_attention_args *a, cpdit_error *err)
{
    return attention_cpu_reference_args(cpdit_buf_host(out), lse, cpdit_buf_host(q),
                                        cpdit_buf_host(k), cpdit_buf_host(v), a, err);
}

cpdit_status attention_cpu_flash_or_dense(float *out, float *lse, const float *q,
                                          const float *k, const float *v,
                                          const cpdit_attention_args *a, cpdit_error *err)
{
    CPU_PROF_BEGIN();
    const cpdit_status st = a->bias || a->causal ? attention_cpu_dense(out, lse, q, k, v, a, err)
                                                 : attention_cpu_flash(out, lse, q, k, v, a, err);
    CPU_PROF_END(CPU_PROF_ATTENTION, 4.0 * a->B * a->H * (double)a->Sq * a->Skv * a->D, 0);
    return st;
}

static const cpdit_attention_kernel cpu_flash = {
    .name = "cpu-flash",
    .summary = "blocked online softmax through SGEMM (dense per head with a mask or bias)",
    .forward = cpu_flash_forward,
};

static const cpdit_attention_kernel cpu_reference = {
    .name = "cpu-reference",
    .summary = "plain loops, double accumulation (slow; for checking)",
    .forward = cpu_reference_forward,
};

const cpdit_attention_kernel *const attention_cpu_kernels[] = {&cpu_flash, &cpu_reference,
                                                                NULL};
