/* disk_reads.c — this process's storage reads from /proc/self/io (see disk_reads.h).
 */
#include "config.h"

#include <stdio.h>

#include "lib/pipeline/disk_reads.h"

long long disk_read_bytes(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    if (!f)
        return -1;
    char line[128];
    long long v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "read_bytes: %lld", &v) == 1)
            break;
    fclose(f);
    return v;
}
