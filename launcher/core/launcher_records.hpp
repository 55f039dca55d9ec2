// The launcher's own records in the job's event log (docs/launcher.md, "Records the launcher
// writes"): one struct per kind, its fields as members. Each is written from its field table
// (launcher_records.cpp, with ft/record_fields.hpp, the machinery the ranks' records use), so the
// JSON holds exactly the table's fields. The core's LogRecord effect carries them as values and
// the scenario tests read their fields; the controller and the shell write theirs the same way.
// Pure: no I/O. The ranks' records (ft/records.hpp) are not here: the launcher passes them on.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace flashrec::launcher {

// Each record: kEvent (its "event" in the log) and to_json() (its other fields, from its table).
#define FLASHREC_LAUNCHER_RECORD(name)       \
    static constexpr char kEvent[] = name; \
    nlohmann::json to_json() const

// --- parts that several records share ---------------------------------------------------------

// Why a restart was asked for: the incident that ended the attempt.
struct RestartReason {
    int incident = 0;
    std::string classification;
    std::string detail;
    bool operator==(const RestartReason&) const = default;
};

// The phases of a warm relaunch or an HDF5 restart, in ms.
struct RestartPhases {
    double detect = 0;    // first evidence to the attempt judged dead
    double teardown = 0;  // ending every process of the dead attempt
    std::optional<double> launch;   // the new attempt started to every rank registered
    std::optional<double> restore;  // the ranks' own restore (their recovery record)
    std::optional<double> resumed;  // back in the step loop to its first step
};

// What a warm relaunch and an HDF5 restart both record.
struct RestartFigures {
    int tier = 0;  // 2 or 3
    int attempt = 0;
    RestartReason reason;
    std::string outcome;  // "resumed" | "failed"
    RestartPhases phases_ms;
    std::int64_t steps_done_before = 0;
    std::int64_t died_unix_ms = 0;
    std::optional<std::int64_t> checkpoint_step;  // an HDF5 restart's checkpoint
    std::optional<double> total_ms;               // first evidence to resumed
    std::optional<std::int64_t> resumed_unix_ms;
    std::optional<nlohmann::json> rank_record;  // the ranks' recovery record, as they sent it
    std::optional<std::int64_t> restored_version;
    std::optional<std::int64_t> steps_replayed;
};

// A rank the controller found hung, lost or superseded (controller.hpp's RankIncident).
struct RankIncidentFields {
    std::string role;
    std::string hostname;
    int world_rank = 0;
    int pid = 0;
    std::string reason;
    std::int64_t last_step_tag = 0;
    std::int64_t detection_latency_ms = 0;
};

// --- the core's records (JobCore and its parts) ------------------------------------------------

// Every active role registered and is in its step loop.
struct JobRunning {
    FLASHREC_LAUNCHER_RECORD("job_running");
    int attempt = 0;
    std::string kind;
    double startup_ms = 0;
    double registered_ms = 0;
};

// Not every active role registered within detection.startup_timeout_ms.
struct StartupStuck {
    FLASHREC_LAUNCHER_RECORD("startup_stuck");
    int attempt = 0;
    std::int64_t limit_ms = 0;
    std::int64_t registered = 0;
    std::int64_t active = 0;
    std::map<std::string, std::vector<std::string>> missing_by_node;  // node -> roles
};

// Every rank of the attempt left, mpirun did not exit: it is ended.
struct MpirunLingered {
    FLASHREC_LAUNCHER_RECORD("mpirun_lingered");
    int attempt = 0;
    int pid = 0;
    std::string rule;  // "every_process_accounted_for" | "grace_expired"
    std::int64_t grace_ms = 0;
    double since_last_rank_ms = 0;
};

// PRRTE lost its daemon on the spare node a replacement was spawned onto.
struct SpawnDaemonLost {
    FLASHREC_LAUNCHER_RECORD("spawn_daemon_lost");
    std::string node;
    int attempt = 0;
    std::string evidence;
};

// PRRTE lost a daemon while the job started: the node is suspect until checked.
struct DaemonLostStarting {
    FLASHREC_LAUNCHER_RECORD("daemon_lost_starting");
    std::string node;
    int attempt = 0;
    std::string evidence;
};

// A node lost (PRRTE's daemon, or the srun check after a suspect start).
struct NodeLost {
    FLASHREC_LAUNCHER_RECORD("node_lost");
    std::string node;
    int attempt = 0;
    std::string evidence;
    std::int64_t step = 0;  // steps completed
};

// A suspect node that srun still starts processes on: not counted lost.
struct DaemonLossUnconfirmed {
    FLASHREC_LAUNCHER_RECORD("daemon_loss_unconfirmed");
    std::string node;
    int attempt = 0;
};

// Slurm removed a node of the launch from the job.
struct NodeLeftAllocation {
    FLASHREC_LAUNCHER_RECORD("node_left_allocation");
    std::string node;
    int attempt = 0;
};

struct DrainSkipped {
    FLASHREC_LAUNCHER_RECORD("drain_skipped");
    std::string node;
    std::string why;
};

// The next attempt's layout without the nodes given up on.
struct NewLayout {
    FLASHREC_LAUNCHER_RECORD("relayout");
    struct Replaced {
        std::string node;
        std::string spare_node;
        bool operator==(const Replaced&) const = default;
    };
    RestartReason reason;
    std::vector<std::string> bad_nodes;
    std::vector<Replaced> replaced;
    std::vector<std::string> doubled_up;
    std::optional<std::string> policy;  // slurm.when_spares_exhausted when a node doubled up; null otherwise
    std::vector<std::string> nodes;
    std::vector<std::string> spare_nodes;
};

// A role now runs on another node (a replacement).
struct RoleMoved {
    FLASHREC_LAUNCHER_RECORD("role_moved");
    std::string role;
    std::string from;
    std::string to;
    int pid = 0;
};

// The job's last record: its outcome and figures.
struct JobEnd {
    FLASHREC_LAUNCHER_RECORD("job_end");
    struct Listed {
        int incident = 0;
        std::string role;
        std::string classification;
        std::string recovered_by;  // "" when not recovered
    };
    struct TimeLost {
        double total = 0;
        double hang_detection = 0;
        double in_job_recovery = 0;
        double relaunch = 0;
        double replayed_steps = 0;
    };
    std::string outcome;
    int exit_code = 0;
    std::string message;
    double wall_s = 0;
    std::int64_t steps_completed = 0;
    std::int64_t steps = 0;
    double steps_per_s = 0;
    std::int64_t failures = 0;
    std::vector<Listed> incidents;
    std::int64_t replacements_in_job = 0;
    std::int64_t hot_spares_used = 0;
    std::int64_t spawned = 0;
    int warm_relaunches = 0;
    int cold_restarts = 0;
    std::int64_t steps_replayed = 0;
    TimeLost time_lost_ms;
    std::int64_t checkpoints = 0;
};

// What a failure costs at the job's protection interval (runtime::failure_cost).
struct ExpectedFailureCost {
    FLASHREC_LAUNCHER_RECORD("failure_cost");
    struct Estimate {
        double expected_replayed_steps = 0;
        std::int64_t worst_replayed_steps = 0;
        double step_ms = 0;
        double expected_ms = 0;
        double worst_ms = 0;
        std::optional<double> restore_ms;
        std::optional<double> snapshot_exposed_ms;
        std::optional<double> overhead_ms_per_step;
        std::optional<double> saved_ms_per_step;
        std::optional<double> break_even_steps;
    };
    std::int64_t protection_every = 0;
    bool protection_auto = false;
    std::int64_t interval_changes = 0;
    Estimate estimate;
};

// A signal the launcher carries on after (SIGUSR1).
struct SignalIgnored {
    FLASHREC_LAUNCHER_RECORD("signal");
    int signal = 0;
    std::string action = "ignored";
};

// A signal that stops the job.
struct Interrupted {
    FLASHREC_LAUNCHER_RECORD("interrupted");
    int signal = 0;
};

// mpirun (or the srun step) exited; judged with the ranks' last records.
struct AttemptJudged {
    FLASHREC_LAUNCHER_RECORD("mpirun_exited");
    int attempt = 0;
    int pid = 0;
    std::string status;
    bool roles_finished = false;
    std::optional<int> exit_code;
    std::optional<int> signal;
    std::optional<std::string> note;
};

// A direct-launch first step none of whose ranks connected is started again.
struct StartRetried {
    FLASHREC_LAUNCHER_RECORD("start_retried");
    int attempt = 0;
    std::string status;
};

struct WarmRelaunchBeforeHdf5 {
    FLASHREC_LAUNCHER_RECORD("warm_relaunch_before_hdf5");
    int attempt = 0;
    std::string why;
};

struct WarmRelaunchRefused {
    FLASHREC_LAUNCHER_RECORD("warm_relaunch_refused");
    RestartReason reason;
    std::string why;
    int used = 0;
};

struct ColdRestartRefused {
    FLASHREC_LAUNCHER_RECORD("cold_restart_refused");
    RestartReason reason;
    std::string why;
};

// The same failure again after a restart with no new step: the job ends (exit 80).
struct RestartLoop {
    FLASHREC_LAUNCHER_RECORD("restart_loop");
    int incident = 0;
    int same_as = 0;
    std::string classification;
    std::int64_t step = 0;
    std::int64_t newest_step = 0;
    std::string restart;  // "warm_relaunch" | "cold_restart"
    std::string why;
};

struct CheckpointForRequeue {
    FLASHREC_LAUNCHER_RECORD("checkpoint_for_requeue");
    std::int64_t step = 0;
    std::string dir;
    int attempt = 0;
};

// An attempt started.
struct AttemptLaunched {
    FLASHREC_LAUNCHER_RECORD("launch");
    int attempt = 0;
    std::string kind;
    int pid = 0;
    std::vector<std::string> command;
    bool relaunch = false;
    bool resume = false;
    std::optional<std::vector<std::string>> mpirun_flags;
    std::optional<std::vector<std::string>> nodes;        // under Slurm
    std::optional<std::vector<std::string>> spare_nodes;  // under Slurm
    std::optional<std::string> role_of_rank;             // under Slurm
};

struct WarmRelaunch {
    FLASHREC_LAUNCHER_RECORD("warm_relaunch");
    int relaunch = 0;  // its number
    int of = 0;        // recovery.warm_relaunches
    RestartFigures figures;
};

struct ColdRestart {
    FLASHREC_LAUNCHER_RECORD("cold_restart");
    int restart = 0;  // its number
    RestartFigures figures;
};

// A failure the launcher saw (an incident).
struct Failure {
    FLASHREC_LAUNCHER_RECORD("failure");
    int incident = 0;
    int attempt = 0;
    std::string observed;
    std::string classification;
    std::string action;
    int tier = 0;
    std::string role;  // "*" for the whole job or a node
    std::optional<int> value;  // the exit code, signal or MPI error class observed
    std::optional<int> pid;
    std::optional<std::string> node;
    std::optional<std::string> detail;
    std::optional<std::int64_t> step;
    std::optional<double> detection_latency_ms;
    std::optional<double> since_injection_ms;
    std::optional<std::map<std::string, int>> mpi_error_classes_seen;  // class -> count
};

// A hung rank was SIGKILLed (or could not be).
struct HangKill {
    FLASHREC_LAUNCHER_RECORD("hang_kill");
    int incident = 0;
    std::string role;
    int pid = 0;
    std::string hostname;
    std::string result;  // KillOutcome
    std::string signal = "SIGKILL";
    std::int64_t detection_latency_ms = 0;
    std::optional<double> since_injection_ms;  // null when no fault record names it
};

// A rank killed as hung closed its connection.
struct KillConfirmed {
    FLASHREC_LAUNCHER_RECORD("kill_confirmed");
    std::string role;
    int pid = 0;
};

// A parked hot spare released at the end left without BYE (the launcher's note; the spare's own
// record is ft::records::SpareReleased).
struct ReleasedSpareLeft {
    FLASHREC_LAUNCHER_RECORD("spare_released");
    std::string role;
    int pid = 0;
};

// A stalled rank moved again (or left) before the stall was confirmed.
struct StallCleared {
    FLASHREC_LAUNCHER_RECORD("stall_cleared");
    std::string role;
    int pid = 0;
    std::int64_t last_step_tag = 0;
    std::optional<std::int64_t> step_tag_now;  // null: the rank is no longer there
    std::int64_t confirm_ms = 0;
};

// A rank whose connection was cut reconnected: no failure.
struct RankReconnected {
    FLASHREC_LAUNCHER_RECORD("rank_reconnected");
    std::string role;
    int pid = 0;
    double after_ms = 0;
};

// A rank lost with its node (the node's loss is the failure on record).
struct RankLostWithNode {
    FLASHREC_LAUNCHER_RECORD("rank_lost_with_node");
    std::string role;
    int pid = 0;
    std::string node;
};

// Every record the core writes: what its LogRecord effect carries.
using CoreRecord =
    std::variant<JobRunning, StartupStuck, MpirunLingered, SpawnDaemonLost, DaemonLostStarting, NodeLost,
                 DaemonLossUnconfirmed, NodeLeftAllocation, DrainSkipped, NewLayout, RoleMoved, JobEnd, ExpectedFailureCost,
                 SignalIgnored, Interrupted, AttemptJudged, StartRetried, WarmRelaunchBeforeHdf5, WarmRelaunchRefused,
                 ColdRestartRefused, RestartLoop, CheckpointForRequeue, AttemptLaunched, WarmRelaunch, ColdRestart, Failure,
                 HangKill, KillConfirmed, ReleasedSpareLeft, StallCleared, RankReconnected, RankLostWithNode>;

std::string_view event_of(const CoreRecord& record);
nlohmann::json fields_of(const CoreRecord& record);

// --- the controller's records (control/controller.cpp) -----------------------------------------

struct ControlPlaneListening {
    FLASHREC_LAUNCHER_RECORD("control_plane_listening");
    std::string endpoint;
    std::int64_t hang_timeout_ms = 0;
};

// What the node timeout had to judge (direct launch): each node's longest heartbeat silence as
// the controller received them, logged when it ends (bench/direct_launch/false_loss.py).
struct NodeSilence {
    FLASHREC_LAUNCHER_RECORD("node_silence");
    struct Node {
        std::string node;
        std::int64_t longest_silence_ms = 0;
        std::uint64_t heartbeats = 0;
        bool operator==(const Node&) const = default;
    };
    std::int64_t node_timeout_ms = 0;
    std::int64_t heartbeat_ms = 0;
    std::vector<Node> nodes;
};

// An error on the controller's thread, or on one connection (`peer`).
struct ControlPlaneError {
    FLASHREC_LAUNCHER_RECORD("control_plane_error");
    std::optional<std::string> peer;
    std::string what;
};

struct ConnectionDropped {
    FLASHREC_LAUNCHER_RECORD("connection_dropped");
    std::string peer;
    std::string reason;  // DropReason
    std::string detail;
};

struct ConnectionDropsUnlogged {
    FLASHREC_LAUNCHER_RECORD("connection_drops_unlogged");
    std::int64_t after = 0;
    std::string note = "further drops are only counted";
};

struct CallbackFailed {
    FLASHREC_LAUNCHER_RECORD("callback_failed");
    std::string callback;
    std::string what;
};

struct RankRegistered {
    FLASHREC_LAUNCHER_RECORD("rank_registered");
    std::string role;
    int world_rank = 0;
    int pid = 0;
    std::string hostname;
    std::string peer;
    std::optional<int> supersedes_pid;  // an active process of the role this one replaces
};

struct RankSupersededRecord {
    FLASHREC_LAUNCHER_RECORD("rank_superseded");
    RankIncidentFields incident;
};

struct RankLostRecord {
    FLASHREC_LAUNCHER_RECORD("rank_lost");
    RankIncidentFields incident;
};

struct RankHungRecord {
    FLASHREC_LAUNCHER_RECORD("rank_hung");
    RankIncidentFields incident;
};

// A rank's record refused: not a JSON object, or a typed record that is not what its name says.
struct EventRejected {
    FLASHREC_LAUNCHER_RECORD("event_rejected");
    std::optional<std::string> source;
    std::optional<std::string> record;
    std::string what;
};

struct RankExited {
    FLASHREC_LAUNCHER_RECORD("rank_exited");
    std::string role;
    int pid = 0;
    std::int64_t last_step_tag = 0;
};

struct RankLossPassedOn {
    FLASHREC_LAUNCHER_RECORD("rank_loss_passed_on");
    std::string role;
    std::string nspace;
    std::int64_t rank = 0;
    std::int64_t recipients = 0;
};

// The controller's node timeout: every rank of a node fell silent (not the core's NodeLost).
struct NodeFellSilent {
    FLASHREC_LAUNCHER_RECORD("node_lost");
    std::string node;
    std::vector<std::string> roles;
    std::int64_t silent_ms = 0;
    std::int64_t node_timeout_ms = 0;
    int evidence_heartbeats = 0;
};

struct ControllerPaused {
    FLASHREC_LAUNCHER_RECORD("controller_paused");
    std::int64_t ms = 0;
    std::string effect = "the ranks' hang timers were restarted";
};

struct AcceptFailed {
    FLASHREC_LAUNCHER_RECORD("accept_failed");
    std::string what;
};

// --- the shell's records (shell/supervisor.cpp) -------------------------------------------------

// The job's first record: what was started, with which settings.
struct JobStart {
    FLASHREC_LAUNCHER_RECORD("job_start");
    std::string job;
    std::string run_id;
    std::string config;
    std::string program;
    std::string launcher_version;
    std::string nccl_version;  // the NCCL flashrec was built with
    int launcher_pid = 0;
    std::string host;
    bool resume = false;
    std::vector<std::string> faults;
    std::int64_t steps = 0;
    int warm_relaunches_allowed = 0;
    std::string checkpoint_dir;
    int hang_timeout_ms = 0;
    int heartbeat_ms = 0;
    std::string transport;
    std::string events;
};

// The nodes with their ranks, the hot spares, the spare nodes.
struct JobLayout {
    FLASHREC_LAUNCHER_RECORD("layout");
    struct Shape {
        int dp = 0;
        int tp = 0;
        int pp = 0;
    };
    struct Rank {
        int rank = 0;
        std::string role;
    };
    struct Node {
        std::string node;
        std::vector<Rank> ranks;
    };
    struct HotSpare {
        int rank = 0;
        std::string role;
        std::string node;
    };
    Shape shape;
    int processes = 0;
    int active = 0;
    std::string placement;
    bool virtual_nodes = false;
    std::vector<Node> nodes;
    std::vector<HotSpare> hot_spares;
    std::vector<std::string> spare_nodes;
    std::string control;
    std::optional<std::string> metrics;  // null without a metrics server
};

struct AttemptTornDown {
    FLASHREC_LAUNCHER_RECORD("teardown");
    int attempt = 0;
    std::string why;
    double ms = 0;
    std::int64_t signalled = 0;
    bool complete = false;
    std::vector<int> left;  // pids that survived SIGKILL
};

struct AllocationUnknown {
    FLASHREC_LAUNCHER_RECORD("allocation_unknown");
    std::string job_id;
    std::string error;
};

// The srun check of suspect nodes: `unreachable` when it ran, `error` when it could not.
struct NodeCheck {
    FLASHREC_LAUNCHER_RECORD("node_check");
    std::vector<std::string> nodes;
    std::optional<std::vector<std::string>> unreachable;
    std::optional<double> ms;
    std::optional<std::string> error;
};

struct NodeDrained {
    FLASHREC_LAUNCHER_RECORD("node_drained");
    std::string node;
    std::string reason;
};

// A hung rank on another node killed there alone, through a step of the job (slurm::kill_task).
struct RemoteKill {
    FLASHREC_LAUNCHER_RECORD("remote_kill");
    std::string role;
    int pid = 0;
    std::string node;
    std::string result;  // slurm::to_string(TaskKill): killed, gone, not_of_job, unreachable
    double ms = 0;       // srun's time
    std::optional<std::string> error;  // Slurm not usable here
};

struct DrainFailed {
    FLASHREC_LAUNCHER_RECORD("drain_failed");
    std::string node;
    std::string reason;
    std::string error;
};

struct Requeue {
    FLASHREC_LAUNCHER_RECORD("requeue");
    std::string job_id;
    std::int64_t checkpoint_step = 0;
};

struct RequeueFailed {
    FLASHREC_LAUNCHER_RECORD("requeue_failed");
    std::string job_id;
    std::string error;
};

struct ShmCleanup {
    FLASHREC_LAUNCHER_RECORD("shm_cleanup");
    std::string job;
    std::int64_t segments_removed = 0;
};

#undef FLASHREC_LAUNCHER_RECORD

}  // namespace flashrec::launcher
