/* cpdit_error.c — filling and formatting cpdit_error records (see cpdit_error.h). */
#include "lib/core/cpdit_error.h"

#include <stdio.h>
#include <string.h>

void cpdit_error_clear(cpdit_error *err)
{
    if (!err)
        return;
    err->status = CPDIT_OK;
    err->where[0] = '\0';
    err->what[0] = '\0';
}

cpdit_status cpdit_error_vset(cpdit_error *err, cpdit_status status, const char *where,
                              const char *fmt, va_list ap)
{
    if (!err)
        return status;
    err->status = status;
    snprintf(err->where, sizeof err->where, "%s", where ? where : "");
    vsnprintf(err->what, sizeof err->what, fmt, ap);
    return status;
}

cpdit_status cpdit_error_set(cpdit_error *err, cpdit_status status, const char *where,
                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cpdit_error_vset(err, status, where, fmt, ap);
    va_end(ap);
    return status;
}

cpdit_status cpdit_error_prefix_where(cpdit_error *err, const char *outer)
{
    char tmp[2 * CPDIT_ERROR_WHERE_MAX + 8]; /* outer + ": " + where, truncated on copy */
    if (!err)
        return CPDIT_ERR_RUNTIME;
    if (!outer || !outer[0])
        return err->status;
    if (err->where[0])
        snprintf(tmp, sizeof tmp, "%s: %s", outer, err->where);
    else
        snprintf(tmp, sizeof tmp, "%s", outer);
    memcpy(err->where, tmp, sizeof err->where - 1);
    err->where[sizeof err->where - 1] = '\0';
    return err->status;
}

const char *cpdit_error_format(const cpdit_error *err, char *buf, unsigned long size)
{
    if (!buf || size == 0)
        return "";
    if (!err)
        snprintf(buf, size, "cpdit: unknown error");
    else if (err->where[0])
        snprintf(buf, size, "cpdit: %s: %s", err->where, err->what);
    else
        snprintf(buf, size, "cpdit: %s", err->what);
    return buf;
}
