// The typed records a rank sends to flashrec-launch (EVENT frames of the control plane) for the
// facts the launcher acts on: a step done, a fault fired, a checkpoint published, an in-job
// recovery, the job's statistics, a rank ending the job with an exit code, an MPI error seen, a
// hot spare released. Each is a struct with to_json()/from_json() here and nowhere else; the
// launcher classifies from these and the exit codes, never from the ranks' log lines, which
// stay for people. Runs without a launcher get the same JSON on stderr (event_line()).
// Field tables: docs/contract.md, "Records". Internal: not part of the public flashrec.hpp.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashrec/errors.hpp"

namespace flashrec::ft::records {

// Every typed record carries "v": kVersion. A reader refuses a version it does not know rather
// than guess at a record written by another flashrec.
inline constexpr int kVersion = 1;

// A record that is not what its event name promises: names the event and the field.
class RecordError : public Error {
public:
    RecordError(std::string event, std::string field, const std::string& problem);
    const std::string& event() const noexcept { return event_; }
    const std::string& field() const noexcept { return field_; }

private:
    std::string event_, field_;
};

using PhasesMs = std::map<std::string, double>;

// The leader after each completed step.
struct Step {
    static constexpr char kEvent[] = "step";
    std::int64_t step = 0;
    std::optional<double> loss;  // absent when the trainer reports none (NaN is sent as absent)
    nlohmann::json to_json() const;
    static Step from_json(const nlohmann::json& j);
    bool operator==(const Step&) const = default;
};

// A fault of the fault injector fired in this process; sent (and flushed) before the action.
struct FaultInjected {
    static constexpr char kEvent[] = "fault_injected";
    std::string fault;           // the spec as written
    std::int32_t pid = 0;
    std::int64_t unix_us = 0;    // wall clock when it fired (detection latency is measured from it)
    std::string action;          // "kill" | "exit" | "stop"
    int exit_code = 0;           // for "exit"
    std::int64_t step = 0;       // the spec's step: the step it fired in (a parked spare's: its spec's)
    std::string phase;           // the phase it fired in
    nlohmann::json to_json() const;
    static FaultInjected from_json(const nlohmann::json& j);
    bool operator==(const FaultInjected&) const = default;
};

// An HDF5 checkpoint was published (by the checkpoint's rank 0).
struct CheckpointPublished {
    static constexpr char kEvent[] = "checkpoint";
    std::int64_t step = 0;       // the version it holds (steps completed)
    std::string path;            // its directory
    std::int64_t files = 0;
    std::int64_t bytes = 0;
    double seconds = 0;          // from the snapshot to published
    nlohmann::json to_json() const;
    static CheckpointPublished from_json(const nlohmann::json& j);
    bool operator==(const CheckpointPublished&) const = default;
};

// The job resumed from an HDF5 checkpoint (--resume; by role 0, before its first step).
struct CheckpointResumed {
    static constexpr char kEvent[] = "checkpoint_resumed";
    std::int64_t step = 0;       // the version it holds (steps completed)
    std::string dir;             // checkpoint.dir it was read from
    nlohmann::json to_json() const;
    static CheckpointResumed from_json(const nlohmann::json& j);
    bool operator==(const CheckpointResumed&) const = default;
};

// A rank ends the job on purpose and asks for a tier with its exit code (contract.hpp: 75, 76,
// 77); sent and flushed just before it _exits with that code.
struct EndingJob {
    static constexpr char kEvent[] = "ending_job";
    int exit_code = 0;
    std::int32_t pid = 0;
    std::string why;             // for people: what happened (at most 2000 bytes are sent)
    // The dead roles this end answers (77: no spare for them): the launcher counts their losses
    // as the failure, where other ranks leaving an ending job are no failure.
    std::vector<std::string> lost_roles;
    nlohmann::json to_json() const;
    static EndingJob from_json(const nlohmann::json& j);
    bool operator==(const EndingJob&) const = default;
};

// A role's process is done: its step loop ended after the job's last step and the trainer's
// code after the loop returned. Sent by every active role just before MPI_Finalize; the
// launcher acknowledges it (a RECORD_ACK frame) and judges "finished" from these records
// alone, whatever mpirun's exit status and whenever it exits.
struct RoleFinished {
    static constexpr char kEvent[] = "role_finished";
    std::string role;            // "dp1.tp0.pp0"
    std::int32_t pid = 0;
    std::int64_t steps = 0;      // steps completed (the job's job.steps)
    std::string checksum;        // this role's own state (16 hex digits; not the job's checksum)
    nlohmann::json to_json() const;
    static RoleFinished from_json(const nlohmann::json& j);
    bool operator==(const RoleFinished&) const = default;
};

// A rank noticed a failure through an MPI error (its first one in a step).
struct MpiErrorSeen {
    static constexpr char kEvent[] = "mpi_error";
    std::int32_t pid = 0;
    int error_class = 0;
    std::string operation;
    nlohmann::json to_json() const;
    static MpiErrorSeen from_json(const nlohmann::json& j);
    bool operator==(const MpiErrorSeen&) const = default;
};

// A hot spare was released at the end of the job (it leaves; not a failure).
struct SpareReleased {
    static constexpr char kEvent[] = "spare_released";
    std::int32_t pid = 0;
    nlohmann::json to_json() const;
    static SpareReleased from_json(const nlohmann::json& j);
    bool operator==(const SpareReleased&) const = default;
};

// An in-job recovery (tier 1, or 3 from HDF5 in-job) or the ranks' side of a warm relaunch
// (replacement "relaunch"), from role 0 after the first step that followed it.
struct Recovery {
    static constexpr char kEvent[] = "recovery";
    int tier = 1;
    int epoch = 0;
    std::vector<std::string> failed_roles;
    std::string replacement;     // hot | spawned | hot+spawned | none | relaunch
    std::int64_t recovery_version = 0;
    std::int64_t resume_step = 0;
    std::int64_t steps_replayed = 0;
    std::int64_t bytes_restored_per_replacement = 0;
    PhasesMs phases_ms;          // role 0's
    double total_ms = 0;
    std::map<std::string, PhasesMs> phases_ms_by_role;
    PhasesMs phases_ms_max;      // per phase, the slowest rank's
    std::string slowest_role;
    PhasesMs phases_ms_slowest;
    std::int64_t failure_noticed_unix_us = 0;
    std::int64_t back_in_loop_unix_us = 0;
    double first_step_ms = 0;
    // Snapshot slots the replacements took from those they made ahead while parked (hot
    // spares, StorePool blanks); any other new slot was created in their first snapshot.
    std::int64_t slots_made_ahead = 0;
    std::optional<double> notice_to_loop_ms;
    // protection.every, and what replaying steps_replayed steps costs at the median step time
    // (absent when steps_replayed is -1: a warm relaunch, where the launcher counts them).
    std::int64_t protection_every = 1;
    std::optional<double> replay_ms;
    nlohmann::json to_json() const;
    static Recovery from_json(const nlohmann::json& j);
    bool operator==(const Recovery&) const = default;
};

// The leader's statistics at the end of the step loop (its arrival also says the loop ended).
struct JobStats {
    static constexpr char kEvent[] = "job_stats";
    std::string role;
    std::int64_t steps = 0;
    double median_step_ms = 0;
    double median_exposed_wait_ms = 0;
    double total_exposed_wait_ms = 0;
    bool protection = false;
    std::int64_t state_bytes = 0;
    std::int64_t shm_bytes = 0;
    double snapshot_ms = 0;
    std::int64_t snapshot_copied_bytes = 0;
    std::int64_t snapshot_sent_bytes = 0;
    std::int64_t snapshots = 0;
    double snapshot_mean_ms = 0;
    double snapshot_cpu_ms = 0;
    double snapshot_copy_GBps = 0;
    double snapshot_copy_cpu_GBps = 0;
    double snapshot_d2h_GBps = 0;  // a device copier's D2H on the GPU's clock; 0 on the host path
    double replication_GBps = 0;
    double replication_oncpu_GBps = 0;  // without the protection thread's wait for a core
    double sender_touched_per_byte = 0;  // the pipeline's passes (copy, hash)
    double sender_touched_incl_send_per_byte = 0;  // and the transport's read of what is sent
    double holder_touched_per_byte = 0;
    double hashed_in_cache_per_byte = 0;
    // Own-state bytes hashed on the GPU before they were copied, per byte copied (1 when every
    // protected buffer is on the device and protection.device_hash is on; 0 on the host path).
    double hashed_at_source_per_byte = 0;
    std::int64_t protection_every = 1;  // snapshots are of every this many versions (under auto: the last k)
    bool protection_auto = false;       // protection.every = auto chose it
    // Median steps that snapshotted their starting version and that did not (absent: none ran).
    std::optional<double> protected_step_ms;
    std::optional<double> unprotected_step_ms;
    // The mean step after the first (which carries the set-up): under protection.every = k the
    // median hides the snapshotting steps, the mean spreads them (absent: one step or none).
    std::optional<double> mean_step_ms;
    nlohmann::json to_json() const;
    static JobStats from_json(const nlohmann::json& j);
    bool operator==(const JobStats&) const = default;
};

// A version replayed after a repair hashes differently from the same version committed before
// the failure: the trainer's steps are not deterministic (data not drawn from data_seed(), or
// state that changes across steps kept outside protect()). By the process that holds `store`.
struct ReplayDiverged {
    static constexpr char kEvent[] = "replay_diverged";
    std::string role;      // this process's role
    std::string store;     // the snapshot store compared: the own one or a ring copy ("<owner>@<holder>")
    std::int64_t step = 0; // the version (the state before step `step`)
    std::int64_t restored_version = 0;  // the version the replay started from
    std::string buffer;    // the first buffer that differs
    std::string before;    // its checksum before the failure (hex)
    std::string replayed;  // and after the replay (hex)
    nlohmann::json to_json() const;
    static ReplayDiverged from_json(const nlohmann::json& j);
    bool operator==(const ReplayDiverged&) const = default;
};

// The start-up replay probe (protection.replay_check: start, docs/snapshots.md): the job restored
// version `from` once, replayed the steps up to the first snapshotted version `to`, and compared
// that version's hashes with those committed in the first pass. By role 0; `passed` false: some
// role's replay diverged (its replay_diverged record names the buffer) and the job was refused
// (every role ends with exit 78). The ms figures are role 0's: the probe's cost.
struct ReplayProbe {
    static constexpr char kEvent[] = "replay_probe";
    std::int64_t from = 0;       // the version restored
    std::int64_t to = 0;         // the version compared
    std::int64_t steps = 0;      // steps replayed (to - from)
    bool passed = false;
    double restore_ms = 0;       // restoring `from` from the own snapshot
    double replay_ms = 0;        // the replayed steps, up to the compared version's sync point
    nlohmann::json to_json() const;
    static ReplayProbe from_json(const nlohmann::json& j);
    bool operator==(const ReplayProbe&) const = default;
};

// A role's state was restored on a platform other than the one that wrote it (runtime/platform.hpp:
// CPU model and flags, GPU model, flashrec and trainer build): its steps may compute other bits.
// By the restoring process, before its first step; `refused`: recovery.require_same_platform is
// set and the process ends the job with exit code 81 (contract.hpp) right after.
struct PlatformMismatch {
    static constexpr char kEvent[] = "platform_mismatch";
    struct Field {
        std::string field;   // cpu_model | cpu_flags | gpu_model | flashrec_build | trainer_build
        std::string writer;  // the value recorded with the state restored
        std::string here;    // this process's
        bool operator==(const Field&) const = default;
    };
    std::string role;
    std::int32_t pid = 0;
    std::string restore;           // in_job | relaunch | checkpoint: where the state came from
    std::int64_t version = 0;      // the version restored (steps completed)
    std::string flashrec_version;  // this process's flashrec
    std::vector<Field> differences;
    bool refused = false;
    nlohmann::json to_json() const;
    static PlatformMismatch from_json(const nlohmann::json& j);
    bool operator==(const PlatformMismatch&) const = default;
};

// A spare failed its admission health check in a recovery (its /dev/shm cannot hold the role's
// snapshot slots, or its GPU does not work) and was passed over: the next spare, a spawned one
// or the out-of-spares path takes the role. By role 0 of the repaired job, one per spare.
struct SpareRejected {
    static constexpr char kEvent[] = "spare_rejected";
    std::string spare;        // "spare:<process id>"
    std::string node;
    std::string reason;
    std::int64_t epoch = 0;   // the recovery epoch that passed it over
    nlohmann::json to_json() const;
    static SpareRejected from_json(const nlohmann::json& j);
    bool operator==(const SpareRejected&) const = default;
};

// protection.every = auto chose another k, at a period boundary, one decision for all active
// roles (from measurements combined across them). By role 0.
struct ProtectionInterval {
    static constexpr char kEvent[] = "protection_interval";
    std::int64_t step = 0;       // the first version it applies to (a multiple of max_every)
    std::int64_t every = 1;      // the k chosen
    std::int64_t previous = 1;   // the k before
    std::optional<double> step_ms;            // median step without a snapshot (absent: none yet)
    std::optional<double> protected_step_ms;  // median step with one
    double exposed_ms = 0;       // what one snapshot adds to its step
    double overhead = 0;         // exposed_ms / (every x step_ms)
    double budget = 0;           // protection.overhead_budget
    std::int64_t max_every = 0;
    std::string reason;
    nlohmann::json to_json() const;
    static ProtectionInterval from_json(const nlohmann::json& j);
    bool operator==(const ProtectionInterval&) const = default;
};

// Checks a record whose "event" names one of the records above (throws RecordError naming the
// event and field: a wrong type, a missing field, an unknown "v"). Records of other names (a
// trainer's own events) are not checked here.
void validate(const nlohmann::json& record);
// true: "event" names one of the records above.
bool is_typed(std::string_view event);

// "flashrec-event: {json}": the record on one line of stderr, for runs without a launcher
// (tools/frlib.py reads these lines; the launcher never does: it gets the record itself).
inline constexpr std::string_view kLinePrefix = "flashrec-event: ";
std::string event_line(const nlohmann::json& record);

}  // namespace flashrec::ft::records
