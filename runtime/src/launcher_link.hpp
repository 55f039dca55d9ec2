// What this process tells flashrec-launch (docs/control-plane.md): the heartbeat with the step's
// progress, typed records (also written to stderr as "flashrec-event:" lines for runs without a
// launcher), the deterministic end (deterministic_end.hpp) and the job's end: role 0's job_stats
// at the loop's end, then every role's role_finished, the record it leaves with. Under plain
// mpirun there is no control plane: records go to stderr only. A part of Runtime::Impl.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/control_plane.hpp"
#include "flashrec/ft/exit_notices.hpp"
#include "flashrec/ft/protection.hpp"
#include "flashrec/runtime/config.hpp"
#include "flashrec/runtime/deterministic_end.hpp"
#include "flashrec/runtime/fault_injector.hpp"
#include "interval_auto.hpp"

namespace flashrec::runtime {

class LauncherLink {
public:
    explicit LauncherLink(std::function<void(const std::string&)> log);

    // (Re)registers with the launcher's control plane as `who` (a role key or "spare:<id>");
    // `notices`: where a peer loss the launcher reports goes (trap 1); `parked`: a hot spare.
    void connect(const std::string& who, int world_rank, std::chrono::milliseconds period,
                 ft::ExitNotices* notices, bool parked);
    // BYE: this process leaves on purpose (the launcher does not count it lost).
    void disconnect() { heartbeat_.reset(); }
    bool connected() const { return heartbeat_ != nullptr; }

    // To the launcher only (no stderr line): a step's loss, a rejected snapshot copy.
    void send_event(const nlohmann::json& record);
    // A typed record (ft/records.hpp) for the launcher, and as a "flashrec-event:" line on
    // stderr; `before_exit`: wait (bounded) until it is written.
    void emit(const nlohmann::json& record, bool before_exit = false);
    // The record this process leaves with (role_finished, ending_job), on stderr and to the
    // launcher, which acknowledges it (bounded wait): true when it did, or when there is none.
    bool emit_last(const nlohmann::json& record);

    // --- the job's end ---------------------------------------------------------------------
    // The snapshots' figures at the loop's end (the protection is gone by the time they are sent).
    struct SnapshotFigures {
        std::size_t shm_bytes = 0;
        ft::SnapshotTiming last;    // the last snapshot
        ft::SnapshotTiming totals;  // summed over every snapshot of this run
        std::size_t count = 0;
    };
    // Role 0 at the loop's end: the job's statistics (job_stats): step times, the state's size,
    // the snapshots' figures.
    void emit_job_stats(const std::string& role, const IntervalAuto& interval, const config::Protection& protection,
                        std::size_t state_bytes, const SnapshotFigures& snapshots);
    // Every role got through the loop's end alive; `state_checksum`: its state then (the
    // trainer's buffers may be gone by the time role_finished is sent).
    void loop_finished(std::uint64_t state_checksum) { end_ = LoopEnd{state_checksum}; }
    bool loop_finished() const { return end_.has_value(); }
    // What finish_job needs of the process.
    struct JobEnd {
        std::string role;
        std::int64_t steps = 0;  // job.steps
        const ft::Comm& work;
        FaultInjector& faults;
        std::chrono::milliseconds phase_deadline;
    };
    // From ~Runtime, after the trainer's code: this role's role_finished record, once every role
    // is done with that code. nullopt: the loop did not finish (nothing sent). Otherwise whether
    // every live role's record is with the launcher: then the segments may go. It must not touch
    // the trainer's buffers: they may be gone.
    std::optional<bool> finish_job(const JobEnd& job);

    ft::StepProgress progress;  // read by the heartbeat thread

private:
    std::function<void(const std::string&)> log_;
    std::unique_ptr<ft::HeartbeatClient> heartbeat_;
    struct LoopEnd {
        std::uint64_t state_checksum = 0;
    };
    std::optional<LoopEnd> end_;  // set once the loop's end was passed alive

public:
    // Declared after the heartbeat (destroyed before it): it can still send while an error unwinds.
    DeterministicEnd deterministic_end;
};

}  // namespace flashrec::runtime
