// Keeps ULFM's failure events inside the process under direct launch (srun --mpi=pmix).
//
// When a process of an Open MPI 5 job with ULFM sees a peer fail by itself (a closed socket, a
// failed send), it passes the failure on with PMIx_Notify_event(PMIX_ERR_PROC_TERM_WO_SYNC,
// range PMIX_RANGE_LOCAL). Under mpirun that goes to PRRTE's daemon, which spreads it. Under
// `srun --mpi=pmix` it goes to slurmstepd's PMIx server, whose error handler answers every
// event with slurm_kill_job_step(SIGKILL): the survivors repair, then Slurm ends the step
// (docs/ulfm-traps.md, "ULFM's failure event ends a Slurm step"; reproducer
// tests/ulfm/upstream/srun_pmix_step_cancel.c).
//
// libflashrec therefore defines PMIx_Notify_event itself. The trainer links libflashrec
// directly and libpmix only through libmpi, so the dynamic linker binds libmpi's calls to this
// definition first; it calls the real one (the next in the search order) and, only in a process
// started by flashrec's direct launch (env::kDirectLaunch), narrows the range of
// PMIX_ERR_PROC_TERM_WO_SYNC to PMIX_RANGE_PROC_LOCAL. ULFM's own spreading of the failure
// (inside libmpi, over the BTLs) and flashrec's control plane (PEER_LOST) still reach every
// survivor; only Slurm no longer hears it. Every other event, and every event under mpirun,
// passes unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace flashrec::ft {

// Whether this process asked for failure events to stay local (env::kDirectLaunch is "1").
bool failure_events_kept_local();

// nullopt when libmpi's calls to PMIx_Notify_event reach flashrec's definition (the process
// resolves the symbol to it first); else why not. Meaningful once libmpi is loaded.
std::optional<std::string> failure_events_interposer_unbound();

// How many failure events this process kept local so far (for the log and the tests).
std::uint64_t failure_events_narrowed();

}  // namespace flashrec::ft
