/* quick_topology.h — a few seconds of measurements at job start when no topology file is
 * given: which ranks share a host, this machine's SGEMM and attention-kernel rates (all ranks
 * at once), and one alpha-beta fit from a ping-pong between ranks 0 and 1. A stand-in for
 * the probe's in-process quick mode until that is wired here; the document is format 1
 * (topology/README.md) with "quick": true, so it can be saved and read back like any file.
 * Collective over world; the JSON text (malloc'd) on rank 0, NULL elsewhere.
 */
#ifndef CPDIT_QUICK_TOPOLOGY_H
#define CPDIT_QUICK_TOPOLOGY_H

#include <mpi.h>

#include "lib/core/cpdit_error.h"

cpdit_status quick_topology_json(MPI_Comm world, char **json_text, cpdit_error *err);

#endif
