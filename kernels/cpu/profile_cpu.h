/* profile_cpu.h — `cpdit --profile` (or CPDIT_PROFILE=1): time, GFLOP, page faults and bytes
 * of the CPU kernels by op class, summed over the process, reported at the end as one table
 * (rate as % of the same run's bf16-linear rate). Off by default: then each hook is one
 * predictable branch. Times are wall time inside the class's calls (the pool's threads work
 * inside them); packing on the loader's helper thread overlaps the forward's classes.
 */
#ifndef CPDIT_PROFILE_CPU_H
#define CPDIT_PROFILE_CPU_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpu_prof_class {
    CPU_PROF_LINEAR_BF16 = 0, /* bf16-weight linear layers (the reference rate) */
    CPU_PROF_LINEAR_F32,      /* fp32-weight linear layers (SGEMM) */
    CPU_PROF_ATTENTION,       /* local attention kernels */
    CPU_PROF_CONV,            /* VAE convolutions */
    CPU_PROF_NORM,            /* layer/RMS norm, GroupNorm apply and moments */
    CPU_PROF_ELEMENTWISE,     /* add, mul, activations, modulate, residual, RoPE, copies */
    CPU_PROF_PACK,            /* weights made from the checkpoint (load) */
    CPU_PROF_N
} cpu_prof_class;

/* The start of a profiled call. */
typedef struct cpu_prof_mark {
    double t0;
    long faults0;
} cpu_prof_mark;

/* Whether profiling is on (CPDIT_PROFILE=1, read once). */
int cpu_prof_on(void);
void cpu_prof_begin(cpu_prof_mark *m);
/* Add one call of class c that started at m: flops floating-point operations, bytes read. */
void cpu_prof_end(const cpu_prof_mark *m, cpu_prof_class c, double flops, double bytes);
/* The table (nothing when profiling is off or no call was counted). */
void cpu_prof_report(FILE *out);

/* Hooks: PROF_BEGIN at the start of a table entry, PROF_END(class, flops, bytes) before it
 * returns. */
#define CPU_PROF_BEGIN()                                                                       \
    cpu_prof_mark prof_mark_ = {0.0, 0};                                                       \
    const int prof_on_ = cpu_prof_on();                                                        \
    if (prof_on_)                                                                              \
    cpu_prof_begin(&prof_mark_)
#define CPU_PROF_END(c, flops, bytes)                                                          \
    do {                                                                                       \
        if (prof_on_)                                                                          \
            cpu_prof_end(&prof_mark_, (c), (double)(flops), (double)(bytes));                  \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
