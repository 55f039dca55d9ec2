// The Runtime's insides, private to the runtime module: runtime.cpp (start, the loop, the end),
// step.cpp (the trainer's Step), recovery.cpp (in-job repair and warm relaunch) and restore.cpp
// (restore after a repair). Impl keeps who this process is, the job's config and shape, the
// membership and the parts that own their state, each in a file of its own: ProtectionRing
// (protection_ring.hpp), IntervalAuto, ReplayGuard, LauncherLink; ft::RestoreRound does a
// restore's transfers as ft::SnapshotRound does a snapshot's. docs/ARCHITECTURE.md, "Inside the
// runtime", draws them.
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
#include "flashrec/ft/restore_round.hpp"
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
#include "interval_auto.hpp"
#include "launcher_link.hpp"
#include "protection_ring.hpp"
#include "replay_guard.hpp"
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
    // More MPI processes on this host than it has cores online, or Open MPI told to yield
    // when idle (mpi.yield_when_idle: true): flashrec's waits must not spin either.
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

    // --- who this process is, the job it runs, who holds which role ------------------------------
    MpiSession mpi;  // first: torn down last
    config::Config cfg;
    topology::Shape shape;
    struct {
        int world_rank = -1;
        std::string node_name;       // this process's node ("node1" on virtual nodes, or the host)
        bool virtual_nodes = false;  // one machine standing in for job.nodes nodes
        std::vector<std::string> start_args;  // as started: what a spawned replacement runs
        std::int64_t process_id = 0;  // stable across repairs: hot spares are used in this order
        int hot_spare_index = -1;     // i of a hot spare started with the job (role=spare:<i>); -1 otherwise
    } self;
    struct {
        bool from_checkpoint = false;  // --resume: start from the newest HDF5 checkpoint
        bool relaunched = false;       // FLASHREC_RELAUNCH: tier 2, restore from node-local snapshots
    } started;
    spares::Pool spare_pool;         // parked hot spares, as ranks in membership.universe
    runtime::Membership membership;  // role, node map, epoch and this epoch's communicators

    // --- recovery's state (recovery.cpp) ---------------------------------------------------------
    // The running epoch's phases until its outcome is applied; from then on they are the
    // outcome's (last_recovery->timeline). A retried epoch begins this one again.
    recovery::Timeline timeline;
    // The last recovery's outcome, reported after the first step that follows it.
    std::optional<recovery::RepairOutcome> last_recovery;
    // The repair that gave this process a dead role (a hot spare or a spawned one), until
    // loop_start receives the role's state as its plan says (receive_state).
    std::optional<recovery::Plan> takeover;

    // --- the parts that own their state (a file each) --------------------------------------------
    runtime::ProtectionRing ring{cfg.job.name, self.node_name, shape, membership};
    runtime::IntervalAuto interval{cfg.protection};
    runtime::ReplayGuard replay{cfg.job.name, timeline.debug, [this](const std::string& line) { log(line); },
                                [this](const nlohmann::json& record) { launcher.emit(record); }};
    // What transfers of an aborted epoch may still read or write: retired Protection objects,
    // the snapshot readers and stores restores were sent from, replacements' staging buffers
    // and the restore transfers themselves. Freed after several clean steps.
    ft::Quarantine quarantine;
    std::jthread nccl_warmer;  // a parked hot spare's NCCL set-up (DevicePath::warm_up_nccl)
    std::unique_ptr<runtime::Checkpointer> checkpointer;
    ft::Watchdog watchdog;
    // The buffers registered with protect(); a refused one is noted as a deterministic error.
    runtime::StateRegistry state{[this](const Error& e) { launcher.deterministic_end.noted(e); }};
    runtime::FaultInjector faults;
    // GPU path: everything CUDA-specific, enabled by protect() (a device buffer) or
    // set_compute_stream. Host buffers never go there (the CPU path's memcpy and MPI).
    runtime::DevicePath device;
    // The platform fingerprint (platform.hpp): this process's, and the runtime's own envelope
    // buffer, which carries the state writer's with every snapshot, ring copy and checkpoint.
    struct {
        runtime::platform::Fingerprint own;
        std::vector<std::byte> bytes;
    } platform_stamp;

    // --- the step loop ---------------------------------------------------------------------------
    std::int64_t step = 0;
    bool abandoned = false;
    struct {
        bool entered = false;  // loop_start ran: protect() is refused from here on
        // No optimizer has run in this job incarnation: the state is the initial one (the
        // trainer's, or the --resume checkpoint's). A relaunched job never is (it restored a version).
        bool pristine = true;
    } loop;
    struct {
        std::vector<float> dp;  // reduce_scatter's receive area, reused across steps
        std::vector<float> tp;  // tp_allreduce: every TP peer's contribution
    } scratch;
    // Last: destroyed first, before the parts its callbacks reach.
    runtime::LauncherLink launcher{[this](const std::string& line) { log(line); }};

    // --- runtime.cpp: identity, protection, the loop's way on, the end ----------------------------
    Role role() const;
    topology::Coord coord() const { return topology::coord_of(shape, membership.role_index); }
    void log(const std::string& text) const;
    // (Re)registers with the launcher's control plane as this process's current role.
    void connect_control_plane();
    void enter(Phase p, std::int64_t tag);
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
    // Called when a collective reports a failure: abandon the step, wake everyone.
    void on_failure(const std::exception& e);
    // Aborts the protection, checkpointer and NCCL, then revokes every communicator.
    void revoke_all() noexcept;
    // Binds the device path's collectives to this process's DP group, epoch and step.
    runtime::DevicePath::Step device_step();
    // (Re)starts protection for the current topology; snapshot `version` of the live state.
    void start_protection(std::int64_t version);
    // Starts snapshot `version` of the live state when protection.every asks for it.
    void snapshot_if_due(std::int64_t version);
    // At a multiple of max_every under auto: one collective decision of k (a failure during it
    // abandons the loop's way on like a step's: the caller repairs).
    void choose_interval(std::int64_t version);
    runtime::CheckpointIdentity checkpoint_identity() const;
    // After a restore of `restored`: the versions beyond it that this process's stores hold,
    // which the replay must commit bitwise again (ReplayGuard).
    void note_versions_to_replay(std::int64_t restored);
    void arm_replay_probe(std::int64_t from);
    // In loop_next, right after snapshot `step` started: waits for it, restores the probe's
    // version from the own snapshot and sets the step back to it. A failure while it waits
    // abandons the step (the caller repairs, which disarms the probe).
    void rewind_for_replay_probe();
    // At the verdict's sync point, with every role's answer: passes (role 0's replay_probe record)
    // or refuses the job on every role (exit 78, replay_probe record, segments removed).
    void judge_replay_probe(bool everyone_exact);
    // Where the step loop goes on from, as a start, a repair or a relaunch leaves it: the live
    // buffers hold the state after step `step`; `first_version`: no snapshot of it is committed
    // anywhere yet (a fresh start, or a repair that found only the initial state).
    struct ResumePoint {
        std::int64_t step = 0;
        bool first_version = false;
    };
    // The one place the loop takes a ResumePoint up: the step, protection from it, and the first
    // version committed everywhere before the first step when it must be.
    void resume_at(const ResumePoint& at);
    // Before the first step (and again after a recovery that found no version): wait until the
    // starting version is committed everywhere, so that a failure in step 0 restores it from
    // memory like any later version. A failure meanwhile abandons the step (recovery follows).
    void protect_first_version();
    void register_platform();  // loop_start, after the trainer's buffers, before any restore
    // After a restore, before protection rewrites a snapshot: the writer's fingerprint against
    // this process's. A difference is a platform_mismatch record, or (require_same_platform) the
    // end of the job with exit code 81. From then on the buffer holds this process's.
    void check_platform();
    // The loop's end: every role got here alive (else the step is abandoned and the caller
    // recovers), job_stats sent, hot spares released. The segments stay until ~Runtime, after
    // the trainer's code: LauncherLink::finish_job.
    void finish_loop();
    // This role's protected state in one hash (each buffer's name and bytes), no MPI.
    std::uint64_t own_state_checksum();
    void remove_node_snapshots();          // this node's segments of the job, by one process
    [[noreturn]] void checkpoint_and_leave();  // FLASHREC_CHECKPOINT_AND_EXIT after a relaunch

    // --- recovery.cpp: in-job repair (tier 1) and warm relaunch (tier 2) -------------------------
    std::chrono::steady_clock::time_point deadline() const;
    recovery::Report report() const;
    // Every process's report, or CommRevoked everywhere. `agreed_on`: every member passed an
    // agree on `comm` (it may be revoked to release the others when the exchange fails here).
    std::vector<recovery::Report> exchange_reports(const ft::Comm& comm, bool agreed_on) const;
    // Repairs (retrying epochs) until this process can go on, or ends the job. A survivor gets
    // where to resume; nullopt: it has no state to go on from yet (an idle spare parks again, a
    // hot spare that took a role receives its state in loop_start).
    std::optional<ResumePoint> recover();
    std::optional<ResumePoint> recovery_epoch();
    void join_as_spawned();                // a spawned replacement, from the constructor
    void park_until_needed();              // a hot spare, from the constructor
    // Role 0 of the repaired job records each spare the plan passed over (spare_rejected).
    void note_rejected_spares(int me, const recovery::Plan& plan, const std::vector<recovery::Report>& reports);
    // Plans the repair from every live process's report and returns this process's outcome
    // (or ends the job: no spare left; throws ShardLost: no state anywhere, no checkpoint).
    recovery::RepairOutcome decide_repair(int me, const std::vector<recovery::Report>& reports, std::string replacement);
    // The one place a recovery's outcome changes this process: role, membership, spare pool,
    // control-plane registration, the faults a new holder of a role takes over.
    void apply(ft::Comm next_universe, recovery::RepairOutcome outcome);
    // decide_repair + apply, then rebuild the communicators and restore (what recover() returns).
    std::optional<ResumePoint> adopt_plan(ft::Comm new_universe, const std::vector<recovery::Report>& reports,
                                     std::string replacement);
    // Everyone, once restored: the restored-agree, then the next epoch.
    void finish_recovery();
    ResumePoint warm_restore();  // tier 2, from loop_start
    // Warm relaunch: reads every byte of the copies this process would restore or send for
    // plan.version; each that fails is logged, reported as an event and left out of the next
    // report (ring.rejected_versions). Returns what failed ("" if all verified).
    std::string verify_restore_sources(const recovery::Plan& plan);
    void emit_recovery_record();
    // `lost_roles`: the dead roles this end answers (EndingJob::lost_roles).
    [[noreturn]] void end_job(const std::string& why, int exit_code, std::vector<std::string> lost_roles = {});
    // Tells the parked hot spares the job is over (a failure to reach them is logged: nothing to do).
    void release_hot_spares();

    // --- restore.cpp: restore after a repair, each side top to bottom ----------------------------
    // A survivor: its own state back to plan.version, then the replacements it serves.
    void restore_and_serve(const recovery::Plan& plan);
    // A replacement: its role's state received from the survivors the plan names.
    void receive_state(const recovery::Plan& plan);
    ft::RestoreTarget restore_target();  // the live buffers, as ft::RestoreRound writes them
    // Checkpointer::restore into the live buffers, through host staging for device buffers.
    void restore_checkpoint(const std::string& role_key, std::int64_t version);
};

}  // namespace flashrec
