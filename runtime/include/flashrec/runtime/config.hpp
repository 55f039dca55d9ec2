// train.yaml, parsed and validated. Internal: trainers see it through Runtime's accessors.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flashrec::config {

struct Job {
    std::string name = "flashrec-job";
    int nodes = 1;
    int ranks_per_node = 1;   // active ranks per node; nodes*ranks_per_node == dp*tp*pp
    int dp = 1, tp = 1, pp = 1;
    int spare_nodes = 0;      // whole nodes kept in reserve (cold spares are spawned there)
    int hot_spares = 0;       // spare processes started with the job, parked in MPI
    std::int64_t steps = 100;
    std::uint64_t seed = 0;
    std::string placement = "block";  // how roles map to nodes: block | cyclic
    int world_size() const { return dp * tp * pp; }
};

struct Launch {
    std::string program;              // trainer binary, relative to train.yaml's directory
    std::vector<std::string> args;
    std::vector<std::string> mpirun_args;  // extra flags appended to flashrec's own
};

struct Protection {
    bool enabled = true;
    int replicas = 1;                 // k ring successors holding each sharded buffer
    std::string placement = "node-aware";  // node-aware | ring
    // One replication message: small enough that its receiver hashes it while in cache.
    std::int64_t chunk_bytes = 256 << 10;
    // Nice value of the protection thread (0-19): above the step's threads, so that a snapshot
    // takes the cores the step leaves idle, not the step's own (docs/snapshots.md).
    int thread_nice = 19;
    // State on a GPU: each snapshot's checksums are computed by a kernel from the device bytes
    // while they are copied, so the host reads none of the landed bytes (docs/gpu.md, "The hash
    // on the GPU"). false: the host hashes the landed bytes (XXH3-64), as before. No effect on
    // host state. A kernel that fails its known-answer test at start is not used either way.
    bool device_hash = false;
    // Snapshot (and replicate) only the versions that are multiples of this (the state before
    // step s is version s; 0 is always protected); a repair replays the steps since the version
    // restored. 1: every step (docs/snapshots.md, "A snapshot interval").
    // 0 (`every: auto`): k is chosen from the measured step and snapshot cost (a power of two up
    // to max_every, the smallest whose exposed cost per step stays within overhead_budget).
    std::int64_t every = 1;
    std::int64_t max_every = 64;   // auto: the largest k, a power of two >= 4; k changes only at its multiples
    double overhead_budget = 0.03; // auto: exposed protection cost per step, as a fraction of the step
    // start: when k can be > 1 (every != 1, or auto), the job replays its first interval once at
    // start (restore the version it started from, run the steps again, compare the hashes of the
    // next snapshot) and refuses a trainer whose replay is not bitwise exact (exit 78); off: no
    // probe (docs/snapshots.md, "The start-up replay probe").
    std::string replay_check = "start";
    static constexpr std::int64_t kAuto = 0;
    bool every_auto() const { return every == kAuto; }
    // The versions that are snapshotted whatever auto chooses: the multiples of this.
    std::int64_t period() const { return every_auto() ? max_every : every; }
    // Whether a start runs the replay probe: only where a repair can replay completed steps.
    bool probes_replay() const { return enabled && replay_check == "start" && every != 1; }
};

struct Checkpoint {
    std::string dir;                  // empty: no HDF5 checkpoints
    std::int64_t every_steps = 0;     // 0: never
    int keep = 2;
};

struct Detection {
    int heartbeat_ms = 100;
    int hang_timeout_ms = 10000;
    int startup_timeout_ms = 300000;  // launch -> every active role registered (the launcher's limit)
    std::string bind = "127.0.0.1";
    int port = 0;                     // 0: any free port
    bool metrics = false;
    int metrics_port = 0;
    // The launcher passes a process's end (its control connection closed without BYE) to the
    // job's other processes, which hand it to ULFM: a path beside PRRTE's own notices.
    bool pass_on_losses = true;
    // A node whose every rank fell silent this long while other nodes' heartbeats kept arriving
    // is lost (the launcher's node liveness; direct launch, docs/slurm.md "Direct launch").
    // Separate from hang_timeout_ms, which judges one rank's progress.
    int node_timeout_ms = 1000;
};

// How the MPI job's processes talk (docs/config.md, "mpi"); tools/fr-mpirun turns it into MCA flags.
//   tcp   btl tcp,self: every byte over TCP, loopback inside a node.
//   shm   btl tcp,sm,self (shared memory inside a node, TCP between nodes); a rank's non-zero
//         exit reaches ULFM through PRRTE's notice (ft/exit_notices.hpp, docs/ulfm-traps.md
//         trap 1), not through a socket.
//   auto  the fastest of them that passes the ulfm conformance set here (fr-mpirun decides).
// detector: Open MPI's in-band heartbeat failure detector (shm only; off by default: it
// declared live ranks failed on a loaded machine, trap 11, and nothing needs it since the notices).
// yield_when_idle: whether a waiting rank gives its core away (Open MPI's mpi_yield_when_idle)
//   auto   Open MPI's choice: under mpirun, yes when PRRTE finds a node oversubscribed (more
//          ranks than slots); under srun (direct launch), never
//   true   always: for more ranks than cores where neither can see it (nodes that share one
//          machine, as the Slurm test cluster's do); flashrec's own waits then sleep too
//   false  off (busy-polling: the lowest latency when every rank has a core; an oversubscribed
//          mpirun still makes its ranks yield)
struct Mpi {
    std::string transport = "auto";
    std::string yield_when_idle = "auto";
    bool detector = false;            // mpi_ft_detector on (shm)
    int detector_period_ms = 200;     // heartbeat period of the in-band detector (shm)
    int detector_timeout_ms = 2000;   // a peer silent this long is declared failed (shm)
};

struct Recovery {
    int phase_deadline_ms = 10000;    // each recovery phase must finish within this
    int max_epochs = 3;               // failed epochs in a row before the job is ended (tier 2)
    bool spawn = true;                // cold spares by MPI_Comm_spawn when no hot spare is left
    int warm_relaunches = 2;          // tier-2 attempts by the launcher
    // A restore onto another platform (CPU model or flags, GPU, flashrec or trainer build than
    // the state's writer): false warns (platform_mismatch record), true ends the job (exit 81).
    bool require_same_platform = false;
    // How a group's NCCL communicator is repaired (GPU path): auto (shrink + grow where the NCCL
    // loaded has it, 2.29.2+, else abort + re-init) | shrink_grow | reinit (forced fall-back).
    std::string nccl_repair = "auto";
};

struct Slurm {
    bool drain_on_failure = true;
    std::string drain_reason = "flashrec: {classification} at step {step}";
    std::string when_spares_exhausted = "shrink";  // shrink | checkpoint-and-requeue
    // Who starts the ranks inside an allocation: mpirun (PRRTE's daemons) or srun (direct
    // launch: every rank and hot spare a task of one `srun --mpi=pmix` step; docs/slurm.md,
    // "Direct launch"). srun needs recovery.spawn: false (no MPI_Comm_spawn without PRRTE).
    // auto: srun when recovery.spawn is false, launch.mpirun_args is empty and
    // job.ranks_per_node is 1, else mpirun (direct_launch_chosen).
    std::string launch = "mpirun";
};

struct Logging {
    std::string level = "info";       // debug | info | warn | error
    std::string events;               // JSON-lines event log; empty: <name>.events.jsonl
    bool progress = true;
};

// The same values as flashrec::Phase (the runtime casts between them), then protection_start
// (protection (re)starting from version `step`, before the exchange of snapshot layouts: a job's
// start, or the end of a repair), then the points after
// the job's last step, which only fault injection names: the end-of-loop check (loop_end), the
// trainer's code after the loop (after_loop), the runtime's end before the role_finished
// record (finish) and after the launcher acknowledged it, before MPI_Finalize (finalize).
enum class Phase { forward, allreduce, sync, optimizer, replication, recovery, tp_exchange, pp_exchange,
                   protection_start, loop_end, after_loop, finish, finalize };
// A fault at a point after the last step names step job.steps - 1.
enum class Action { kill, exit, stop };

// One injected fault, from `faults:` in train.yaml or a --fault option (docs/config.md):
//   role=<dp>[,<tp>,<pp>]|role=spare:<i> :step=<N> [:phase=<forward|allreduce|sync|optimizer|
//   replication|recovery|tp_exchange|pp_exchange|protection_start|loop_end|after_loop|finish|finalize>]
//   [:action=<kill|exit[=<code>]|stop>]
// Parts are separated by ':' and may come in any order; phase defaults to forward, action to kill.
struct Fault {
    bool spare = false;               // target hot spare number `spare_index` instead of a role
    int spare_index = 0;
    int dp = 0, tp = 0, pp = 0;
    std::int64_t step = 0;
    Phase phase = Phase::forward;
    Action action = Action::kill;
    int exit_code = 1;
    std::string text;                 // as written, for logs
};

struct Config {
    std::string path;                 // the file it came from
    Job job;
    Launch launch;
    YAML::Node trainer;               // passed through to the trainer untouched
    Protection protection;
    Checkpoint checkpoint;
    Detection detection;
    Mpi mpi;
    Recovery recovery;
    Slurm slurm;
    Logging logging;
    std::vector<Fault> faults;
};

// `mpi` with the environment's overrides applied (FLASHREC_TRANSPORT, FLASHREC_DETECTOR_PERIOD_MS,
// FLASHREC_DETECTOR_TIMEOUT_MS; unset or empty: train.yaml's). `getenv` looks a variable up;
// throws ConfigError (naming the variable) on a value train.yaml would refuse.
Mpi with_environment(const Mpi& mpi, const std::function<const char*(const char*)>& getenv);
// What tools/fr-mpirun reads, as (variable, value): the transport and the detector's settings.
std::vector<std::pair<std::string, std::string>> wrapper_variables(const Mpi& mpi);

// Parses and validates; throws flashrec::ConfigError naming file, line and field.
Config load(const std::string& path);
Config parse(const std::string& yaml_text, const std::string& path_for_messages);
// One --fault spec (the same grammar as the faults: list); `where` names its origin.
Fault parse_fault(const std::string& spec, const std::string& where);
// Checks a fault's role against the job's shape (dp/tp/pp, hot_spares); `parse` does this for
// the faults: list, a caller of parse_fault does it once the job is known. With `protection`,
// also that a replication-phase fault names a step that is snapshotted (protection.every).
void validate_fault(const Fault& fault, const Job& job, const std::string& where, const Protection& protection = {});
std::string to_string(Phase p);
std::string to_string(Action a);

// slurm.launch resolved for a start inside an allocation: true = direct launch (srun). `auto`
// takes it where nothing the config asks for needs mpirun: no spawned spares (MPI_Comm_spawn has
// no server under srun) and no launch.mpirun_args (mpirun's own flags, which srun would drop).
// Any ranks_per_node: a rank's death on a shared node no longer ends the step (ulfm-traps.md,
// trap 17, ft/pmix_connection_keeper.hpp).
bool direct_launch_chosen(const Config& config);

}  // namespace flashrec::config
