/* attention_cpu_kernels.c — the attention kernels of the CPU table (--attention-backend):
 *   cpu-flash      the blocked online-softmax kernel (attention_cpu.c) for unmasked attention;
 *                  with a causal mask or an additive bias (the text encoders' short sequences)
 *                  the dense per-head kernel (attention_dense_cpu.c);
 *   cpu-reference  the plain loops with double accumulation (attention_cpu_reference.c): slow,
 *                  for checking.
 */
#include "config.h"

#include "kernels/cpu/attention_cpu.h"

static cpdit_status cpu_flash_forward(float *out, float *lse, const float *q, const float *k,
                                      const float *v, const cpdit_attention_args *a,
                                      cpdit_error *err)
{
    if (a->bias || a->causal)
        return attention_cpu_dense(out, lse, q, k, v, a, err);
    return attention_cpu_flash(out, lse, q, k, v, a, err);
}

static const cpdit_attention_kernel cpu_flash = {
    .name = "cpu-flash",
    .summary = "blocked online softmax through SGEMM (dense per head with a mask or bias)",
    .forward = cpu_flash_forward,
};

static const cpdit_attention_kernel cpu_reference = {
    .name = "cpu-reference",
    .summary = "plain loops, double accumulation (slow; for checking)",
    .forward = attention_cpu_reference_args,
};

const cpdit_attention_kernel *const attention_cpu_kernels[] = {&cpu_flash, &cpu_reference,
                                                                NULL};
