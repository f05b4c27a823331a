/* backend_ops_reference.h — double-precision references of the kernel table's op cases
 * (kernels/backend_ops.h), by case name. */
#ifndef CPDIT_TESTS_BACKEND_OPS_REFERENCE_H
#define CPDIT_TESTS_BACKEND_OPS_REFERENCE_H

/* d: the shape; in: the case's host inputs; out: the case's n_out outputs. */
typedef void (*backend_op_reference_fn)(const int *d, const float *in, double *out);

typedef struct backend_op_reference {
    const char *name;
    backend_op_reference_fn fn;
} backend_op_reference;

/* The reference of a case, or NULL. */
backend_op_reference_fn backend_op_reference_find(const char *name);

#endif
