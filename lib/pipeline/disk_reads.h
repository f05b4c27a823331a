/* disk_reads.h — how many bytes this process has made the kernel read from storage so far
 * (Linux /proc/self/io "read_bytes": block-device reads it caused, by read() or by faulting in
 * mapped file pages, from every thread; page-cache hits count nothing), so that the sampler can
 * say what each step read: with resident weights nothing should be read after the load.
 */
#ifndef CPDIT_DISK_READS_H
#define CPDIT_DISK_READS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes read from storage by this process so far, or -1 where the kernel does not say (no
 * /proc/self/io: not Linux, or a kernel without task I/O accounting). */
long long disk_read_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
