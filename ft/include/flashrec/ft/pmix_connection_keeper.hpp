// Keeps a process's connection to slurmstepd's PMIx server open after the process dies, under
// direct launch (srun --mpi=pmix), so that a rank's death never reaches Slurm.
//
// When a task's PMIx connection closes before PMIx_Finalize, slurmstepd's PMIx server reports
// PMIX_ERR_LOST_CONNECTION to Slurm's only event handler, which cancels the whole step: every
// survivor of the dead rank's node and of every other node is killed (docs/ulfm-traps.md,
// trap 17). That happens only when the dead task shares its node with another task of the step,
// so before the keeper, direct launch ran one rank a node.
//
// keep_pmix_connection() starts a small process (the keeper) that holds a copy of the
// connection's socket and nothing else of the rank: no MPI socket, no segment, no stdio, no
// memory (it is /bin/sh, started by exec). While the rank lives, the keeper only waits for it to
// end. Once the rank is gone, for any reason, the connection stays open, so the server hears
// nothing; the keeper holds it, never reading it, until the server's process (the step's
// slurmstepd) has ended, which it checks once a second.
//
// What the keeper costs: one sleeping shell a rank for the step's life, and the server counts a
// dead rank as connected, so no PMIx fence may wait for one. The fence in MPI_Finalize would:
// tools/fr-mpirun turns it off in both modes (--mca async_mpi_finalize true; under direct launch
// OMPI_MCA_async_mpi_finalize, env::kAsyncMpiFinalize), and keep_pmix_connection() refuses to
// start without it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace flashrec::ft {

// A PMIx server as its clients find it: the process that serves (slurmstepd) and its TCP port.
struct PmixServerAddress {
    int pid = 0;
    int port = 0;
    bool operator==(const PmixServerAddress&) const = default;
};

struct KeptPmixConnection {
    pid_t keeper = -1;       // the keeper's pid (not a child of this process)
    int connection_fd = -1;  // this process's socket to the PMIx server, which the keeper holds too
    PmixServerAddress server;
};

// The PMIx servers the environment names (PMIX_SERVER_URI41 .. URI2, each
// "<namespace>.<pid>;tcp4://127.0.0.1:<port>" or tcp6), without repeats; malformed ones skipped.
std::vector<PmixServerAddress> pmix_servers(const std::function<const char*(const char*)>& getenv);

// Call after MPI_Init, once per process, under direct launch. Throws flashrec::Error saying why
// when it cannot keep the connection: async finalize not set, no PMIx server in the environment,
// no socket (or more than one) connected to it, or the keeper could not start.
KeptPmixConnection keep_pmix_connection();

}  // namespace flashrec::ft
