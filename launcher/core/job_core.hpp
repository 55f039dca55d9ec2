// The launcher's functional core: every input (job_inputs.hpp) goes to on(input, now), which
// hands it to the part that owns it — the incident book, the restart tracker, the job's
// progress, the node watch, the report — and returns the effects (job_effects.hpp) for the shell
// (supervisor.cpp) to carry out. No I/O, no clock, no threads: tests drive it with scripted
// inputs and a fake clock (tests/launcher/test_job_core.cpp). docs/launcher.md, "Structure".
#pragma once
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "incident_book.hpp"
#include "job_effects.hpp"
#include "job_inputs.hpp"
#include "job_progress.hpp"
#include "job_report.hpp"
#include "job_view.hpp"
#include "launch_layout.hpp"
#include "node_watch.hpp"
#include "loop_guard.hpp"
#include "restart_tracker.hpp"

namespace flashrec::launcher {

// How the job ended.
struct JobOutcome {
    std::string name = "failed";  // finished | failed | interrupted | requeued | ...
    int exit_code = 1;
    std::string message;
};

class JobCore {
public:
    // `mpirun_flags`: what the wrapper gives mpirun (for the launch records), when known.
    JobCore(const LaunchPlan& plan, std::string local_host, std::optional<std::vector<std::string>> mpirun_flags, Now now);

    // The first attempt (--resume: `resume`). On a job that is over it is a bug (IllegalPhaseMove).
    Effects start(bool resume);
    Effects on(const Input& input, Now now);
    // At the end, after the last teardown: the last progress line, the job_end record, the summary.
    Effects summary(Now now);

    JobPhase phase() const { return phase_; }
    const JobOutcome& outcome() const { return outcome_; }
    const CurrentAttempt& attempt() const { return attempt_; }
    const JobMetrics& metrics() const { return report_.metrics(); }
    // The pids whose liveness the next Tick should report (local ranks whose connection closed,
    // lost ranks still settling, and every local rank while the final records are awaited).
    std::vector<int> pids_to_watch(const std::vector<RankInfo>& ranks) const;
    // How often the shell ticks: often while a restart is under way (its phases are timed).
    std::chrono::milliseconds tick_interval() const;

private:
    void handle(const ft::records::Step& step, Now now, Effects& fx);
    void handle(const ft::records::FaultInjected& fault, Now now, Effects& fx);
    void handle(const ft::records::CheckpointPublished& checkpoint, Now now, Effects& fx);
    void handle(const ft::records::EndingJob& ending, Now now, Effects& fx);
    void handle(const ft::records::RoleFinished& finished, Now now, Effects& fx);
    void handle(const ft::records::MpiErrorSeen& error, Now now, Effects& fx);
    void handle(const ft::records::SpareReleased& released, Now now, Effects& fx);
    void handle(const ft::records::JobStats& stats, Now now, Effects& fx);
    void handle(const ft::records::ProtectionInterval& interval, Now now, Effects& fx);
    void handle(const RecoveryRecord& record, Now now, Effects& fx);
    void handle(const HangReported& hung, Now now, Effects& fx);
    void handle(const RankSuperseded& superseded, Now now, Effects& fx);
    void handle(const RankHung& hung, Now now, Effects& fx);
    void handle(const RankLost& lost, Now now, Effects& fx);
    void handle(const MpirunExited& exited, Now now, Effects& fx);
    void handle(const DaemonLost& lost, Now now, Effects& fx);
    void handle(const SignalReceived& signal, Now now, Effects& fx);
    void handle(const Tick& tick, Now now, Effects& fx);
    void handle(const AttemptStarted& started, Now now, Effects& fx);
    void handle(const TeardownDone& done, Now now, Effects& fx);
    void handle(const RequeueDone& done, Now now, Effects& fx);
    // Every change of phase_ goes through here (check_phase_move: the phase table).
    void enter(JobPhase next);

    JobView view() const;
    void observe_attempt(Now now, Effects& fx);
    void force_death(const ForcedDeath& death, Effects& fx);
    void await_final_records(Now now, Effects& fx);
    void judge(bool finished, Now now, Effects& fx);
    void after_death(const Observation& observation, const std::string& detail, int mpirun_status,
                     const TeardownDone& teardown, Now now,
                     Effects& fx);
    // `restores_from`: what the incident says once recovered (choose_restarts; empty: nothing more).
    void start_warm_relaunch(const RestartReason& reason, const std::string& restores_from, Now now, Effects& fx);
    bool try_cold_restart(const RestartReason& reason, const TeardownDone& teardown, Now now, Effects& fx);
    void end_checkpoint_for_requeue(const TeardownDone& teardown, Effects& fx);
    void start_attempt(const std::string& kind, LaunchKind launch, Effects& fx);
    void finalize_restart(bool failed, Now now, Effects& fx);
    void restart_done(const RestartDone& done);
    // The restart about to start for `incident` would repeat one that did not help: ends the job.
    bool loops(const FailureSignature& failure, Restart kind, const Incident& incident, Effects& fx);
    void finish(std::string outcome, int exit_code, std::string message, Effects& fx);
    RestartStart restart_start(Restart kind, const RestartReason& reason, Now now) const;
    LaunchKind unfired_faults() const;

    const LaunchPlan& plan_;
    const std::string local_host_;
    const std::optional<std::vector<std::string>> mpirun_flags_;
    const SteadyTime job_start_;
    Layout layout_;  // where the processes of the current attempt run (changes at relaunches)
    JobPhase phase_ = JobPhase::running;
    CurrentAttempt attempt_;
    NodeWatch nodes_;
    IncidentBook incidents_;
    RestartTracker restarts_;
    RestartLoopGuard loops_;
    JobProgress progress_;
    JobReport report_;
    std::vector<RankInfo> ranks_;  // the controller's view at the last tick
    std::set<int> live_pids_;      // of pids_to_watch(), those alive at the last tick
    std::set<int> old_pids_;       // processes of earlier attempts
    int interrupt_signal_ = 0;     // the signal that asked the job to stop
    SteadyTime interrupt_deadline_{};
    std::optional<ForcedDeath> forced_;
    // The judgement of the attempt that ended, taken when mpirun had exited (before the teardown).
    struct Judgement {
        bool finished = false;
        SteadyTime first_evidence{}, detect_end{};
        bool leftovers_killed = false;  // while awaiting the final records
    } judged_;
    JobOutcome outcome_;
    std::optional<std::int64_t> requeue_from_;  // checkpoint-and-requeue: the step written
    int start_retries_ = 0;  // direct launch: times the first step never came up and was started again
};

}  // namespace flashrec::launcher
