// The contract between flashrec-launch and the ranks it starts: the environment variables one
// side sets and the other reads, and the exit codes a rank ends with to ask the launcher for a
// tier. Every C++ use names these constants; docs/contract.md is the same table for people.
// Internal: not part of the public flashrec.hpp.
#pragma once

namespace flashrec::ft {

namespace env {

// --- set by flashrec-launch for every rank of the MPI job ---

// "host:port" of the launcher's control plane; unset means no launcher (heartbeats off).
inline constexpr char kControl[] = "FLASHREC_CONTROL";
// The per-launch secret, 32 hex digits; required whenever kControl is set.
inline constexpr char kToken[] = "FLASHREC_TOKEN";
// 16 hex digits that tag every process of one launch, so teardown finds strays by environment.
inline constexpr char kLaunchId[] = "FLASHREC_LAUNCH_ID";
// Role index of each active world rank, in rank order ("2,0,1,3"); unset: rank order.
inline constexpr char kRoleOfRank[] = "FLASHREC_ROLE_OF_RANK";
// Host on which tier-1 replacements are spawned (the first reserve node); unset: any host.
inline constexpr char kSpareHost[] = "FLASHREC_SPARE_HOST";
// Set (to "1") for a warm relaunch (tier 2): restore from node-local snapshots.
inline constexpr char kRelaunch[] = "FLASHREC_RELAUNCH";
// Set (to "1") with kRelaunch: restore, write an HDF5 checkpoint, and exit (for a Slurm requeue).
inline constexpr char kCheckpointAndExit[] = "FLASHREC_CHECKPOINT_AND_EXIT";
// Tests only (tests/recovery/disruption_matrix.py): `1` makes every role of a warm relaunch stop
// itself (SIGSTOP) once its restore plan is final and its sources verified, before it copies
// anything, so that a test can damage the stored state "during a restore" deterministically.
inline constexpr char kTestStopInRestore[] = "FLASHREC_TEST_STOP_IN_RESTORE";
// Set: resume from the newest HDF5 checkpoint (tier 3), like --resume.
inline constexpr char kResume[] = "FLASHREC_RESUME";
// Network interface(s) for mpirun's TCP BTL (read by tools/fr-mpirun); unset: its default.
inline constexpr char kBtlIf[] = "FLASHREC_BTL_IF";
// Set (to "1") for every task of a direct launch (launch.mode: srun, no mpirun): ULFM's failure
// events stay inside the process, where Slurm's PMIx server cannot see them (ft/pmix_failure_events.hpp).
inline constexpr char kDirectLaunch[] = "FLASHREC_DIRECT_LAUNCH";
// "true" (tools/fr-mpirun's --mca async_mpi_finalize, in both modes): MPI_Finalize skips its PMIx
// fence. Required under direct launch, where the fence would wait for a dead rank whose PMIx
// connection the keeper holds open (ft/pmix_connection_keeper.hpp).
inline constexpr char kAsyncMpiFinalize[] = "OMPI_MCA_async_mpi_finalize";

// --- read by the launcher or the ranks, set by the user or by tests ---

// mpi.transport for tools/fr-mpirun: tcp | shm | auto (the launcher sets it from train.yaml;
// set by the user, it overrides train.yaml). Unset: auto.
inline constexpr char kTransport[] = "FLASHREC_TRANSPORT";
// mpi.detector (on | off), mpi.detector_period_ms / mpi.detector_timeout_ms for
// tools/fr-mpirun (shm), the same way.
inline constexpr char kDetector[] = "FLASHREC_DETECTOR";
inline constexpr char kDetectorPeriodMs[] = "FLASHREC_DETECTOR_PERIOD_MS";
inline constexpr char kDetectorTimeoutMs[] = "FLASHREC_DETECTOR_TIMEOUT_MS";
// mpi.yield_when_idle (auto | true | false) for tools/fr-mpirun, the same way: true and false
// become Open MPI's mpi_yield_when_idle (kMpiYieldWhenIdle in the ranks), auto leaves it to Open MPI.
inline constexpr char kYieldWhenIdle[] = "FLASHREC_YIELD_WHEN_IDLE";
// Open MPI's own: "1"/"true" makes a waiting rank yield its core; the runtime's waits then
// sleep as well (MpiSession::host_oversubscribed).
inline constexpr char kMpiYieldWhenIdle[] = "OMPI_MCA_mpi_yield_when_idle";

// train.yaml of a rank when argv carries no --config.
inline constexpr char kConfig[] = "FLASHREC_CONFIG";
// Overrides the name of this process's node (tests simulate several nodes on one machine).
inline constexpr char kNode[] = "FLASHREC_NODE";
// The mpirun wrapper flashrec-launch runs; unset: fr-mpirun beside the executable.
inline constexpr char kMpirun[] = "FLASHREC_MPIRUN";
// "0": run on this machine even inside a Slurm allocation.
inline constexpr char kSlurm[] = "FLASHREC_SLURM";
// MPI install prefix for tools/fr-mpirun (set by the launcher's probe of the wrapper's flags).
inline constexpr char kMpiPrefix[] = "FLASHREC_MPI_PREFIX";
// Test hook: "<step>:<ms>[:before-check]" pauses a checkpoint write (tests/checkpoint).
inline constexpr char kTestCheckpointPause[] = "FLASHREC_TEST_CHECKPOINT_PAUSE";

}  // namespace env

// How long a rank that leaves waits for the launcher to acknowledge its last record
// (role_finished, ending_job) before it goes on without (and says so): the launcher answers as
// soon as the record reaches it, so this bounds only a launcher that is stuck or gone.
inline constexpr int kRecordAckLimitMs = 5000;

// --- rank exit codes the launcher acts on (flashrec-launch ends with the same numbers when it
// cannot serve the request; docs/contract.md) ---

// Bad command line or train.yaml (the example trainers' ConfigError exit): never relaunched.
inline constexpr int kExitBadConfig = 2;
// EX_TEMPFAIL, "try again": the job cannot repair itself in-job; warm-relaunch it (tier 2).
inline constexpr int kExitForRelaunch = 75;
// State lost in memory: restart from the newest HDF5 checkpoint (tier 3).
inline constexpr int kExitStateLost = 76;
// No spare left for a dead role: slurm.when_spares_exhausted decides what happens next.
inline constexpr int kExitNoSpare = 77;
// EX_CONFIG: the process leaves by a deterministic error, a UsageError or ConfigError that the
// trainer's own call raised (protect() inside the step loop, a missing trainer parameter). Every
// relaunch would fail the same way, so the launcher ends the job at once with this code. Sent as
// the ending_job record's exit_code (runtime/deterministic_end.hpp).
inline constexpr int kExitDeterministicError = 78;
// A restore found the role's state written on another platform (CPU model or flags, GPU model,
// flashrec or trainer build: runtime/platform.hpp) and recovery.require_same_platform refuses
// it. Sent as the ending_job record's exit_code after a platform_mismatch record; like 78, the
// launcher ends the job at once: a relaunch would place the role on the same kind of node again.
// (79 and 80 are flashrec-launch's own.)
inline constexpr int kExitPlatformMismatch = 81;

}  // namespace flashrec::ft
