// The Runtime's insides, shared by the files of the runtime module (never installed).
#pragma once
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "flashrec/flashrec.hpp"
#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/control_plane.hpp"
#include "flashrec/ft/exit_notices.hpp"
#include "flashrec/ft/progress_ticker.hpp"
#include "flashrec/ft/protection.hpp"
#include "flashrec/ft/quarantine.hpp"
#include "flashrec/ft/records.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/ft/watchdog.hpp"
#include "flashrec/runtime/checkpointing.hpp"
#include "flashrec/runtime/recovery_plan.hpp"
#include "flashrec/runtime/config.hpp"
#include "flashrec/runtime/deterministic_end.hpp"
#include "flashrec/runtime/device_path.hpp"
#include "flashrec/runtime/fault_injector.hpp"
#include "flashrec/runtime/interval.hpp"
#include "flashrec/runtime/membership.hpp"
#include "flashrec/runtime/platform.hpp"
#include "flashrec/runtime/state_registry.hpp"
#include "flashrec/runtime/topology.hpp"
#include "flashrec/spares/spares.hpp"

namespace flashrec {

// MPI_Init_thread / MPI_Finalize, first member of Impl so it is torn down last.
// When the Runtime is destroyed by an exception, MPI_Finalize is skipped: it could block on
// peers that are gone, and the launcher must see this process fail.
struct MpiSession {
    MpiSession(int& argc, char**& argv);
    ~MpiSession();
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;
    // Stops the ticker (its thread's MPI calls must end first), then MPI_Finalize. Every path
    // that ends MPI goes through here: a released spare's MPI_Iprobe after MPI_Finalize was
    // fatal ("MPI_Iprobe on a NULL communicator", mpirun exit 14) over shm.
    void finalize();
    // More MPI processes on this host than it has cores online: Open MPI then yields when
    // idle (mpi_yield_when_idle), and flashrec's waits must not spin either.
    bool host_oversubscribed = false;
    // Open MPI's in-band failure detector, as MPI was started (the transport's MCA flags).
    ft::InBandDetector detector;
    // With that detector on (without its own thread), MPI progress while the trainer computes:
    // from MPI init to just before MPI_Finalize.
    std::optional<ft::ProgressTicker> ticker;
    // PRRTE's notice of a non-zero exit passed to ULFM (trap 1): from MPI init to MPI_Finalize.
    std::optional<ft::ExitNotices> exit_notices;
};

struct Runtime::Impl {
    Impl(int& argc, char**& argv, const std::string& config_path);

    MpiSession mpi;
    config::Config cfg;
    topology::Shape shape;
    int world_rank = -1;
    bool original = true;        // started with the job (not a spare that took a role later)
    std::string node_name;       // this process's node ("node1" on virtual nodes, or the host)
    bool virtual_nodes = false;  // one machine standing in for job.nodes nodes
    std::vector<std::string> start_args;  // as started: what a spawned replacement runs
    std::int64_t process_id = 0; // stable across repairs: hot spares are used in this order
    int hot_spare_index = -1;    // i of a hot spare started with the job (role=spare:<i>); -1 otherwise
    spares::Pool spare_pool;     // parked hot spares, as ranks in membership.universe
    runtime::Membership membership;  // role, node map, epoch and this epoch's communicators

    std::unique_ptr<ft::Protection> protection;
    // The version of the last snapshot started (protection.every: not every step's); its sync
    // point waits for it.
    std::int64_t snapshot_version = -1;
    // Starts snapshot `version` of the live state when protection.every asks for it.
    void snapshot_if_due(std::int64_t version);
    // protection.every = auto (interval_choice.hpp): the k in use, the same on every active role:
    // reset to auto_start_every() by every resume, changed only by choose_interval() at a
    // multiple of protection.max_every, from measurements combined across the active roles.
    struct {
        std::int64_t every = 1;
        std::int64_t resumed_at = -1;  // the first step after a resume carries its set-up: not a sample
        std::int64_t before_resume = 1;  // the k in use when the last repair began (its record says it)
        bool reported = false;  // the first measured choice since the resume was recorded (kept or not)
    } interval;
    std::int64_t every_now() const { return cfg.protection.every_auto() ? interval.every : cfg.protection.every; }
    // The step `index` took `ms`: a sample of a step with or without a snapshot.
    void note_step_time(std::int64_t index, double ms);
    // At a multiple of max_every under auto: one collective decision of k (a failure during it
    // abandons the loop's way on like a step's: the caller repairs).
    void choose_interval(std::int64_t version);

    // After a repair, the versions beyond the one restored that this process's stores held
    // committed before it: when the replay commits the same version again its checksums must
    // match (docs/snapshots.md, "Checking that replay is exact").
    struct ReplayCheck {
        std::string store;              // segment key: the own store or a ring copy
        ft::CommittedHeader before;     // as committed before the failure
    };
    std::multimap<std::int64_t, ReplayCheck> replay_checks;  // by version
    std::int64_t replay_from = -1;      // the version the replay started from
    void note_versions_to_replay(std::int64_t restored);
    // At the sync point of step `version`, once its snapshot is committed here.
    // Returns false when a version this process rewrote hashes differently (it logged and emitted
    // replay_diverged).
    bool check_replayed(std::int64_t version);

    // The start-up replay probe (protection.replay_check: start; interval.hpp's ReplayProbe): armed
    // by a fresh start, it rewinds the loop once at the first snapshotted version and judges at
    // that version's sync point; a repair before the verdict disarms it.
    runtime::ReplayProbe replay_probe;
    std::chrono::steady_clock::time_point probe_rewound_at;
    double probe_restore_ms = 0;
    void arm_replay_probe(std::int64_t from);
    // In loop_next, right after snapshot `step` started: waits for it, restores version
    // replay_probe.from from the own snapshot and sets the step back to it. A failure while it
    // waits abandons the step (the caller repairs, which disarms the probe).
    void rewind_for_replay_probe();
    // At the verdict's sync point, with every role's answer: passes (role 0's replay_probe record)
    // or refuses the job on every role (exit 78, replay_probe record, segments removed).
    void judge_replay_probe(bool everyone_exact);
    // What transfers of an aborted epoch may still read or write: retired Protection objects,
    // the snapshot readers and stores restores were sent from, replacements' staging buffers
    // and the restore transfers themselves. Freed after several clean steps.
    ft::Quarantine quarantine;
    // The snapshot stores of this process, kept mapped across repairs (docs/snapshots.md).
    std::shared_ptr<ft::StorePool> stores = std::make_shared<ft::StorePool>();
    bool blanks_made = false;  // a hot spare made its stores' slots ahead (make_blank_slots)
    std::jthread blank_maker;  // after `stores`: joined before the pool goes
    std::jthread nccl_warmer;  // a parked hot spare's NCCL set-up (DevicePath::warm_up_nccl)
    int blanks_taken_before_repair = 0;  // stores->blanks_taken() when the last repair began
    void retire_protection();
    std::vector<int> held_roles;  // whose payloads this process kept (for recovery reports)
    std::unique_ptr<runtime::Checkpointer> checkpointer;
    ft::Watchdog watchdog;

    // Recovery. The running epoch's phases until its outcome is applied; from then on they are
    // the outcome's (last_recovery->timeline). A retried epoch begins this one again.
    recovery::Timeline timeline;
    // The last recovery's outcome, reported after the first step that follows it.
    std::optional<recovery::Outcome> last_recovery;
    bool restore_pending = false;              // this process took a dead role: loop_start restores
    std::int64_t restore_version = -1;
    // What the job-end summary reports (DP rank 0 prints it as a "job_stats" event).
    struct {
        std::vector<double> step_ms;          // wall time of each completed step
        std::vector<double> exposed_wait_ms;  // sync-point wait for the previous snapshot, per step
        // Steps that snapshotted their starting version and steps that did not (not the first
        // after a resume): what protection.every = auto chooses from, and job_stats reports.
        std::vector<double> protected_ms, unprotected_ms;
        std::chrono::steady_clock::time_point step_start;
    } stats;
    void emit_job_stats(std::size_t shm_bytes, const ft::SnapshotTiming& snapshot,
                        const ft::SnapshotTiming& totals, std::size_t snapshots);

    // the buffers registered with protect(); a refused one is noted as a deterministic error
    runtime::StateRegistry state{[this](const Error& e) { deterministic_end.noted(e); }};
    runtime::FaultInjector faults;

    // GPU path (runtime::DevicePath; the functions below bind it to this process's buffers and
    // step). Every one of them leaves host buffers to the CPU path's code (memcpy, MPI straight
    // into the buffer) exactly as without CUDA.
    runtime::DevicePath device;  // enabled by protect() (a device buffer) / set_compute_stream
    runtime::DevicePath::Step device_step();
    // Whether `data` is device memory: false at once on the CPU path (no CUDA call).
    bool is_device_pointer(const void* data) const;
    // Copies host bytes into the live buffers: sources[b] for each b in `which` (device
    // buffers), on the GPU, after the compute stream's work. Waits until they are in place.
    void restore_device_buffers(const std::vector<std::size_t>& which,
                                const std::vector<std::span<const std::byte>>& sources);
    // Buffer b's live bytes, copied to the host (after the compute stream's work).
    std::vector<std::byte> read_device_buffer(std::size_t b);
    // Checkpointer::restore into the live buffers, through host staging for device buffers.
    void restore_checkpoint(const std::string& role_key, std::int64_t version);
    // The job is failing: abort NCCL and tell the DP peers' NCCL waits. Never throws.
    void abort_device_collectives() noexcept;
    // Step collectives on device memory; false when `data` is host memory (CPU path).
    bool device_reduce_scatter(std::span<const float> grads, std::span<float> shard);
    bool device_allgather(std::span<float> full);
    bool device_allreduce(std::span<float> data);

    // Step state.
    std::int64_t step = 0;
    bool abandoned = false;
    ft::StepProgress progress;   // read by the heartbeat thread
    std::unique_ptr<ft::HeartbeatClient> heartbeat;  // only under flashrec-launch
    // Declared after heartbeat (destroyed before it): it can still send while an error unwinds.
    runtime::DeterministicEnd deterministic_end{[this](const std::string& why) {
        (void)emit_last(ft::records::EndingJob{ft::kExitDeterministicError, static_cast<std::int32_t>(::getpid()), why}
                            .to_json());
    }};
    std::vector<float> scratch;  // reduce_scatter receive area, reused across steps
    std::vector<float> tp_scratch;  // tp_allreduce: every TP peer's contribution (collectives.cpp)

    Role role() const;
    topology::Coord coord() const { return topology::coord_of(shape, membership.role_index); }
    void enter(Phase p, std::int64_t tag);
    // Called when a collective reports a failure: abandon the step, wake everyone.
    void on_failure(const std::exception& e);
    // Aborts the protection, checkpointer and NCCL, then revokes every communicator.
    void revoke_all() noexcept;
    // (Re)starts protection for the current topology; snapshot `version` of the live state.
    void start_protection(std::int64_t version);
    // Where the step loop goes on from, as a start, a repair or a relaunch leaves it: the live
    // buffers hold the state after step `step`; `first_version`: no snapshot of it is committed
    // anywhere yet (a fresh start, or a repair that found only the initial state).
    struct Resume {
        std::int64_t step = 0;
        bool first_version = false;
    };
    // The one place the loop takes a Resume up: the step, protection from it, and the first
    // version committed everywhere before the first step when it must be.
    void resume(const Resume& at);
    // The loop's end: every role got here alive (else the step is abandoned and the caller
    // recovers), job_stats sent, hot spares released. The segments stay (finish_job).
    void finish_loop();
    bool loop_finished = false;
    std::uint64_t final_state_checksum = 0;  // own_state_checksum() at the loop's end
    // From the destructor, after the trainer's code: this role's role_finished record to the
    // launcher, and once every role's is acknowledged, this node's segments removed. It must
    // not touch the trainer's buffers: they may be gone.
    void finish_job();
    // This role's protected state in one hash (each buffer's name and bytes), no MPI.
    std::uint64_t own_state_checksum();
    void drop_spare_blanks();  // a former hot spare: its blank maker stopped, untaken blanks unlinked
    void remove_node_snapshots();          // this node's segments of the job, by one process
    [[noreturn]] void checkpoint_and_leave();  // FLASHREC_CHECKPOINT_AND_EXIT after a relaunch
    // Runs an MPI collective of this step; on a process failure or revoke, abandons the step.
    // Any MPI error counts: under ULFM a collective that a failure interrupted may report
    // MPI_ERR_OTHER on some ranks and MPI_ERR_PROC_FAILED on others (seen here).
    template <class F>
    void guarded(F&& collective) {
        if (abandoned) return;
        try {
            collective();
        } catch (const MpiError& e) {
            on_failure(e);
        }
    }
    void log(const std::string& text) const;
    // (Re)registers with the launcher's control plane as this process's current role.
    void connect_control_plane();
    void send_event(const nlohmann::json& record);
    // A typed record (ft/records.hpp) for the launcher, and as a "flashrec-event:" line on
    // stderr for runs without one; `before_exit`: wait (bounded) until it is written.
    void emit(const nlohmann::json& record, bool before_exit = false);
    // The record this process leaves with (role_finished, ending_job), on stderr and to the
    // launcher, which acknowledges it (bounded wait): true when it did, or when there is none.
    bool emit_last(const nlohmann::json& record);

    // Recovery (recovery.cpp).
    // Snapshot segments are named per node, so virtual nodes on one machine never share them.
    std::string store_prefix() const;
    // The segment key of this role's own snapshot on this node, and of the ring copy of
    // `owner`'s payload that this role holds here.
    std::string own_segment() const;
    std::string held_segment(int owner) const;
    // Unlinks this role's own snapshot and the ring copies it holds on this node.
    void unlink_own_segments() const;
    recovery::Report report() const;
    // Every process's report, or CommRevoked everywhere. `agreed_on`: every member passed an
    // agree on `comm` (it may be revoked to release the others when the exchange fails here).
    std::vector<recovery::Report> exchange_reports(const ft::Comm& comm, bool agreed_on) const;
    // Repairs (retrying epochs) until this process can go on, or ends the job. A survivor gets
    // where to resume; nullopt: it has no state to go on from yet (an idle spare parks again, a
    // hot spare that took a role receives its state in loop_start).
    std::optional<Resume> recover();
    std::optional<Resume> recovery_epoch();
    void join_as_spawned();                // a spawned replacement, from the constructor
    // Role 0 of the repaired job records each spare the plan passed over (spare_rejected).
    void note_rejected_spares(int me, const recovery::Plan& plan, const std::vector<recovery::Report>& reports);
    // Plans the repair from every live process's report and returns this process's outcome
    // (or ends the job: no spare left; throws ShardLost: no state anywhere, no checkpoint).
    recovery::Outcome decide(int me, const std::vector<recovery::Report>& reports, std::string replacement);
    // The one place a recovery's outcome changes this process: role, membership, spare pool,
    // control-plane registration, the faults a new holder of a role takes over.
    void apply(ft::Comm next_universe, recovery::Outcome outcome);
    // decide + apply, then rebuild the communicators and restore (what recover() returns).
    std::optional<Resume> adopt_plan(ft::Comm new_universe, const std::vector<recovery::Report>& reports,
                    std::string replacement);
    void send_restore(const recovery::Plan& plan);
    void receive_restore();                // a replacement, from loop_start
    // Everyone: the restored-agree; a role holder gets where to resume (nullopt: an idle spare).
    std::optional<Resume> finish_recovery();
    void park_until_needed();              // a hot spare, from the constructor
    void make_blank_slots(const std::vector<std::size_t>& slot_bytes);  // parked: the leader's sizes
    [[noreturn]] void end_job(const std::string& why, int exit_code);
    // Tells the parked hot spares the job is over (a failure to reach them is logged: nothing to do).
    void release_hot_spares();
    std::chrono::steady_clock::time_point deadline() const;
    void emit_recovery_record();
    runtime::CheckpointIdentity checkpoint_identity() const;
    bool resume_requested = false;         // --resume: start from the newest HDF5 checkpoint
    bool relaunched = false;               // FLASHREC_RELAUNCH: tier 2, restore from node-local snapshots
    bool fresh_snapshots = true;           // first protection start of a new job: drop stale segments
    Resume warm_restore();                 // tier 2, from loop_start
    // Warm relaunch: reads every byte of the copies this process would restore or send for
    // plan.version; each that fails is logged, reported as an event and left out of the next
    // report (rejected_versions). Returns what failed ("" if all verified).
    std::string verify_restore_sources(const recovery::Plan& plan);
    std::map<std::string, std::set<std::int64_t>> rejected_versions;  // segment key -> versions
    // No optimizer has run in this job incarnation: the state is the initial one (the
    // trainer's, or the --resume checkpoint's). A relaunched job never is (it restored a version).
    bool pristine = true;
    bool loop_started = false;  // protect() is refused from here on
    // The platform fingerprint (platform.hpp): this process's, and the runtime's own envelope
    // buffer, which carries the state writer's with every snapshot, ring copy and checkpoint.
    runtime::platform::Fingerprint own_platform;
    std::vector<std::byte> platform_bytes;
    void register_platform();  // loop_start, after the trainer's buffers, before any restore
    // After a restore, before protection rewrites a snapshot: the writer's fingerprint against
    // this process's. A difference is a platform_mismatch record, or (require_same_platform) the
    // end of the job with exit code 81. From then on the buffer holds this process's.
    void check_platform();
    // Before the first step (and again after a recovery that found no version): wait until the
    // starting version is committed everywhere, so that a failure in step 0 restores it from
    // memory like any later version. A failure meanwhile abandons the step (recovery follows).
    void protect_first_version();
};

}  // namespace flashrec
