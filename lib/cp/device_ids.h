/* device_ids.h — do ranks share a GPU? Decided from the devices' UUIDs gathered over the
 * communicator (plain C, no CUDA: unit-tested without a GPU).
 *
 * NCCL refuses two ranks of one communicator on one device, and which device a rank uses
 * depends on how it was chosen (local rank modulo the visible devices, CUDA_VISIBLE_DEVICES
 * per rank, ...): counting ranks per node against devices per node answers the wrong question
 * for sub-communicators (a ring group {0, 2} of 4 ranks on 2 GPUs has 2 ranks on a 2-GPU node,
 * yet both sit on device 0). Comparing the UUIDs the ranks actually use answers the right one.
 */
#ifndef CPDIT_DEVICE_IDS_H
#define CPDIT_DEVICE_IDS_H

#include <stddef.h>
#include <string.h>

/* Bytes per rank in the gathered table: a validity byte (1: the rank knows its device), then
 * the 16-byte device UUID. */
#define CPDIT_DEVICE_ID_BYTES 17

/* 1 when the table of n entries (n * CPDIT_DEVICE_ID_BYTES bytes) holds two ranks on one
 * device, or a rank that does not know its device (sharing cannot be ruled out); else 0. */
static inline int cpdit_device_ids_shared(const unsigned char *ids, int n)
{
    for (int i = 0; i < n; i++) {
        const unsigned char *a = ids + (size_t)i * CPDIT_DEVICE_ID_BYTES;
        if (a[0] != 1)
            return 1;
        for (int j = 0; j < i; j++)
            if (memcmp(a + 1, ids + (size_t)j * CPDIT_DEVICE_ID_BYTES + 1,
                       CPDIT_DEVICE_ID_BYTES - 1) == 0)
                return 1;
    }
    return 0;
}

#endif
