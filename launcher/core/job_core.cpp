#include "job_core.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "exit_codes.hpp"
#include "wait_status.hpp"
#include "timeouts.hpp"

namespace flashrec::launcher {

// kMaxColdRestarts, kInterruptGrace and kFinalRecordsLimit: timeouts.hpp. After mpirun exited
// without every role_finished, kFinalRecordsLimit only bounds a connection that never closes (a
// rank's EOF comes after everything it sent): whatever arrived is what counts, not the time.

std::string_view to_string(JobPhase phase) {
    switch (phase) {
        case JobPhase::running: return "running";
        case JobPhase::ending: return "ending";
        case JobPhase::stopping: return "stopping";
        case JobPhase::awaiting_final_records: return "awaiting_final_records";
        case JobPhase::tearing_down: return "tearing_down";
        case JobPhase::done: return "done";
    }
    return "?";
}

namespace {
// The phase table (job_view.hpp): each phase and the phases it may move to.
struct PhaseMoves {
    JobPhase from;
    std::initializer_list<JobPhase> to;
};
const PhaseMoves kPhaseTable[] = {
    {JobPhase::running, {JobPhase::ending, JobPhase::stopping, JobPhase::awaiting_final_records}},
    {JobPhase::ending, {JobPhase::stopping, JobPhase::awaiting_final_records}},
    {JobPhase::stopping, {JobPhase::awaiting_final_records}},
    {JobPhase::awaiting_final_records, {JobPhase::tearing_down}},
    {JobPhase::tearing_down, {JobPhase::running, JobPhase::done}},
    {JobPhase::done, {}},
};
}  // namespace

bool phase_move_allowed(JobPhase from, JobPhase to) {
    if (from == to) return true;
    for (const auto& row : kPhaseTable)
        if (row.from == from) return std::find(row.to.begin(), row.to.end(), to) != row.to.end();
    return false;
}

IllegalPhaseMove::IllegalPhaseMove(JobPhase from, JobPhase to)
    : std::logic_error("the launcher's core moved from phase " + std::string(to_string(from)) + " to " +
                       std::string(to_string(to)) + ", which the phase table does not allow") {}

void check_phase_move(JobPhase from, JobPhase to) {
    if (!phase_move_allowed(from, to)) throw IllegalPhaseMove(from, to);
}

void JobCore::enter(JobPhase next) {
    check_phase_move(phase_, next);
    phase_ = next;
}

JobCore::JobCore(const LaunchPlan& plan, std::string local_host, std::optional<std::vector<std::string>> mpirun_flags, Now now)
    : plan_(plan),
      local_host_(std::move(local_host)),
      mpirun_flags_(std::move(mpirun_flags)),
      job_start_(now.steady),
      layout_(plan.layout),
      nodes_(plan.allocation ? NodeBook(plan.allocation->nodes) : NodeBook(), plan),
      incidents_(timeouts_of(plan.cfg).stall_confirm, timeouts_of(plan.cfg).node_silent_window),
      restarts_(plan.cfg.recovery.warm_relaunches),
      progress_(plan.cfg),
      report_(plan.cfg.job.hot_spares) {}

JobView JobCore::view() const {
    static const std::string no_job;
    return JobView{plan_.cfg,  layout_,   attempt_,    phase_,      interrupt_signal_,
                   old_pids_,  ranks_,    live_pids_,  local_host_, progress_.last_step(),
                   plan_.allocation ? plan_.allocation->job_id : no_job, plan_.direct.has_value()};
}

// The attempt that starts a direct launch's first step again (handle(TeardownDone)), and how often.
constexpr const char* kStartRetry = "start_retry";
constexpr int kStartRetries = 2;

Effects JobCore::start(bool resume) {
    Effects fx;
    LaunchKind first;
    first.resume = resume;
    first.faults = plan_.faults;
    start_attempt("initial", first, fx);
    return fx;
}

Effects JobCore::on(const Input& input, Now now) {
    Effects fx;
    std::visit([&](const auto& in) { handle(in, now, fx); }, input);
    return fx;
}

std::vector<int> JobCore::pids_to_watch(const std::vector<RankInfo>& ranks) const {
    std::vector<int> pids = incidents_.pending_lost_pids();
    for (const auto& r : ranks)
        if (r.pid > 0 && r.hostname == local_host_ &&
            (r.status != RankStatus::active || phase_ == JobPhase::awaiting_final_records))
            pids.push_back(r.pid);
    return pids;
}

std::chrono::milliseconds JobCore::tick_interval() const { return milliseconds(restarts_.pending() ? 5 : 50); }

// ------------------------------------------------------------------------------------------
// the ranks' records

void JobCore::handle(const ft::records::Step& step, Now now, Effects&) {
    progress_.on(step, now);
    loops_.on_step(step.step);
    incidents_.progressed();
    restarts_.on_step(now);
}

void JobCore::handle(const ft::records::FaultInjected& fault, Now, Effects&) { incidents_.on(fault); }
void JobCore::handle(const ft::records::CheckpointPublished& c, Now, Effects& fx) { report_.on(c, fx); }
void JobCore::handle(const ft::records::EndingJob& ending, Now now, Effects& fx) {
    incidents_.on(ending);
    if (!old_pids_.count(ending.pid)) progress_.on(ending);
    const int code = ending.exit_code;
    if ((code != ft::kExitDeterministicError && code != ft::kExitPlatformMismatch) || old_pids_.count(ending.pid)) return;
    if (forced_ && forced_->observation.what == Observed::exit_code &&
        (forced_->observation.value == ft::kExitDeterministicError || forced_->observation.value == ft::kExitPlatformMismatch))
        return;  // the first one names it
    // The trainer's own call failed (its record says which), or a restore refused another
    // platform: no tier can help, and in-job recovery would hand the role to a spare that fails
    // the same way. The job ends now.
    std::string who = "pid " + std::to_string(ending.pid);
    for (const auto& r : ranks_)
        if (r.pid == ending.pid) who = r.role + " (" + who + ")";
    say(fx, who + (code == ft::kExitPlatformMismatch ? " refused to restore on another platform: "
                                                       : " left by a deterministic error: ") + ending.why);
    force_death({{Observed::exit_code, code}, who + ": " + ending.why, now.steady}, fx);
}
void JobCore::handle(const ft::records::MpiErrorSeen& error, Now, Effects&) { incidents_.on(error); }
void JobCore::handle(const ft::records::SpareReleased& released, Now, Effects&) {
    incidents_.on(released);
    if (!old_pids_.count(released.pid)) progress_.on(released);
}

void JobCore::handle(const ft::records::RoleFinished& finished, Now, Effects&) {
    if (!old_pids_.count(finished.pid)) progress_.on(finished);
}

void JobCore::handle(const ft::records::JobStats& stats, Now, Effects&) {
    report_.on(stats);
    incidents_.on(stats);
}

void JobCore::handle(const ft::records::ProtectionInterval& interval, Now, Effects&) { report_.on(interval); }

void JobCore::handle(const RecoveryRecord& record, Now now, Effects& fx) {
    const auto& r = record.recovery;
    report_.on(r);
    if (r.replacement == "relaunch" || (restarts_.wants_rank_record() && r.failed_roles.empty())) {
        // The ranks' own record of a warm relaunch (tier 2) or a restart: joins the launcher's.
        restarts_.take_rank_record(record.raw);
        return;
    }
    if (r.replacement == "spawned" || r.replacement == "hot+spawned") nodes_.spawned(attempt_.index, now.steady);
    const std::string by = "in-job tier " + std::to_string(r.tier) + " (" + r.replacement + ")";
    incidents_.on_recovery(r, by, view(), nodes_, progress_.steps_completed(), now, fx);
    report_.on_in_job_recovery(r, fx);
}

// ------------------------------------------------------------------------------------------
// what the shell saw

void JobCore::handle(const HangReported& hung, Now now, Effects& fx) {
    // A silent rank (no heartbeat: stopped, frozen, its node gone) is killed at once. A stalled
    // one (heartbeats arrive, its tag does not move) may be slow, not stuck: confirmed first.
    if (hung.incident.reason == IncidentReason::stalled)
        return handle(RankHung{hung.incident, KillOutcome::pending, now.wall}, now, fx);
    fx.emplace_back(KillRank{hung.incident, kill_route(hung.incident, view(), nodes_.book(), now.steady)});
}

void JobCore::handle(const RankSuperseded& superseded, Now now, Effects& fx) {
    // Its role went to another process while its connection was open: the survivors declared it
    // failed. It must not run on beside its replacement (a stopped process would wake as a stale
    // role): killed, and counted as a hang. One already gone (its connection's close still on the
    // way) or not a process of this launcher's tree (another host: nothing here can tell) is a
    // loss; its close, now of a superseded slot, will say nothing.
    if (superseded.alive_here) {
        fx.emplace_back(KillRank{superseded.incident, std::nullopt});  // alive here: kill(2)
        return;
    }
    RankIncident lost = superseded.incident;
    lost.reason = IncidentReason::connection_lost;
    handle(RankLost{lost}, now, fx);
}

void JobCore::handle(const RankHung& hung, Now now, Effects& fx) {
    if (auto death = incidents_.on(hung, view(), nodes_, now, fx)) force_death(*death, fx);
}

void JobCore::handle(const RankLost& lost, Now now, Effects& fx) { incidents_.on(lost, view(), now, fx); }

void JobCore::handle(const DaemonLost& lost, Now now, Effects& fx) {
    // An in-job repair is under way: a rank was lost (maybe not yet classified), a tier-1
    // incident is unrecovered, or a role reports the recovery phase.
    const bool repairing =
        incidents_.repairing(attempt_.index) || std::any_of(ranks_.begin(), ranks_.end(), [&](const RankInfo& r) {
            return r.registered_at >= attempt_.start && r.phase == ft::wire::Phase::recovery;
        });
    if (nodes_.on(lost, view(), repairing, !progress_.all_registered(), progress_.steps_completed(), now, fx))
        incidents_.note_failure(now.steady);
}

void JobCore::handle(const SignalReceived& signal, Now now, Effects& fx) {
    const int sig = signal.signo;
    if (sig == SIGUSR1) {
        // Slurm's warning before the time limit (sbatch --signal): the job goes on; a requeue
        // resumes from the newest periodic checkpoint.
        say(fx, "got SIGUSR1 (time limit near?): carrying on; the newest periodic checkpoint is what a requeue "
                "resumes from");
        log(fx, SignalIgnored{sig, "ignored"});
        return;
    }
    if (interrupt_signal_ || view().mpirun_gone()) {
        say(fx, "second signal: killing the job now");
        if (!view().mpirun_gone()) fx.emplace_back(SignalJob{SIGKILL});
        if (!interrupt_signal_) interrupt_signal_ = sig;
        return;
    }
    interrupt_signal_ = sig;
    interrupt_deadline_ = now.steady + kInterruptGrace;
    enter(JobPhase::stopping);
    say(fx, std::string("got ") + ::strsignal(sig) + ": stopping the job (SIGTERM to mpirun)");
    log(fx, Interrupted{sig});
    fx.emplace_back(SignalJob{SIGTERM});
}

void JobCore::handle(const MpirunExited& exited, Now now, Effects&) {
    if (view().mpirun_gone()) return;
    attempt_.status = exited.status;
    attempt_.exit_time = now.steady;
    // Judged at the next tick, once the lost ranks it brings were recorded.
    enter(JobPhase::awaiting_final_records);
}

void JobCore::handle(const Tick& tick, Now now, Effects& fx) {
    ranks_ = tick.ranks;
    live_pids_ = tick.live_pids;
    if (phase_ == JobPhase::tearing_down || phase_ == JobPhase::done) return;
    incidents_.on_tick(view(), nodes_, now, fx);
    if (!view().mpirun_gone()) observe_attempt(now, fx);
    report_.observe(ranks_, progress_.all_registered(), tick.heartbeats, tick.drops);
    report_.progress(progress_.steps_completed(), progress_.loss(), progress_.step_seconds(), incidents_.all().size());
    if (auto line = progress_.progress_line(false, now, report_.metrics().spares_left, report_.last_recovery()))
        say(fx, *line);
    if (interrupt_signal_ && now.steady > interrupt_deadline_ && !view().mpirun_gone()) {
        say(fx, "the job did not stop within " + human_ms(static_cast<double>(kInterruptGrace.count())) + ": killing it");
        fx.emplace_back(SignalJob{SIGKILL});
        interrupt_deadline_ = now.steady + std::chrono::hours(24);
    }
    if (phase_ == JobPhase::awaiting_final_records) await_final_records(now, fx);
}

void JobCore::observe_attempt(Now now, Effects& fx) {
    const auto current = current_ranks(ranks_, attempt_.start);
    nodes_.follow_replacements(layout_, current, fx);
    const JobProgress::Change change = progress_.observe(current, view(), now, fx);
    if (change.all_registered) restarts_.registered(ms_between(attempt_.start, now.steady), now);
    if (change.in_loop) restarts_.back_in_loop(ms_between(progress_.registered_at(), now.steady), now);
    if (auto done = restarts_.on_tick(attempt_.index, now, fx)) restart_done(*done);
    if (change.stalled) force_death(*change.stalled, fx);
    if (change.mpirun_lingers && phase_ == JobPhase::running) {
        enter(JobPhase::ending);
        fx.emplace_back(SignalJob{SIGKILL});
    }
}

void JobCore::force_death(const ForcedDeath& death, Effects& fx) {
    if (view().mpirun_gone()) return;
    forced_ = death;
    if (phase_ == JobPhase::running) enter(JobPhase::ending);
    fx.emplace_back(SignalJob{SIGKILL});
}

// ------------------------------------------------------------------------------------------
// the end of an attempt

void JobCore::await_final_records(Now now, Effects& fx) {
    if (progress_.finished(layout_.active_roles)) return judge(true, now, fx);
    // Not every role_finished is in. Each connection of this attempt that can still close is
    // waited for: its EOF comes after everything its process sent. A rank declared hung or on a
    // lost node sends nothing more; a local process that outlived mpirun is ended first.
    bool open = false;
    std::vector<int> leftovers;
    for (const auto& r : ranks_) {
        if (r.registered_at < attempt_.start || r.status != RankStatus::active || r.hung) continue;
        if (nodes_.book().is_lost(nodes_.book().node_of_rank(layout_, r.hostname, r.role))) continue;
        open = true;
        if (view().alive_here(r.hostname, r.pid)) leftovers.push_back(r.pid);
    }
    if (!open) return judge(false, now, fx);
    if (!leftovers.empty() && !judged_.leftovers_killed) {
        judged_.leftovers_killed = true;
        fx.emplace_back(KillLeftovers{leftovers});
    }
    if (now.steady - attempt_.exit_time < kFinalRecordsLimit) return;
    say(fx, "mpirun exited, and connections of its ranks stayed open for " +
                human_ms(static_cast<double>(kFinalRecordsLimit.count())) + ": judging from the records that came");
    judge(false, now, fx);
}

void JobCore::judge(bool finished, Now now, Effects& fx) {
    const int status = attempt_.status;
    AttemptJudged judged;
    judged.attempt = attempt_.index;
    judged.pid = attempt_.pid;
    judged.status = describe_status(status);
    judged.roles_finished = finished;
    if (WIFEXITED(status)) judged.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) judged.signal = WTERMSIG(status);
    if (finished && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        judged.note = "mpirun's exit status is not the job's under ULFM (docs/ulfm-traps.md trap 9): judged by the ranks";
    log(fx, std::move(judged));
    judged_.finished = finished;
    judged_.first_evidence =
        forced_ ? forced_->first_evidence : incidents_.first_failure_since_progress().value_or(attempt_.exit_time);
    judged_.detect_end = now.steady;
    for (const auto& r : ranks_)
        if (r.pid > 0) old_pids_.insert(r.pid);
    enter(JobPhase::tearing_down);
    if (!finished && plan_.direct && layout_.slurm && !progress_.all_registered()) nodes_.failed_start(view(), fx);
    fx.emplace_back(TeardownAttempt{finished ? "the job finished; stragglers" : "the MPI job ended early",
                                    finished ? std::vector<std::string>{} : nodes_.nodes_to_check(view())});
}

void JobCore::handle(const TeardownDone& teardown, Now now, Effects& fx) {
    if (phase_ != JobPhase::tearing_down) return;
    if (judged_.finished) {
        finalize_restart(false, now, fx);
        return finish("finished", kExitOk, "", fx);
    }
    nodes_.settle_suspects(teardown.unreachable_nodes, view(), progress_.steps_completed(), fx);
    if (teardown.allocation_nodes && layout_.slurm) nodes_.left_allocation(*teardown.allocation_nodes, view(), fx);
    if (attempt_.launch.checkpoint_and_exit && !interrupt_signal_ && !nodes_.book().any_lost())
        return end_checkpoint_for_requeue(teardown, fx);
    if (interrupt_signal_) {
        finalize_restart(true, now, fx);
        return finish("interrupted", 128 + interrupt_signal_, std::string("interrupted by ") + ::strsignal(interrupt_signal_),
                      fx);
    }
    finalize_restart(true, now, fx);
    const int status = attempt_.status;
    const bool registered = std::any_of(ranks_.begin(), ranks_.end(),
                                        [&](const RankInfo& r) { return r.registered_at >= attempt_.start; });
    const bool first_start = attempt_.index == 1 || attempt_.kind == kStartRetry;
    if (!registered && first_start && plan_.direct && layout_.slurm && start_retries_ < kStartRetries &&
        !(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == ft::kExitBadConfig))) {
        // Under direct launch Open MPI 5.0.10 crashes now and then inside MPI_Init (a SIGSEGV in
        // ob1's matching, 3 of 15 starts on the test cluster; limitations.md, "Direct launch"):
        // the step is started again, up to kStartRetries times, before the job counts as never
        // started (3 starts in a row fail at about 1 in 64).
        ++start_retries_;
        log(fx, StartRetried{attempt_.index, describe_status(status)});
        say(fx, "the srun step ended before any rank connected (" + describe_status(status) +
                    "); starting it again (Open MPI's start-up crash under direct launch, docs/limitations.md)");
        LaunchKind again = attempt_.launch;
        return start_attempt(kStartRetry, std::move(again), fx);
    }
    if (!registered && first_start) {
        // Not a single rank reached the control plane: a trainer that does not use flashrec, or
        // one that cannot start. Its exit status is all there is. Not so for a relaunch: its
        // trainer did connect before, and a relaunch none of whose ranks connected did not run
        // (mpirun exits 0 after PRRTE lost a daemon while starting: issue 29's cluster soak).
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            return finish("finished", kExitOk,
                          "no rank ever connected to the control plane: success judged by mpirun's exit code only", fx);
        return finish("failed_to_start",
                      WIFEXITED(status) && WEXITSTATUS(status) == ft::kExitBadConfig ? kExitUsage : kExitFailed,
                      "the job never started: no rank connected to the control plane, mpirun ended with " +
                          describe_status(status),
                      fx);
    }
    DeathEvidence evidence;
    if (forced_) {
        evidence.forced = forced_->observation;
        evidence.forced_detail = forced_->detail;
    }
    evidence.lost_nodes.assign(nodes_.book().lost().begin(), nodes_.book().lost().end());
    evidence.requested_exit_code = incidents_.requested_exit_code();
    evidence.mpirun_status = status;
    const Death death = observe_death(evidence);
    forced_.reset();
    after_death(death.observation, death.detail, status, teardown, now, fx);
}

void JobCore::after_death(const Observation& obs, const std::string& detail, int mpirun_status,
                          const TeardownDone& teardown, Now now,
                          Effects& fx) {
    Budgets budgets;
    budgets.warm_used = restarts_.warm_used();
    budgets.warm_allowed = plan_.cfg.recovery.warm_relaunches;
    budgets.cold_used = restarts_.cold_used();
    budgets.cold_allowed = kMaxColdRestarts;
    budgets.checkpoint_dir = !plan_.cfg.checkpoint.dir.empty();
    const AttemptFacts facts{attempt_.kind == "warm_relaunch", progress_.progressed(), nodes_.book().any_lost(),
                             plan_.direct.has_value()};
    const Decision decision = choose_restarts(obs, budgets, facts);
    const Rule& rule = *decision.rule;
    Incident inc;
    inc.attempt = attempt_.index;
    inc.obs = obs;
    inc.rule = &rule;
    inc.role = "*";
    inc.detail = detail;
    inc.step = progress_.last_step() + 1;
    Incident& recorded = incidents_.add(inc, now, fx);
    const RestartReason reason{recorded.id, std::string(rule.classification), detail};
    say(fx, "the MPI job died: " + detail + " -> " + std::string(rule.classification) + ", " +
                std::string(to_string(rule.action)) + (rule.tier ? " (tier " + std::to_string(rule.tier) + ")" : ""));
    for (const auto& node : nodes_.book().take_lost()) nodes_.fail(node, rule.classification, progress_.steps_completed(), fx);
    if (decision.warm_before_hdf5) log(fx, WarmRelaunchBeforeHdf5{attempt_.index, decision.warm_before_hdf5_why});
    // A node's failure is not the same failure twice: the relaunch moves off that node.
    const bool guarded = rule.action != Action::replace_node;
    const FailureSignature failure{std::string(rule.classification), inc.step, mpirun_status, progress_.progressed()};
    for (const RestartStep& step : decision.steps) {
        if (step.kind == Restart::warm_relaunch) {
            if (step.refused) {
                log(fx, WarmRelaunchRefused{reason, *step.refused, restarts_.warm_used()});
                continue;
            }
            if (guarded && loops(failure, Restart::warm_relaunch, recorded, fx)) return;
            start_warm_relaunch(reason, decision.warm_restores_from, now, fx);
            loops_.restarted(failure, Restart::warm_relaunch, recorded.id);
            return;
        }
        if (step.refused) {
            log(fx, ColdRestartRefused{reason, *step.refused});
            continue;
        }
        if (guarded && loops(failure, Restart::cold_restart, recorded, fx)) return;
        if (try_cold_restart(reason, teardown, now, fx)) {
            loops_.restarted(failure, Restart::cold_restart, recorded.id);
            return;
        }
    }
    std::string message = decision.message;
    if (decision.exit_code == kExitDeterministic || decision.exit_code == kExitPlatformMismatch) message += ": " + detail;
    finish(decision.outcome, decision.exit_code, message, fx);
}

bool JobCore::loops(const FailureSignature& failure, Restart kind, const Incident& incident, Effects& fx) {
    const auto earlier = loops_.repeats(failure, kind);
    if (!earlier) return false;
    const std::string restart = kind == Restart::warm_relaunch ? "warm_relaunch" : "cold_restart";
    const std::string why = "the same failure (" + failure.classification + " at step " + std::to_string(failure.step) +
                            ") as incident #" + std::to_string(*earlier) + ", after a " +
                            (kind == Restart::warm_relaunch ? "warm relaunch" : "HDF5 restart") +
                            " and with no new step since (newest step " + std::to_string(loops_.newest_step()) +
                            "): another one would repeat it";
    log(fx, RestartLoop{incident.id, *earlier, failure.classification, failure.step, loops_.newest_step(), restart, why});
    finish("restart_loop", kExitRestartLoop, "restart loop: " + why + " (" + incident.detail + ")", fx);
    return true;
}

RestartStart JobCore::restart_start(Restart kind, const RestartReason& reason, Now now) const {
    RestartStart s;
    s.kind = kind;
    s.reason = reason;
    s.incident = reason.incident;
    s.first_evidence = judged_.first_evidence;
    s.detect_end = judged_.detect_end;
    s.teardown_end = now.steady;
    s.steps_done_before = progress_.steps_completed();
    return s;
}

// A new attempt keeps the --fault specs that have not fired yet (one that fired must not fire
// again when its step is replayed).
LaunchKind JobCore::unfired_faults() const {
    LaunchKind kind;
    for (const auto& f : plan_.faults)
        if (!incidents_.fired_faults().count(f)) kind.faults.push_back(f);
    return kind;
}

void JobCore::start_warm_relaunch(const RestartReason& reason, const std::string& restores_from, Now now,
                                  Effects& fx) {
    const bool progressed = progress_.last_step() >= 0 || progress_.progressed();
    LaunchKind kind = unfired_faults();
    // Nothing was ever committed: there is nothing to restore, start as the job first did.
    kind.relaunch = progressed;
    kind.resume = !progressed && attempt_.launch.resume;
    layout_ = nodes_.move_off_bad_nodes(layout_, kind, reason, fx);
    RestartStart start = restart_start(Restart::warm_relaunch, reason, now);
    const std::string number = std::to_string(restarts_.warm_used() + 1);
    start.recovered_by = kind.checkpoint_and_exit ? "checkpoint for requeue (slurm.when_spares_exhausted)"
                         : !restores_from.empty() ? "warm relaunch " + number + " (" + restores_from + ")"
                                                  : "warm relaunch " + number;
    restarts_.begin(start, now);
    report_.restart_started(Restart::warm_relaunch);
    start_attempt(kind.checkpoint_and_exit ? "checkpoint_for_requeue" : "warm_relaunch", kind, fx);
}

// The policy allowed it (choose_restarts()); it starts when a complete checkpoint for this shape exists.
bool JobCore::try_cold_restart(const RestartReason& reason, const TeardownDone& teardown, Now now, Effects& fx) {
    if (!teardown.checkpoint_step) {
        log(fx, ColdRestartRefused{reason, teardown.no_checkpoint_why});
        say(fx, "no HDF5 checkpoint to restart from: " + teardown.no_checkpoint_why);
        return false;
    }
    RestartStart start = restart_start(Restart::cold_restart, reason, now);
    start.checkpoint_step = teardown.checkpoint_step;
    start.recovered_by = "HDF5 restart " + std::to_string(restarts_.cold_used() + 1);
    const int number = restarts_.begin(start, now);
    LaunchKind kind = unfired_faults();
    kind.resume = true;
    layout_ = nodes_.move_off_bad_nodes(layout_, kind, reason, fx);
    report_.restart_started(Restart::cold_restart);
    say(fx, "restarting from the HDF5 checkpoint of step " + std::to_string(*teardown.checkpoint_step) + " in " +
                plan_.cfg.checkpoint.dir + " (tier 3, restart " + std::to_string(number) + " of at most " +
                std::to_string(kMaxColdRestarts) + ")");
    start_attempt("cold_restart", kind, fx);
    return true;
}

// The checkpoint-only relaunch ended: requeue if its checkpoint is there.
void JobCore::end_checkpoint_for_requeue(const TeardownDone& teardown, Effects& fx) {
    // The checkpoint-only relaunch did what it was for when its checkpoint is there.
    if (const RestartStart* r = restarts_.under_way())
        incidents_.restart_ended(r->incident, r->recovered_by, teardown.checkpoint_step.has_value());
    restarts_.forget();
    if (!teardown.checkpoint_step)
        return finish("spares_exhausted", kExitNoSpares,
                      "spares exhausted, and the checkpoint for the requeue failed: " + teardown.no_checkpoint_why, fx);
    const std::int64_t step = *teardown.checkpoint_step;
    requeue_from_ = step;
    log(fx, CheckpointForRequeue{step, plan_.cfg.checkpoint.dir, attempt_.index});
    finish("requeued", kExitRequeued,
           "no spare node left: checkpoint of step " + std::to_string(step) + " written to " + plan_.cfg.checkpoint.dir +
               (plan_.allocation ? "; requeueing Slurm job " + plan_.allocation->job_id : std::string()),
           fx);
}

void JobCore::handle(const RequeueDone& done, Now, Effects&) {
    if (phase_ != JobPhase::done || !requeue_from_ || !done.refused) return;
    // Slurm refused the requeue: nobody will resume the job, so it ends as spares exhausted (77),
    // decided here, before the job_end record is written.
    const std::int64_t step = *std::exchange(requeue_from_, std::nullopt);
    outcome_ = {"spares_exhausted", kExitNoSpares,
                "no spare node left: checkpoint of step " + std::to_string(step) + " written to " +
                    plan_.cfg.checkpoint.dir + ", but Slurm refused the requeue (" + *done.refused +
                    "); resubmit with --resume to go on from step " + std::to_string(step)};
}

void JobCore::finalize_restart(bool failed, Now now, Effects& fx) {
    const RestartStart* under_way = restarts_.under_way();
    const auto tried = under_way ? std::optional(std::pair(under_way->incident, under_way->recovered_by)) : std::nullopt;
    if (auto done = restarts_.finalize(failed, attempt_.index, now, fx)) return restart_done(*done);
    // It failed (or never got its roles back in the loop): the incident was not recovered by it.
    if (tried) incidents_.restart_ended(tried->first, tried->second, false);
}

void JobCore::restart_done(const RestartDone& done) {
    report_.restart_done(done.tier, done.total_ms, done.text);
    incidents_.restart_ended(done.incident, done.recovered_by, true);
}

void JobCore::finish(std::string outcome, int exit_code, std::string message, Effects& fx) {
    outcome_ = {std::move(outcome), exit_code, std::move(message)};
    enter(JobPhase::done);
    fx.emplace_back(Finish{requeue_from_});
}

// ------------------------------------------------------------------------------------------
// attempts

void JobCore::start_attempt(const std::string& kind, LaunchKind launch, Effects& fx) {
    const int index = attempt_.index + 1;
    attempt_ = CurrentAttempt{};
    attempt_.index = index;
    attempt_.kind = kind;
    attempt_.launch = std::move(launch);
    judged_ = Judgement{};
    enter(JobPhase::running);
    fx.emplace_back(StartAttempt{attempt_.launch, layout_});
}

void JobCore::handle(const AttemptStarted& started, Now, Effects& fx) {
    attempt_.pid = started.pid;
    attempt_.start = started.started;
    incidents_.new_attempt();
    progress_.new_attempt(started.started);
    AttemptLaunched launched;
    launched.attempt = attempt_.index;
    launched.kind = attempt_.kind;
    launched.pid = started.pid;
    launched.command = started.argv;
    launched.relaunch = attempt_.launch.relaunch;
    launched.resume = attempt_.launch.resume;
    launched.mpirun_flags = mpirun_flags_;
    if (layout_.slurm) {
        launched.nodes = layout_.nodes;
        launched.spare_nodes = layout_.reserve_nodes;
        launched.role_of_rank = layout_.role_of_rank();
    }
    log(fx, std::move(launched));
    if (attempt_.kind != "initial")
        say(fx, "starting the MPI job again (" + attempt_.kind + ", attempt " + std::to_string(attempt_.index) +
                    (attempt_.launch.relaunch ? std::string(", ") + ft::env::kRelaunch + "=1" : "") +
                    (attempt_.launch.resume ? ", --resume" : "") + "): " + shell_join(started.argv));
}

Effects JobCore::summary(Now now) {
    Effects fx;
    if (auto line = progress_.progress_line(true, now, report_.metrics().spares_left, report_.last_recovery()))
        say(fx, *line);
    JobEnding end;
    end.job_name = plan_.cfg.job.name;
    end.outcome = outcome_.name;
    end.exit_code = outcome_.exit_code;
    end.message = outcome_.message;
    end.wall_ms = ms_between(job_start_, now.steady);
    end.steps_completed = progress_.steps_completed();
    end.steps = plan_.cfg.job.steps;
    end.warm_relaunches = restarts_.warm_used();
    end.cold_restarts = restarts_.cold_used();
    end.median_step_ms = progress_.median_step_ms();
    end.steps_per_second = progress_.overall_steps_per_second();
    end.events_path = plan_.events_path.string();
    report_.summary(end, incidents_.all(), restarts_.costs(), job_start_, fx);
    return fx;
}

}  // namespace flashrec::launcher
