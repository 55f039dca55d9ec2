// The imperative shell: set-up, the poll loop, and carry_out() for the core's effects, which it
// queues and carries out one at a time (core/effect_queue.hpp: the order). What the job means
// (incidents, restarts, the finish rule, the report, which hang is killed at once) is decided in
// core/; here only what touches the world: sockets, signals, processes, files, Slurm.
#include "supervisor.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

#include "attempt.hpp"
#include "controller.hpp"
#include "flashrec/errors.hpp"
#include "flashrec/ft/event_log.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/ft/wire.hpp"
#include "flashrec/slurm/allocation.hpp"
#include "effect_queue.hpp"
#include "inbox.hpp"
#include "job_core.hpp"
#include "job_start.hpp"
#include "timeouts.hpp"
#include "metrics.hpp"
#include "noise_filter.hpp"
#include "processes.hpp"
#include "rank_output.hpp"

extern char** environ;

namespace flashrec::launcher {

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr const char* kLaunchIdVar = ft::env::kLaunchId;

Now now() { return {SteadyClock::now(), WallClock::now()}; }

class Supervisor {
public:
    Supervisor(const LaunchPlan& plan, const SupervisorOptions& options) : plan_(plan), options_(options) {}
    int run();
    // What a teardown looks for beyond this process's own tree: nothing when this process is a
    // subreaper (orphans come back to it); else the launch id in every process's environment.
    std::string teardown_tag() const { return subreaper_ ? std::string() : launch_id_; }

private:
    void setup();
    ControllerOptions controller_options();

    // Hands `input` to the core and carries out what it brings (after what is waiting).
    void feed(const Input& input, Now at) { execute(core_->on(input, at)); }
    // Queues `effects`, then carries out the queue unless it is being carried out already (an
    // effect's result, or an input handed in while an effect runs, only queues).
    void execute(Effects effects);
    void carry_out(const Effect& effect);
    void say(const std::string& line) const;
    void log(std::string_view event, const json& fields);
    // One of the shell's own records (launcher_records.hpp).
    template <class Record>
    void log(const Record& record) {
        log(Record::kEvent, record.to_json());
    }
    void start_attempt(const StartAttempt& start);
    void teardown(const std::string& why);
    void handle_line(const std::string& line, bool is_err);
    KillOutcome kill_hung(const RankIncident& incident) const;
    // Through a step of the Slurm job on the rank's node (slurm::kill_task); blocks for at most
    // kRemoteKillLimit (run here, not in a thread: the main loop's waitpid(-1) would take srun's status).
    KillOutcome kill_on_node(const RankIncident& incident, const KillOnNode& where);
    void drain_queue();
    void read_signals();
    void tick(std::vector<RankInfo> ranks);
    void run_pending_drains();
    // The nodes the Slurm job holds now (a --no-kill job loses the ones Slurm found dead).
    std::optional<std::vector<std::string>> allocation_nodes_now();
    std::optional<std::vector<std::string>> unreachable_nodes(const std::vector<std::string>& nodes);
    RequeueDone requeue(std::int64_t step);

    const LaunchPlan& plan_;
    SupervisorOptions options_;
    std::shared_ptr<ft::EventLog> log_;
    ft::wire::Token token_{};
    std::string launch_id_;
    bool subreaper_ = false;  // PR_SET_CHILD_SUBREAPER took: orphans of the job come back here
    std::string local_host_;
    std::unique_ptr<Controller> controller_;
    std::string control_endpoint_;
    std::unique_ptr<MetricsServer> metrics_;
    std::mutex metrics_mutex_;
    JobMetrics published_metrics_;  // the core's figures, for the metrics server's thread
    std::unique_ptr<JobCore> core_;
    EffectQueue effects_;
    bool carrying_out_ = false;
    Attempt attempt_;  // mpirun of the current attempt and its output
    Fd signals_;
    Inbox inbox_;  // from the controller's thread
    // Drains decided but not yet run: scontrol runs from the main loop after what follows the
    // decision has started (a thread would race the loop's waitpid(-1) for scontrol's status).
    std::vector<Drain> pending_drains_;
    std::optional<std::int64_t> requeue_from_;
};

void Supervisor::say(const std::string& line) const {
    std::string text = "flashrec-launch: " + line + "\n";
    (void)!::write(STDERR_FILENO, text.data(), text.size());
}

void Supervisor::log(std::string_view event, const json& fields) {
    try {
        log_->log_event(event, fields);
    } catch (const std::exception& e) {
        say(std::string("event log: ") + e.what());
    }
}

void Supervisor::setup() {
    local_host_ = wire_hostname(plan_.local_host);
    // Signals arrive through a signalfd; block them before any thread exists so that every
    // thread inherits the mask (the child gets a clean mask from spawn_child).
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&set, s);
    if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) throw Error("cannot block signals");
    signals_ = Fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!signals_.open()) throw Error(std::string("signalfd: ") + std::strerror(errno));
    ::signal(SIGPIPE, SIG_IGN);
    subreaper_ = become_subreaper();
    if (!subreaper_) say("warning: cannot become a child subreaper; orphaned ranks are found by their tag only");

    token_ = ft::wire::generate_token();
    launch_id_ = ft::wire::token_to_hex(ft::wire::generate_token()).substr(0, 16);
    std::error_code ec;
    if (plan_.events_path.has_parent_path()) std::filesystem::create_directories(plan_.events_path.parent_path(), ec);
    log_ = std::make_shared<ft::EventLog>(plan_.events_path);
    std::string why;
    const auto mpirun_flags = wrapper_flags(plan_.wrapper, why, plan_.wrapper_variables());
    core_ = std::make_unique<JobCore>(plan_, local_host_, mpirun_flags, now());

    const auto& d = plan_.cfg.detection;
    ControllerOptions co = controller_options();
    log(job_start_record(plan_, options_.resume, launch_id_.substr(0, 8)));
    controller_ = std::make_unique<Controller>(std::move(co));
    control_endpoint_ = reachable_endpoint(controller_->endpoint());
    published_metrics_ = core_->metrics();
    if (d.metrics)
        metrics_ = std::make_unique<MetricsServer>(options_.metrics_bind, static_cast<std::uint16_t>(d.metrics_port), [this] {
            std::lock_guard lock(metrics_mutex_);
            return render_metrics(published_metrics_, plan_.cfg.job.name);
        });
    const auto metrics_endpoint = metrics_ ? std::optional(metrics_->endpoint()) : std::nullopt;
    log(layout_record(plan_, control_endpoint_, metrics_endpoint));
    say(announcement(plan_, control_endpoint_, metrics_endpoint));
}

// The control plane's options: where it listens, the hang rules, and the callbacks that hand
// its findings to the main loop.
ControllerOptions Supervisor::controller_options() {
    ControllerOptions co;
    const auto& d = plan_.cfg.detection;
    std::vector<std::string> notes;
    co.bind_address = control_bind_address(plan_, notes);
    for (const auto& note : notes) say(note);
    co.port = static_cast<std::uint16_t>(d.port);
    co.token = token_;
    co.hang_timeout = milliseconds(d.hang_timeout_ms);
    co.pass_on_losses = d.pass_on_losses;
    // Without PRRTE nothing else tells a frozen, cut-off or crashed node from a slow one.
    if (plan_.direct) co.node_timeout = milliseconds(d.node_timeout_ms), co.heartbeat_period = milliseconds(d.heartbeat_ms);
    co.check_period = timeouts_of(plan_.cfg).check_period;
    co.event_log = log_;
    co.on_hung = [this](const RankIncident& incident) { inbox_.push({HangReported{incident}, now()}); };
    co.on_lost = [this](const RankIncident& incident) { inbox_.push({RankLost{incident}, now()}); };
    co.on_superseded = [this](const RankIncident& incident) {
        // Read now, while the process is what the incident names; the core decides (hang or loss).
        const bool alive_here = process_alive(incident.pid) && is_descendant(incident.pid, ::getpid());
        inbox_.push({RankSuperseded{incident, alive_here}, now()});
    };
    co.on_event = [this](const json& record) { inbox_.push({record, now()}); };
    return co;
}

// ------------------------------------------------------------------------------------------
// effects

void Supervisor::execute(Effects effects) {
    effects_.push(std::move(effects));
    if (carrying_out_) return;
    carrying_out_ = true;
    try {
        while (auto effect = effects_.pop()) carry_out(*effect);
    } catch (...) {
        carrying_out_ = false;
        throw;
    }
    carrying_out_ = false;
}

void Supervisor::carry_out(const Effect& effect) {
    const pid_t mpirun = attempt_.child.pid();
    if (const auto* record = std::get_if<LogRecord>(&effect)) {
        log(event_of(record->record), fields_of(record->record));
    } else if (const auto* line = std::get_if<Say>(&effect)) {
        say(line->line);
    } else if (const auto* kill = std::get_if<KillRank>(&effect)) {
        const KillOutcome outcome = kill->on_node ? kill_on_node(kill->incident, *kill->on_node) : kill_hung(kill->incident);
        feed(RankHung{kill->incident, outcome, WallClock::now()}, now());
    } else if (const auto* signal = std::get_if<SignalJob>(&effect)) {
        if (mpirun > 0 && !attempt_.exited) ::kill(-mpirun, signal->signo);
    } else if (const auto* leftovers = std::get_if<KillLeftovers>(&effect)) {
        // Only processes of this job: its own tree, or (not a subreaper) those with its launch id.
        const auto tagged = subreaper_ ? std::vector<pid_t>{} : processes_with_env(kLaunchIdVar, launch_id_);
        for (const int pid : leftovers->pids)
            if (pid > 1 && (is_descendant(pid, ::getpid()) || std::ranges::count(tagged, pid))) ::kill(pid, SIGKILL);
    } else if (const auto* start = std::get_if<StartAttempt>(&effect)) {
        start_attempt(*start);
    } else if (const auto* down = std::get_if<TeardownAttempt>(&effect)) {
        teardown(down->why);
        TeardownDone done;
        done.checkpoint_step = newest_checkpoint(plan_.cfg, done.no_checkpoint_why);
        done.allocation_nodes = allocation_nodes_now();
        done.unreachable_nodes = unreachable_nodes(down->check_nodes);
        feed(done, now());
    } else if (const auto* drain = std::get_if<Drain>(&effect)) {
        pending_drains_.push_back(*drain);
    } else if (const auto* finish = std::get_if<Finish>(&effect)) {
        requeue_from_ = finish->requeue_from;
    }
}

void Supervisor::start_attempt(const StartAttempt& start) {
    const auto argv = plan_.command(start.launch, start.layout);
    if (start.layout.slurm) {
        std::ofstream hosts(plan_.hostfile_path(), std::ios::trunc);
        hosts << start.layout.hostfile();
        if (!hosts.flush()) throw Error("cannot write the hostfile " + plan_.hostfile_path().string());
    }
    const auto started = SteadyClock::now();
    attempt_ = Attempt{};
    controller_->hold_losses(false);
    attempt_.child = spawn_child(
        argv, child_environment(plan_, environ, start.launch, start.layout,
                                {control_endpoint_, ft::wire::token_to_hex(token_), launch_id_}));
    feed(AttemptStarted{attempt_.child.pid(), argv, started}, now());
}

void Supervisor::teardown(const std::string& why) {
    const pid_t pgid = attempt_.exited ? 0 : attempt_.child.pid();
    controller_->hold_losses(true);  // every process is being ended: nobody needs to hear of it
    const Teardown t = kill_everything(pgid, kLaunchIdVar, teardown_tag(), kTeardownLimit, [this](pid_t pid, int status) {
        if (pid == attempt_.child.pid() && !attempt_.exited) attempt_.reaped(status);
    });
    if (attempt_.exited) remove_session_dir(attempt_.child.pid());
    log(AttemptTornDown{core_->attempt().index, why, round3(t.ms), t.signalled, t.complete,
                        std::vector<int>(t.left.begin(), t.left.end())});
    if (!t.complete)
        say("warning: " + std::to_string(t.left.size()) + " process(es) of the job survived SIGKILL for " +
            human_ms(t.ms) + " (in uninterruptible sleep?)");
    // Output still buffered in the pipes: every writer is gone now, so this ends quickly.
    attempt_.drain_output(kDrainLimit, [this](const std::string& line, bool is_err) { handle_line(line, is_err); });
    drain_queue();
}

std::optional<std::vector<std::string>> Supervisor::allocation_nodes_now() {
    if (!plan_.allocation) return std::nullopt;
    try {
        return slurm::job_nodes(plan_.allocation->job_id, std::chrono::seconds(5));
    } catch (const std::exception& e) {
        log(AllocationUnknown{plan_.allocation->job_id, e.what()});
        return std::nullopt;
    }
}

std::optional<std::vector<std::string>> Supervisor::unreachable_nodes(const std::vector<std::string>& nodes) {
    if (nodes.empty() || !plan_.allocation) return std::nullopt;
    const auto start = now().steady;
    try {
        auto out = slurm::unreachable_nodes(plan_.allocation->job_id, nodes, kNodeCheckLimit);
        log(NodeCheck{nodes, out, round3(ms_between(start, now().steady)), std::nullopt});
        return out;
    } catch (const std::exception& e) {
        log(NodeCheck{nodes, std::nullopt, std::nullopt, e.what()});
        say(std::string("could not check the job's nodes with srun: ") + e.what());
        return std::nullopt;
    }
}

void Supervisor::run_pending_drains() {
    for (const auto& [node, reason] : std::exchange(pending_drains_, {})) {
        try {
            slurm::drain_node(node, reason, std::chrono::seconds(5));
            log(NodeDrained{node, reason});
            say("drained " + node + ": \"" + reason + "\"");
        } catch (const std::exception& e) {
            log(DrainFailed{node, reason, e.what()});
            say("could not drain " + node + " (it is still left out of this job): " + e.what());
        }
    }
}

RequeueDone Supervisor::requeue(std::int64_t step) {
    if (!plan_.allocation) {
        say("not in a Slurm job: resubmit with --resume to go on from step " + std::to_string(step));
        return {};
    }
    try {
        slurm::requeue_job(plan_.allocation->job_id);
        log(Requeue{plan_.allocation->job_id, step});
        say("requeued Slurm job " + plan_.allocation->job_id + ": it restarts from the top of its batch script and " +
            "--resume-if-checkpoint resumes from step " + std::to_string(step));
        return {};
    } catch (const std::exception& e) {
        log(RequeueFailed{plan_.allocation->job_id, e.what()});
        say(std::string("could not requeue: ") + e.what() + "; resubmit with --resume to go on from step " +
            std::to_string(step));
        return {e.what()};
    }
}

// ------------------------------------------------------------------------------------------
// what the shell sees

void Supervisor::handle_line(const std::string& line, bool is_err) {
    // Forward the ranks' output unchanged, stdout to stdout and stderr to stderr, but for known
    // harmless MPI noise (noise_filter.hpp). flashrec's own lines are for people: what the
    // launcher acts on arrives as typed records over the control plane.
    if (is_known_noise(line)) return;
    (void)!::write(is_err ? STDERR_FILENO : STDOUT_FILENO, line.data(), line.size());
    if (const auto node = prrte_lost_daemon_node(line))
        feed(DaemonLost{*node, "mpirun lost its daemon there (PRRTE: \"lost communication with a remote daemon\")"},
             now());
}

KillOutcome Supervisor::kill_hung(const RankIncident& incident) const {
    const pid_t pid = incident.pid;
    if (pid <= 1) return KillOutcome::refused;
    // Only a process of this job: a rank holding the token could name any pid in its HELLO.
    if (!is_descendant(pid, ::getpid()))
        return incident.hostname == local_host_ ? KillOutcome::refused : KillOutcome::remote;
    return ::kill(pid, SIGKILL) == 0 ? KillOutcome::killed : KillOutcome::gone;
}

KillOutcome Supervisor::kill_on_node(const RankIncident& incident, const KillOnNode& where) {
    const auto start = SteadyClock::now();
    slurm::TaskKill result = slurm::TaskKill::unreachable;
    std::string error;
    try {
        result = slurm::kill_task(where.job_id, where.node, incident.pid, kRemoteKillLimit);
    } catch (const std::exception& e) {
        error = e.what();
    }
    log(RemoteKill{incident.role, incident.pid, where.node, std::string(slurm::to_string(result)),
                   std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count(),
                   error.empty() ? std::nullopt : std::optional<std::string>(error)});
    switch (result) {
        case slurm::TaskKill::killed: return KillOutcome::killed;
        case slurm::TaskKill::gone: return KillOutcome::gone;
        case slurm::TaskKill::not_of_job: return KillOutcome::refused;
        case slurm::TaskKill::unreachable: break;
    }
    return KillOutcome::remote;  // the node did not answer: it goes as a whole (incident_book.cpp)
}

void Supervisor::drain_queue() {
    for (auto& q : inbox_.take()) {
        if (auto* hung = std::get_if<HangReported>(&q.what)) feed(*hung, q.seen);
        else if (auto* superseded = std::get_if<RankSuperseded>(&q.what)) feed(*superseded, q.seen);
        else if (auto* lost = std::get_if<RankLost>(&q.what)) feed(*lost, q.seen);
        else if (auto* record = std::get_if<json>(&q.what)) try {
                if (auto input = record_input(*record)) feed(*input, q.seen);
            } catch (const ft::records::RecordError& e) {
                // The controller checks typed records before they reach here; a bad one is
                // refused, not acted on.
                log(EventRejected{record->value("source", ""), record->value("event", ""), e.what()});
            }
    }
}

void Supervisor::read_signals() {
    signalfd_siginfo info{};
    while (::read(signals_.get(), &info, sizeof info) == sizeof info)
        if (info.ssi_signo != SIGCHLD) feed(SignalReceived{static_cast<int>(info.ssi_signo)}, now());
}

void Supervisor::tick(std::vector<RankInfo> ranks) {
    Tick t;
    for (const int pid : core_->pids_to_watch(ranks))
        if (process_alive(pid)) t.live_pids.insert(pid);
    t.ranks = std::move(ranks);
    t.heartbeats = controller_->heartbeat_count();
    for (std::size_t i = 0; i < kDropReasonCount; ++i) t.drops[i] = controller_->drop_count(static_cast<DropReason>(i));
    feed(t, now());
}

int Supervisor::run() {
    setup();
    execute(core_->start(options_.resume));
    while (core_->phase() != JobPhase::done) {
        pollfd fds[4];
        nfds_t n = 0;
        fds[n++] = {signals_.get(), POLLIN, 0};
        fds[n++] = {inbox_.wake_fd(), POLLIN, 0};
        const nfds_t out_index = n;
        if (attempt_.output_open(false)) fds[n++] = {attempt_.child.out.get(), POLLIN, 0};
        const nfds_t err_index = n;
        if (attempt_.output_open(true)) fds[n++] = {attempt_.child.err.get(), POLLIN, 0};
        const int timeout = static_cast<int>(core_->tick_interval().count());
        if (::poll(fds, n, timeout) < 0 && errno != EINTR) throw Error(std::string("poll: ") + std::strerror(errno));

        if (fds[0].revents & POLLIN) read_signals();
        reap_children([this](pid_t pid, int status) {
            if (pid != attempt_.child.pid() || attempt_.exited) return;
            attempt_.reaped(status);
            feed(MpirunExited{status}, now());
        });
        // The ranks' view first, then the records queued by then: a connection seen closed in
        // the view had its records queued before it closed (the finish rule relies on it).
        auto ranks = controller_->ranks();
        drain_queue();
        const auto sink = [this](const std::string& line, bool is_err) { handle_line(line, is_err); };
        if (attempt_.output_open(false) && (fds[out_index].revents & (POLLIN | POLLHUP | POLLERR)))
            attempt_.read_output(false, sink);
        if (attempt_.output_open(true) && (fds[err_index].revents & (POLLIN | POLLHUP | POLLERR)))
            attempt_.read_output(true, sink);
        run_pending_drains();
        tick(std::move(ranks));
        std::lock_guard lock(metrics_mutex_);
        published_metrics_ = core_->metrics();
    }

    teardown("end of the job");
    const int removed = ft::remove_all(plan_.cfg.job.name);
    log(ShmCleanup{plan_.cfg.job.name, removed});
    run_pending_drains();
    // The requeue's result decides the outcome, so it runs before the summary's job_end record:
    // the record and the exit code say the same.
    if (requeue_from_) feed(requeue(*requeue_from_), now());
    execute(core_->summary(now()));
    controller_.reset();
    metrics_.reset();
    return core_->outcome().exit_code;
}

}  // namespace

int supervise(const LaunchPlan& plan, const SupervisorOptions& options) {
    Supervisor supervisor(plan, options);
    try {
        return supervisor.run();
    } catch (...) {
        // The launcher itself failed (cannot start mpirun, out of memory, ...): leave nothing
        // behind, neither processes nor segments, then report.
        kill_everything(0, kLaunchIdVar, supervisor.teardown_tag(), std::chrono::seconds(10), nullptr);
        ft::remove_all(plan.cfg.job.name);
        throw;
    }
}

}  // namespace flashrec::launcher
