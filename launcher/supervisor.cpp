#include "supervisor.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <variant>

#include "attempt.hpp"
#include "classification.hpp"
#include "failure_step.hpp"
#include "flashrec/errors.hpp"
#include "flashrec/flashrec.hpp"
#include "flashrec/ft/contract.hpp"
#include "controller.hpp"
#include "flashrec/ft/event_log.hpp"
#include "flashrec/ft/records.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/ft/wire.hpp"
#include "metrics.hpp"
#include "node_book.hpp"
#include "noise_filter.hpp"
#include "incidents.hpp"
#include "processes.hpp"
#include "report.hpp"
#include "rank_output.hpp"
#include "restart_policy.hpp"

extern char** environ;

namespace flashrec::launcher {

namespace {

using Clock = std::chrono::steady_clock;
using SysClock = std::chrono::system_clock;
using json = nlohmann::json;
using std::chrono::milliseconds;

// Defaults in code (docs/launcher.md, "Defaults").
constexpr int kMaxColdRestarts = 2;                 // tier-3 restarts from HDF5 per launch
constexpr auto kProgressEvery = std::chrono::seconds(1);
constexpr auto kLostSettle = milliseconds(300);     // wait for a dying rank's last words
constexpr auto kByeSettle = milliseconds(500);      // BYEs still in flight when mpirun exits
constexpr auto kDrainLimit = milliseconds(1000);    // output still in the pipes after mpirun exits
constexpr auto kTeardownLimit = milliseconds(10000);
constexpr auto kInterruptGrace = milliseconds(5000);
constexpr auto kRecordWait = milliseconds(2000);    // the ranks' own tier-2 record after resuming
constexpr auto kSpawnDaemonGrace = milliseconds(10000);  // PRRTE's daemon may die after a spawn
// Once every rank of an attempt said BYE or was lost, mpirun has this long to exit by itself;
// then the launcher ends it (PRRTE was seen waiting 125 s and more on ranks that were gone).
constexpr auto kMpirunEndGrace = milliseconds(10000);
// A rank whose control connection was cut while its process lives gets this long to reconnect
// before the cut counts as a failure.
constexpr auto kReconnectWait = milliseconds(5000);

bool process_alive(pid_t pid) {
    pid_t ppid = 0;
    char state = 0;
    return pid > 0 && read_stat(pid, ppid, state) && state != 'Z' && state != 'X';
}
constexpr const char* kLaunchIdVar = ft::env::kLaunchId;

// A killed mpirun leaves its PRRTE session directory ${TMPDIR:-/tmp}/ompi.<pid> behind; a later
// mpirun given that pid refuses to start (tools/fr-mpirun). Called once mpirun is reaped.
void remove_session_dir(pid_t mpirun) {
    const char* tmp = std::getenv("TMPDIR");
    std::error_code ignored;
    std::filesystem::remove_all(std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / ("ompi." + std::to_string(mpirun)),
                                ignored);
}

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}
double round3(double v) { return std::round(v * 1000.0) / 1000.0; }
std::int64_t unix_ms(SysClock::time_point t) {
    return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}

std::string human_ms(double ms) {
    char buf[64];
    if (ms < 0) return "?";
    if (ms < 1000) std::snprintf(buf, sizeof buf, "%.1f ms", ms);
    else if (ms < 120000) std::snprintf(buf, sizeof buf, "%.2f s", ms / 1000);
    else std::snprintf(buf, sizeof buf, "%.1f min", ms / 60000);
    return buf;
}

// The host name as the heartbeat client writes it in HELLO (other characters become '-').
std::string wire_hostname(std::string name) {
    if (name.size() > ft::wire::kMaxHostnameBytes) name.resize(ft::wire::kMaxHostnameBytes);
    for (char& c : name)
        if (!ft::wire::valid_hostname(std::string_view(&c, 1))) c = '-';
    return name.empty() ? "unknown" : name;
}

bool in_step_loop(ft::wire::Phase p) {
    using ft::wire::Phase;
    return p == Phase::compute || p == Phase::grad_sync || p == Phase::commit_wait || p == Phase::optimizer;
}

bool is_spare_role(const std::string& role) { return role.rfind("spare:", 0) == 0; }

struct HungMsg {
    RankIncident incident;
    KillOutcome outcome;
    SysClock::time_point decided;
};
struct LostMsg {
    RankIncident incident;
    SysClock::time_point when;
    Clock::time_point seen;
};
struct EventMsg {
    json record;
};
using Message = std::variant<HungMsg, LostMsg, EventMsg>;

struct PendingRestart {
    std::string kind;  // warm_relaunch | cold_restart
    int number = 0;
    json reason;
    Clock::time_point first_evidence, decided;
    SysClock::time_point died_sys;
    double detect_ms = 0, teardown_ms = 0, launch_ms = -1, restore_ms = -1;
    std::int64_t steps_done_before = 0;  // steps completed before the job died
    std::optional<std::int64_t> checkpoint_step;
    bool resumed = false;
    Clock::time_point resumed_at;
    std::optional<Clock::time_point> first_step_at;  // the first step completed after resuming
    std::optional<json> rank_record;
    bool logged = false;
};

struct MetricsState {
    std::mutex mutex;
    std::int64_t steps = 0;
    double step_seconds = 0;
    double loss = NAN;
    std::uint64_t failures = 0;
    std::map<int, std::uint64_t> recoveries;  // by tier
    double last_recovery_seconds = 0;
    int spares_left = 0;
    int ranks_active = 0;
    std::uint64_t warm_relaunches = 0, cold_restarts = 0;
    std::uint64_t heartbeats = 0;
    std::array<std::uint64_t, kDropReasonCount> drops{};
    std::int64_t steps_replayed = 0;
    double time_lost_seconds = 0;
};

class Supervisor {
public:
    Supervisor(const Plan& plan, const SupervisorOptions& options)
        : plan_(plan),
          options_(options),
          layout_(plan.layout),
          nodes_(plan.allocation ? NodeBook(plan.allocation->nodes) : NodeBook()) {}
    int run();
    const std::string& launch_id() const { return launch_id_; }
    // What a teardown looks for beyond this process's own tree: nothing when this process is a
    // subreaper (orphans come back to it); else the launch id in every process's environment.
    std::string teardown_tag() const { return subreaper_ ? std::string() : launch_id_; }

private:
    // setup and output
    void setup();
    ControllerOptions controller_options();
    void log_layout();
    void announce() const;
    void say(const std::string& line) const;
    void log(std::string_view event, json fields);
    // attempts
    void start_attempt(const std::string& kind, LaunchKind launch);
    void handle_line(const std::string& line, bool is_err);
    void on_job_exit();
    bool roles_finished();
    bool any_rank_alive();
    void teardown(const std::string& why);
    void after_job_death(Observation obs, const std::string& detail, Clock::time_point first_evidence);
    void start_warm_relaunch(const json& reason, Clock::time_point first_evidence);
    bool try_cold_restart(const json& reason, Clock::time_point first_evidence);
    PendingRestart pending_restart(const char* kind, int number, const json& reason,
                                   Clock::time_point first_evidence);
    LaunchKind unfired_faults() const;
    void finish(const std::string& outcome, int code, const std::string& message);
    // nodes (Slurm)
    void node_lost(const std::string& host, const std::string& evidence);
    void node_failed(const std::string& node, std::string_view classification);
    void run_pending_drains();
    void move_off_bad_nodes(LaunchKind& kind, const json& reason);
    void follow_replacements(const std::map<std::string, const RankInfo*>& current);
    void end_checkpoint_for_requeue();
    void requeue();
    // control plane
    KillOutcome kill_hung(const RankIncident& incident);
    void push(Message m);
    void drain_queue();
    void on_hung(const HungMsg& m);
    void on_confirmed_hang(const HungMsg& m);
    void confirm_stalls();
    void on_lost(const LostMsg& m);
    void on_event(const json& record);
    void on_record(const std::string& name, const json& record);
    void on_recovery(const ft::records::Recovery& r, const json& record);
    Incident& add_incident(Incident inc);
    // periodic
    void tick();
    void check_attempt_progress(const std::vector<RankInfo>& ranks);
    void check_ranks_gone(const std::vector<RankInfo>& ranks, Clock::time_point now);
    void finalize_restart(bool failed);
    void print_progress(bool force);
    void update_metrics(const std::vector<RankInfo>& ranks);
    std::string render_metrics();
    // end
    void summary();
    std::vector<std::string> child_environment(const LaunchKind& launch) const;
    std::int64_t steps_completed() const { return std::max(last_step_ + 1, tag_steps_); }
    double median_step_ms() const;

    const Plan& plan_;
    SupervisorOptions options_;
    Layout layout_;  // where the processes of the current attempt run (changes at relaunches)
    // The allocation's nodes: lost in this attempt, given up on (lost, frozen, or a rank failed there).
    NodeBook nodes_;
    // The last in-job repair that spawned a replacement (onto the spawn host): attempt and time.
    std::pair<int, Clock::time_point> last_spawn_{-1, {}};
    // Drains decided but not yet run: scontrol runs from the main loop after the relaunch has
    // started (a thread would race the loop's waitpid(-1) for scontrol's exit status).
    std::vector<std::pair<std::string, std::string>> pending_drains_;  // node, reason
    std::optional<std::int64_t> requeue_checkpoint_;  // checkpoint-and-requeue: the step written
    const config::Config& cfg() const { return plan_.cfg; }

    std::shared_ptr<ft::EventLog> log_;
    ft::wire::Token token_{};
    std::string launch_id_;
    bool subreaper_ = false;     // PR_SET_CHILD_SUBREAPER took: orphans of the job come back here
    std::string run_id_;
    std::unique_ptr<Controller> controller_;
    std::string control_endpoint_;
    std::unique_ptr<MetricsServer> metrics_;
    MetricsState metrics_state_;
    std::optional<std::vector<std::string>> wrapper_flags_;
    std::string local_host_;

    int signal_fd_ = -1;
    int wake_fd_ = -1;
    std::mutex queue_mutex_;
    std::deque<Message> queue_;
    std::mutex killed_mutex_;
    std::set<int> killed_pids_;

    Attempt attempt_;
    int attempts_ = 0;
    int warm_relaunches_ = 0, cold_restarts_ = 0;
    std::optional<PendingRestart> restart_;
    std::vector<json> restarts_done_;
    std::set<int> old_pids_;
    bool tearing_down_ = false;
    std::optional<Observation> forced_death_;  // job-level decision taken before mpirun exited
    std::string forced_detail_;
    Clock::time_point forced_first_evidence_;
    Clock::time_point detect_end_{};  // when the launcher began tearing the dead job down
    double last_teardown_ms_ = 0;
    std::int64_t tag_steps_ = 0;      // steps completed by every active role, from their step tags

    // What the ranks said.
    std::map<int, ft::records::FaultInjected> faults_fired_;  // by pid
    std::set<std::string> fired_texts_;
    std::map<int, int> exit_requests_;        // pid -> 75/76/77 from its ending_job record
    std::map<int, int> mpi_errors_;           // error class -> count
    std::set<int> released_pids_;             // hot spares released at the end of the job
    std::vector<LostMsg> pending_lost_;
    std::vector<std::pair<HungMsg, Clock::time_point>> pending_stalls_;
    milliseconds stall_confirm_{300};
    SilentNodes silent_nodes_{milliseconds(0)};  // window set in setup()

    std::vector<Incident> incidents_;
    std::vector<ft::records::Recovery> recoveries_;
    // In-job recoveries of this attempt, to link incidents classified after the record arrived.
    struct RecoveryNote {
        std::set<std::string> roles;
        Clock::time_point at;
        std::string by;
        double ms = -1;
    };
    std::vector<RecoveryNote> recovery_notes_;
    std::vector<json> checkpoints_;
    std::optional<ft::records::JobStats> job_stats_;
    std::optional<Clock::time_point> first_failure_since_progress_;

    // Progress.
    Clock::time_point job_start_;
    SysClock::time_point job_start_sys_;
    std::int64_t last_step_ = -1;  // newest completed step index seen (step events)
    double last_loss_ = NAN;
    std::deque<std::pair<Clock::time_point, std::int64_t>> rate_window_;
    Clock::time_point last_progress_print_{};
    std::int64_t last_printed_step_ = -2;
    Clock::time_point last_progress_time_{};  // any role's tag moved
    Clock::time_point last_stall_check_{};    // a longer gap than usual: this process was paused
    std::map<std::string, std::int64_t> last_tags_;
    std::string last_recovery_text_ = "none";
    Clock::time_point last_ranks_poll_{};

    // Ending.
    bool done_ = false;
    int exit_code_ = kExitFailed;
    std::string outcome_;
    std::string end_message_;
    int interrupted_ = 0;
    Clock::time_point interrupt_deadline_{};
};

// ------------------------------------------------------------------------------------------

void Supervisor::say(const std::string& line) const {
    std::string text = "flashrec-launch: " + line + "\n";
    (void)!::write(STDERR_FILENO, text.data(), text.size());
}

void Supervisor::log(std::string_view event, json fields) {
    try {
        log_->log_event(event, fields);
    } catch (const std::exception& e) {
        say(std::string("event log: ") + e.what());
    }
}

std::vector<std::string> Supervisor::child_environment(const LaunchKind& launch) const {
    std::vector<std::string> env;
    // The variables this launch sets: an inherited value must never reach the ranks.
    static constexpr std::array<std::string_view, 8> kOurs = {
        ft::env::kControl, ft::env::kToken,  ft::env::kLaunchId,           ft::env::kRelaunch,
        ft::env::kResume,  ft::env::kRoleOfRank, ft::env::kCheckpointAndExit, ft::env::kSpareHost};
    for (char** e = environ; *e; ++e) {
        const std::string_view entry(*e);
        const auto ours = [&](std::string_view name) {
            return entry.size() > name.size() && entry.substr(0, name.size()) == name && entry[name.size()] == '=';
        };
        if (std::none_of(kOurs.begin(), kOurs.end(), ours)) env.emplace_back(entry);
    }
    env.push_back(std::string(ft::env::kControl) + "=" + control_endpoint_);
    env.push_back(std::string(ft::env::kToken) + "=" + ft::wire::token_to_hex(token_));
    env.push_back(std::string(kLaunchIdVar) + "=" + launch_id_);
    for (const auto& [name, value] : plan_.rank_variables(launch, layout_)) env.push_back(name + "=" + value);
    if (!plan_.btl_if.empty()) env.push_back(std::string(ft::env::kBtlIf) + "=" + plan_.btl_if);
    return env;
}

void Supervisor::setup() {
    job_start_ = Clock::now();
    job_start_sys_ = SysClock::now();
    local_host_ = wire_hostname(plan_.local_host);
    // Signals arrive through a signalfd; block them before any thread exists so that every
    // thread inherits the mask (the child gets a clean mask from spawn_child).
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&set, s);
    if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) throw Error("cannot block signals");
    signal_fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (signal_fd_ < 0 || wake_fd_ < 0) throw Error(std::string("signalfd/eventfd: ") + std::strerror(errno));
    ::signal(SIGPIPE, SIG_IGN);
    subreaper_ = become_subreaper();
    if (!subreaper_) say("warning: cannot become a child subreaper; orphaned ranks are found by their tag only");

    token_ = ft::wire::generate_token();
    launch_id_ = ft::wire::token_to_hex(ft::wire::generate_token()).substr(0, 16);
    run_id_ = launch_id_.substr(0, 8);
    std::error_code ec;
    if (plan_.events_path.has_parent_path()) std::filesystem::create_directories(plan_.events_path.parent_path(), ec);
    log_ = std::make_shared<ft::EventLog>(plan_.events_path);
    std::string why;
    wrapper_flags_ = wrapper_flags(plan_.wrapper, why);

    const auto& d = cfg().detection;
    ControllerOptions co = controller_options();
    log("job_start", {{"job", cfg().job.name},
                      {"run_id", run_id_},
                      {"config", plan_.config_path.string()},
                      {"program", plan_.program.string()},
                      {"launcher_version", flashrec::version()},
                      {"launcher_pid", ::getpid()},
                      {"host", plan_.local_host},
                      {"resume", options_.resume},
                      {"faults", plan_.faults},
                      {"steps", cfg().job.steps},
                      {"warm_relaunches_allowed", cfg().recovery.warm_relaunches},
                      {"checkpoint_dir", cfg().checkpoint.dir},
                      {"hang_timeout_ms", d.hang_timeout_ms},
                      {"heartbeat_ms", d.heartbeat_ms},
                      {"events", plan_.events_path.string()}});
    controller_ = std::make_unique<Controller>(std::move(co));
    control_endpoint_ = controller_->endpoint();
    // A wildcard bind is reachable on loopback from this machine; ranks on other nodes need the
    // host's address (the Slurm path hands that out).
    if (control_endpoint_.rfind("0.0.0.0:", 0) == 0) control_endpoint_ = "127.0.0.1" + control_endpoint_.substr(7);
    if (control_endpoint_.rfind("[::]:", 0) == 0) control_endpoint_ = "[::1]" + control_endpoint_.substr(4);

    if (d.metrics) {
        metrics_ = std::make_unique<MetricsServer>(options_.metrics_bind, static_cast<std::uint16_t>(d.metrics_port),
                                                   [this] { return render_metrics(); });
    }

    {
        std::lock_guard lock(metrics_state_.mutex);
        metrics_state_.spares_left = cfg().job.hot_spares;
    }
    log_layout();
    announce();
}

// The control plane's options: where it listens, the hang rules, and the callbacks that hand
// its findings to the main loop.
ControllerOptions Supervisor::controller_options() {
    ControllerOptions co;
    const auto& d = cfg().detection;
    co.bind_address = d.bind;
    if (!plan_.btl_if.empty())
        say(std::string("MPI network: ") + ft::env::kBtlIf + "=" + plan_.btl_if +
            " (not set: the subnet of this node's route to the other nodes; set it to pick another network)");
    if (plan_.allocation && (d.bind == "127.0.0.1" || d.bind == "localhost" || d.bind == "::1")) {
        // Ranks on other nodes cannot reach loopback: listen on the address this node uses to
        // reach the job's other nodes (the token still guards the port).
        for (const auto& node : plan_.allocation->nodes) {
            if (short_name(node) == short_name(plan_.local_host)) continue;
            const std::string address = address_towards(node);
            if (!address.empty()) {
                co.bind_address = address;
                say("control plane: listening on " + address + " (the route to " + node +
                    "), since detection.bind = " + d.bind + " cannot be reached from other nodes");
            }
            break;
        }
    }
    co.port = static_cast<std::uint16_t>(d.port);
    co.token = token_;
    co.hang_timeout = milliseconds(d.hang_timeout_ms);
    co.check_period = milliseconds(std::clamp(d.heartbeat_ms, 10, 100));
    stall_confirm_ = 2 * milliseconds(d.heartbeat_ms) + co.check_period;
    silent_nodes_ = SilentNodes(milliseconds(d.heartbeat_ms * 3 + 500));
    co.event_log = log_;
    co.on_hung = [this](const RankIncident& incident) {
        // A silent rank is killed at once, on the controller's thread. A stalled one (heartbeats
        // arrive, the tag does not move) is confirmed first: see on_hung().
        const KillOutcome outcome =
            incident.reason == IncidentReason::stalled ? KillOutcome::pending : kill_hung(incident);
        push(HungMsg{incident, outcome, SysClock::now()});
    };
    co.on_lost = [this](const RankIncident& incident) {
        push(LostMsg{incident, SysClock::now(), Clock::now()});
    };
    co.on_event = [this](const json& record) { push(EventMsg{record}); };
    return co;
}

// The `layout` event: the nodes with their ranks, the hot spares, the spare nodes.
void Supervisor::log_layout() {
    json nodes = json::array();
    for (const auto& node : layout_.nodes) {
        json ranks = json::array();
        for (const auto& p : layout_.processes)
            if (!p.spare && p.node == node) ranks.push_back({{"rank", p.rank}, {"role", p.role}});
        nodes.push_back({{"node", node}, {"ranks", ranks}});
    }
    json spares = json::array();
    for (const auto& p : layout_.processes)
        if (p.spare) spares.push_back({{"rank", p.rank}, {"role", p.role}, {"node", p.node}});
    const auto& job = cfg().job;
    log("layout", {{"shape", {{"dp", job.dp}, {"tp", job.tp}, {"pp", job.pp}}},
                   {"processes", plan_.process_count()},
                   {"active", job.world_size()},
                   {"placement", job.placement},
                   {"virtual_nodes", layout_.virtual_nodes},
                   {"nodes", nodes},
                   {"hot_spares", spares},
                   {"spare_nodes", layout_.reserve_nodes},
                   {"control", control_endpoint_},
                   {"metrics", metrics_ ? json(metrics_->endpoint()) : json(nullptr)}});
}

// The job in one line for people: its shape, its nodes, the control plane, the event log.
void Supervisor::announce() const {
    const auto& job = cfg().job;
    say("job " + job.name + ": " + std::to_string(job.world_size()) + " rank" + (job.world_size() == 1 ? "" : "s") +
        " (dp " + std::to_string(job.dp) + " x tp " + std::to_string(job.tp) + " x pp " + std::to_string(job.pp) +
        ") on " + std::to_string(job.nodes) + " node" + (job.nodes == 1 ? "" : "s") + " + " +
        std::to_string(job.hot_spares) + " hot spare" + (job.hot_spares == 1 ? "" : "s") +
        (layout_.slurm ? " + " + std::to_string(layout_.reserve_nodes.size()) + " spare node(s)" +
                             (layout_.reserve_nodes.empty() ? "" : " " + shell_join(layout_.reserve_nodes)) +
                             " (Slurm job " + plan_.allocation->job_id + ")"
                       : std::string()) +
        "; control plane " +
        control_endpoint_ + (metrics_ ? "; metrics http://" + metrics_->endpoint() + "/metrics" : std::string()) +
        "; event log " + plan_.events_path.string());
}

// ------------------------------------------------------------------------------------------
// attempts

void Supervisor::start_attempt(const std::string& kind, LaunchKind launch) {
    attempt_ = Attempt{};
    attempt_.index = ++attempts_;
    attempt_.kind = kind;
    attempt_.launch = std::move(launch);
    attempt_.argv = plan_.command(attempt_.launch, layout_);
    if (layout_.slurm) {
        std::ofstream hosts(plan_.hostfile_path(), std::ios::trunc);
        hosts << layout_.hostfile();
        if (!hosts.flush()) throw Error("cannot write the hostfile " + plan_.hostfile_path().string());
    }
    attempt_.start = Clock::now();
    attempt_.child = spawn_child(attempt_.argv, child_environment(attempt_.launch));
    first_failure_since_progress_.reset();
    exit_requests_.clear();
    last_progress_time_ = attempt_.start;
    last_tags_.clear();
    pending_lost_.clear();
    pending_stalls_.clear();
    recovery_notes_.clear();
    rate_window_.clear();
    tag_steps_ = 0;
    json fields = {{"attempt", attempt_.index},
                   {"kind", kind},
                   {"pid", attempt_.child.pid()},
                   {"command", attempt_.argv},
                   {"relaunch", attempt_.launch.relaunch},
                   {"resume", attempt_.launch.resume}};
    if (wrapper_flags_) fields["mpirun_flags"] = *wrapper_flags_;
    if (layout_.slurm) {
        fields["nodes"] = layout_.nodes;
        fields["spare_nodes"] = layout_.reserve_nodes;
        fields["role_of_rank"] = layout_.role_of_rank();
    }
    log("launch", fields);
    if (kind != "initial")
        say("starting the MPI job again (" + kind + ", attempt " + std::to_string(attempt_.index) +
            (attempt_.launch.relaunch ? std::string(", ") + ft::env::kRelaunch + "=1" : "") + (attempt_.launch.resume ? ", --resume" : "") +
            "): " + shell_join(attempt_.argv));
}

void Supervisor::handle_line(const std::string& line, bool is_err) {
    // Forward the ranks' output unchanged, stdout to stdout and stderr to stderr, but for known
    // harmless MPI noise (noise_filter.hpp). flashrec's own lines are for people: what the
    // launcher acts on arrives as typed records over the control plane (on_event).
    if (is_known_noise(line)) return;
    (void)!::write(is_err ? STDERR_FILENO : STDOUT_FILENO, line.data(), line.size());
    if (const auto node = prrte_lost_daemon_node(line))
        node_lost(*node, "mpirun lost its daemon there (PRRTE: \"lost communication with a remote daemon\")");
}

// The job finished when every active role said BYE after its step loop ended. The controller's
// step tag is the one of the last heartbeat (it can lag the loop by a heartbeat period), so the
// leader's job_stats event (sent by the runtime when the loop completed) also counts.
bool Supervisor::roles_finished() {
    if (!controller_) return false;
    for (const auto& role : layout_.active_roles) {
        const auto info = controller_->rank(role);
        if (!info || info->status != RankStatus::exited) return false;
        if (info->step_tag < cfg().job.steps && !attempt_.job_stats_seen) return false;
    }
    return true;
}

bool Supervisor::any_rank_alive() {
    for (const auto& r : controller_->ranks()) {
        if (r.pid <= 0 || r.registered_at < attempt_.start) continue;
        pid_t ppid = 0;
        char state = 0;
        if (read_stat(r.pid, ppid, state) && state != 'Z' && state != 'X') return true;
    }
    return false;
}

void Supervisor::teardown(const std::string& why) {
    tearing_down_ = true;
    for (const auto& r : controller_->ranks())
        if (r.pid > 0) old_pids_.insert(r.pid);
    const pid_t pgid = attempt_.exited ? 0 : attempt_.child.pid();
    const Teardown t = kill_everything(pgid, kLaunchIdVar, teardown_tag(), kTeardownLimit, [this](pid_t pid, int status) {
        if (pid == attempt_.child.pid() && !attempt_.exited) attempt_.reaped(status);
    });
    if (attempt_.exited) remove_session_dir(attempt_.child.pid());
    json left = json::array();
    for (pid_t p : t.left) left.push_back(p);
    log("teardown", {{"attempt", attempt_.index},
                     {"why", why},
                     {"ms", round3(t.ms)},
                     {"signalled", t.signalled},
                     {"complete", t.complete},
                     {"left", left}});
    if (!t.complete) say("warning: " + std::to_string(t.left.size()) + " process(es) of the job survived SIGKILL for " +
                         human_ms(t.ms) + " (in uninterruptible sleep?)");
    // Output still buffered in the pipes: every writer is gone now, so this ends quickly.
    attempt_.drain_output(kDrainLimit, [this](const std::string& line, bool is_err) { handle_line(line, is_err); });
    drain_queue();
    tearing_down_ = false;
}

void Supervisor::on_job_exit() {
    // BYEs of ranks that exited just before mpirun may still be on their way to the controller.
    if (!roles_finished() && !any_rank_alive()) {
        const auto until = Clock::now() + kByeSettle;
        while (!roles_finished() && Clock::now() < until) {
            std::this_thread::sleep_for(milliseconds(10));
            drain_queue();
        }
    }
    const bool finished = roles_finished();
    const int status = attempt_.status;
    json fields = {{"attempt", attempt_.index},
                   {"pid", attempt_.child.pid()},
                   {"status", describe_status(status)},
                   {"roles_finished", finished}};
    if (WIFEXITED(status)) fields["exit_code"] = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) fields["signal"] = WTERMSIG(status);
    if (finished && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        fields["note"] = "mpirun's exit status is not the job's under ULFM (docs/ulfm-traps.md trap 9): judged by the ranks";
    log("mpirun_exited", fields);
    const Clock::time_point first_evidence =
        forced_death_ ? forced_first_evidence_ : first_failure_since_progress_.value_or(attempt_.exit_time);
    detect_end_ = Clock::now();
    teardown(finished ? "the job finished; stragglers" : "the MPI job ended early");
    last_teardown_ms_ = ms_between(detect_end_, Clock::now());

    if (finished) {
        finalize_restart(false);
        finish("finished", kExitOk, "");
        return;
    }
    if (attempt_.launch.checkpoint_and_exit && !interrupted_ && !nodes_.any_lost()) {
        end_checkpoint_for_requeue();
        return;
    }
    if (interrupted_) {
        finalize_restart(true);
        finish("interrupted", 128 + interrupted_, std::string("interrupted by ") + ::strsignal(interrupted_));
        return;
    }
    if (restart_ && !restart_->logged) finalize_restart(true);
    bool registered = false;
    for (const auto& r : controller_->ranks()) registered = registered || r.registered_at >= attempt_.start;
    if (!registered) {
        // Not a single rank reached the control plane: a trainer that does not use flashrec, or
        // one that cannot start. Its exit status is all there is.
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            finish("finished", kExitOk, "no rank ever connected to the control plane: success judged by mpirun's exit code only");
            return;
        }
        if (attempt_.index == 1) {
            finish("failed_to_start", WIFEXITED(status) && WEXITSTATUS(status) == ft::kExitBadConfig ? kExitUsage : kExitFailed,
                   "the job never started: no rank connected to the control plane, mpirun ended with " +
                       describe_status(status));
            return;
        }
    }
    DeathEvidence evidence;
    evidence.forced = forced_death_;
    evidence.forced_detail = forced_detail_;
    evidence.lost_nodes.assign(nodes_.lost().begin(), nodes_.lost().end());
    for (const auto& [pid, code] : exit_requests_) evidence.requested_exit_code = std::max(evidence.requested_exit_code, code);
    evidence.mpirun_status = status;
    const Death death = observe_death(evidence);
    forced_death_.reset();
    after_job_death(death.observation, death.detail, first_evidence);
}

void Supervisor::after_job_death(Observation obs, const std::string& detail, Clock::time_point first_evidence) {
    Budgets budgets;
    budgets.warm_used = warm_relaunches_;
    budgets.warm_allowed = cfg().recovery.warm_relaunches;
    budgets.cold_used = cold_restarts_;
    budgets.cold_allowed = kMaxColdRestarts;
    budgets.checkpoint_dir = !cfg().checkpoint.dir.empty();
    const AttemptFacts facts{attempt_.kind == "warm_relaunch", attempt_.progressed, nodes_.any_lost()};
    const Decision decision = decide(obs, budgets, facts);
    const Rule& rule = *decision.rule;
    Incident inc;
    inc.attempt = attempt_.index;
    inc.obs = obs;
    inc.rule = &rule;
    inc.role = "*";
    inc.detail = detail;
    inc.step = last_step_ + 1;
    Incident& recorded = add_incident(inc);
    const json reason = {{"incident", recorded.id}, {"classification", rule.classification}, {"detail", detail}};
    say("the MPI job died: " + detail + " -> " + std::string(rule.classification) + ", " +
        std::string(to_string(rule.action)) + (rule.tier ? " (tier " + std::to_string(rule.tier) + ")" : ""));
    for (const auto& node : nodes_.take_lost()) node_failed(node, rule.classification);
    if (decision.warm_before_hdf5)
        log("warm_relaunch_before_hdf5", {{"attempt", attempt_.index},
                                          {"why", "state lost in-job, but no node was lost: "
                                                  "the dead processes' node-local segments may hold it"}});
    for (const RestartStep& step : decision.steps) {
        if (step.kind == Restart::warm_relaunch) {
            if (step.refused) {
                log("warm_relaunch_refused", {{"reason", reason}, {"why", *step.refused}, {"used", warm_relaunches_}});
                continue;
            }
            start_warm_relaunch(reason, first_evidence);
            recorded.recovered_by = decision.warm_before_hdf5
                                        ? "warm relaunch " + std::to_string(warm_relaunches_) +
                                              " (node-local segments of dead processes)"
                                    : attempt_.launch.checkpoint_and_exit
                                        ? "checkpoint for requeue (slurm.when_spares_exhausted)"
                                        : "warm relaunch " + std::to_string(warm_relaunches_);
            return;
        }
        if (step.refused) {
            log("cold_restart_refused", {{"reason", reason}, {"why", *step.refused}});
            continue;
        }
        if (try_cold_restart(reason, first_evidence)) {
            recorded.recovered_by = "HDF5 restart " + std::to_string(cold_restarts_);
            return;
        }
    }
    finish(decision.outcome, decision.exit_code, decision.message);
}

PendingRestart Supervisor::pending_restart(const char* kind, int number, const json& reason,
                                           Clock::time_point first_evidence) {
    PendingRestart r;
    r.kind = kind;
    r.number = number;
    r.reason = reason;
    r.first_evidence = first_evidence;
    r.decided = Clock::now();
    r.died_sys = SysClock::now() - std::chrono::duration_cast<SysClock::duration>(r.decided - first_evidence);
    r.detect_ms = std::max(0.0, ms_between(first_evidence, detect_end_));
    r.teardown_ms = last_teardown_ms_;
    r.steps_done_before = steps_completed();
    return r;
}

// A new attempt keeps the --fault specs that have not fired yet (one that fired must not
// fire again when its step is replayed).
LaunchKind Supervisor::unfired_faults() const {
    LaunchKind kind;
    for (const auto& f : plan_.faults)
        if (!fired_texts_.count(f)) kind.faults.push_back(f);
    return kind;
}

void Supervisor::start_warm_relaunch(const json& reason, Clock::time_point first_evidence) {
    ++warm_relaunches_;
    const bool progressed = last_step_ >= 0 || attempt_.progressed;
    PendingRestart r = pending_restart("warm_relaunch", warm_relaunches_, reason, first_evidence);
    LaunchKind kind = unfired_faults();
    // Nothing was ever committed: there is nothing to restore, start as the job first did.
    kind.relaunch = progressed;
    kind.resume = !progressed && attempt_.launch.resume;
    move_off_bad_nodes(kind, reason);
    {
        std::lock_guard lock(metrics_state_.mutex);
        ++metrics_state_.warm_relaunches;
    }
    restart_ = r;
    start_attempt(kind.checkpoint_and_exit ? "checkpoint_for_requeue" : "warm_relaunch", kind);
}

// The policy allowed it (decide()); it starts when a complete checkpoint for this shape exists.
bool Supervisor::try_cold_restart(const json& reason, Clock::time_point first_evidence) {
    std::string why;
    const std::optional<std::int64_t> step = newest_checkpoint(cfg(), why);
    if (!step) {
        log("cold_restart_refused", {{"reason", reason}, {"why", why}});
        say("no HDF5 checkpoint to restart from: " + why);
        return false;
    }
    ++cold_restarts_;
    PendingRestart r = pending_restart("cold_restart", cold_restarts_, reason, first_evidence);
    r.checkpoint_step = *step;
    LaunchKind kind = unfired_faults();
    kind.resume = true;
    move_off_bad_nodes(kind, reason);
    {
        std::lock_guard lock(metrics_state_.mutex);
        ++metrics_state_.cold_restarts;
    }
    say("restarting from the HDF5 checkpoint of step " + std::to_string(*step) + " in " + cfg().checkpoint.dir +
        " (tier 3, restart " + std::to_string(cold_restarts_) + " of at most " + std::to_string(kMaxColdRestarts) + ")");
    restart_ = r;
    start_attempt("cold_restart", kind);
    return true;
}

void Supervisor::finalize_restart(bool failed) {
    if (!restart_ || restart_->logged) return;
    auto& r = *restart_;
    r.logged = true;
    const double total = r.resumed ? ms_between(r.first_evidence, r.resumed_at) : -1;
    json phases = {{"detect", round3(r.detect_ms)}, {"teardown", round3(r.teardown_ms)}};
    if (r.launch_ms >= 0) phases["launch"] = round3(r.launch_ms);
    if (r.restore_ms >= 0) phases["restore"] = round3(r.restore_ms);
    if (r.resumed && r.first_step_at) phases["resumed"] = round3(ms_between(r.resumed_at, *r.first_step_at));
    json fields = {{r.kind == "warm_relaunch" ? "relaunch" : "restart", r.number},
                   {"tier", r.kind == "warm_relaunch" ? 2 : 3},
                   {"attempt", attempt_.index},
                   {"reason", r.reason},
                   {"outcome", failed ? "failed" : "resumed"},
                   {"phases_ms", phases},
                   {"steps_done_before", r.steps_done_before},
                   {"died_unix_ms", unix_ms(r.died_sys)}};
    if (r.kind == "warm_relaunch") fields["of"] = cfg().recovery.warm_relaunches;
    if (r.checkpoint_step) fields["checkpoint_step"] = *r.checkpoint_step;
    if (total >= 0) {
        fields["total_ms"] = round3(total);
        fields["resumed_unix_ms"] = unix_ms(r.died_sys) + static_cast<std::int64_t>(total);
    }
    std::int64_t restored = -1;
    if (r.rank_record) {
        fields["rank_record"] = *r.rank_record;
        restored = r.rank_record->value("recovery_version", std::int64_t{-1});
    } else if (r.checkpoint_step) {
        restored = *r.checkpoint_step;
    }
    if (restored >= 0) {
        fields["restored_version"] = restored;
        fields["steps_replayed"] = std::max<std::int64_t>(0, r.steps_done_before - restored);
    }
    log(r.kind, fields);
    restarts_done_.push_back(fields);
    if (!failed && total >= 0) {
        const std::string what = r.kind == "warm_relaunch" ? "warm relaunch " + std::to_string(r.number)
                                                            : "HDF5 restart " + std::to_string(r.number);
        last_recovery_text_ = what + " in " + human_ms(total) +
                              (restored >= 0 ? ", resumed at step " + std::to_string(restored) : std::string());
        say("RECOVERED (tier " + std::to_string(r.kind == "warm_relaunch" ? 2 : 3) + "): " + last_recovery_text_ +
            " [detect " + human_ms(r.detect_ms) + ", teardown " + human_ms(r.teardown_ms) + ", launch " +
            human_ms(r.launch_ms) + ", restore " + human_ms(r.restore_ms) + "]");
        std::lock_guard lock(metrics_state_.mutex);
        ++metrics_state_.recoveries[r.kind == "warm_relaunch" ? 2 : 3];
        metrics_state_.last_recovery_seconds = total / 1000;
    }
}

void Supervisor::finish(const std::string& outcome, int code, const std::string& message) {
    done_ = true;
    outcome_ = outcome;
    exit_code_ = code;
    end_message_ = message;
}

// ------------------------------------------------------------------------------------------
// nodes (Slurm)

void Supervisor::node_lost(const std::string& host, const std::string& evidence) {
    const std::string node = nodes_.node_of_host(host);
    if (node.empty() || nodes_.is_lost(node) || nodes_.given_up(node) || tearing_down_) return;
    // An in-job repair is under way: a rank was lost (maybe not yet classified), a tier-1
    // incident is unrecovered, or a role reports the recovery phase.
    const auto ranks = controller_->ranks();
    const bool repairing =
        !pending_lost_.empty() ||
        std::any_of(incidents_.begin(), incidents_.end(),
                    [&](const Incident& i) { return i.attempt == attempt_.index && i.rule->tier == 1 && !i.recovered; }) ||
        std::any_of(ranks.begin(), ranks.end(), [&](const RankInfo& r) {
            return r.registered_at >= attempt_.start && r.phase == ft::wire::Phase::recovery;
        });
    const bool just_spawned =
        last_spawn_.first == attempt_.index && Clock::now() - last_spawn_.second < kSpawnDaemonGrace;
    const bool spawning = node == layout_.spawn_host() && (repairing || just_spawned);
    if (spawning) {
        // PRRTE 3.0.13 sometimes loses (or crashes) its daemon on the node a replacement is being
        // (or was just) spawned onto (docs/slurm.md, "Traps"). The node itself is fine: the
        // relaunch that follows puts the replacement there all the same. Were the node really
        // gone, that relaunch would lose it again, this time as a node loss.
        log("spawn_daemon_lost", {{"node", node}, {"attempt", attempt_.index}, {"evidence", evidence}});
        say("mpirun lost its daemon on spare node " + node + " while or just after spawning a replacement there: " +
            "the MPI job ends; the relaunch puts the replacement on " + node);
        return;
    }
    nodes_.mark_lost(node);
    if (!first_failure_since_progress_) first_failure_since_progress_ = Clock::now();
    log("node_lost", {{"node", node}, {"attempt", attempt_.index}, {"evidence", evidence}, {"step", steps_completed()}});
    say("FAILURE: node " + node + " lost: " + evidence);
}

void Supervisor::node_failed(const std::string& node, std::string_view classification) {
    if (!nodes_.give_up(node)) return;
    if (!plan_.allocation) return;
    if (!cfg().slurm.drain_on_failure) {
        log("drain_skipped", {{"node", node}, {"why", "slurm.drain_on_failure is false"}});
        return;
    }
    const std::string reason = slurm::drain_reason(cfg().slurm.drain_reason, std::string(classification),
                                                   steps_completed(), node, plan_.allocation->job_id);
    pending_drains_.emplace_back(node, reason);
}

void Supervisor::run_pending_drains() {
    for (const auto& [node, reason] : std::exchange(pending_drains_, {})) {
        try {
            slurm::drain_node(node, reason, std::chrono::seconds(5));
            log("node_drained", {{"node", node}, {"reason", reason}});
            say("drained " + node + ": \"" + reason + "\"");
        } catch (const std::exception& e) {
            log("drain_failed", {{"node", node}, {"reason", reason}, {"error", e.what()}});
            say("could not drain " + node + " (it is still left out of this job): " + e.what());
        }
    }
}

// Before a relaunch: processes on nodes flashrec gave up on move to spare nodes, or, with none
// left, to the other nodes (slurm.when_spares_exhausted).
void Supervisor::move_off_bad_nodes(LaunchKind& kind, const json& reason) {
    const std::set<std::string> gone = nodes_.given_up_in(layout_);
    if (gone.empty()) return;
    const Relayout r = replace_nodes(layout_, gone);
    json replaced = json::array();
    for (const auto& [from, to] : r.replaced) {
        replaced.push_back({{"node", from}, {"spare_node", to}});
        say("spare node " + to + " takes the ranks of " + from);
    }
    const std::string& policy = cfg().slurm.when_spares_exhausted;
    if (!r.doubled_up.empty()) {
        std::string nodes;
        for (const auto& n : r.doubled_up) nodes += (nodes.empty() ? "" : ", ") + n;
        kind.checkpoint_and_exit = policy == "checkpoint-and-requeue" && kind.relaunch;
        say("no spare node left for " + nodes + ": slurm.when_spares_exhausted = " + policy + ": its ranks " +
            (kind.checkpoint_and_exit ? "join the other nodes just long enough to write an HDF5 checkpoint, then the job "
                                        "is requeued"
                                      : "run on the other nodes from now on (same results, slower steps)"));
    }
    log("relayout", {{"reason", reason},
                     {"bad_nodes", gone},
                     {"replaced", replaced},
                     {"doubled_up", r.doubled_up},
                     {"policy", r.doubled_up.empty() ? json(nullptr) : json(policy)},
                     {"nodes", r.layout.nodes},
                     {"spare_nodes", r.layout.reserve_nodes}});
    layout_ = r.layout;
}

// A role that registered from another host than the layout says (a replacement spawned onto the
// spare node): that is where its snapshots are from now on.
void Supervisor::follow_replacements(const std::map<std::string, const RankInfo*>& current) {
    if (!layout_.slurm) return;
    for (auto& p : layout_.processes) {
        const auto it = current.find(p.role);
        if (p.spare || it == current.end()) continue;
        const std::string node = nodes_.node_of_host(it->second->hostname);
        if (node.empty() || node == p.node) continue;
        log("role_moved", {{"role", p.role}, {"from", p.node}, {"to", node}, {"pid", it->second->pid}});
        say(p.role + " now runs on " + node + " (was " + p.node + ")");
        p.node = node;
        std::erase(layout_.reserve_nodes, node);
    }
}

// The checkpoint-only relaunch ended: requeue if its checkpoint is there.
void Supervisor::end_checkpoint_for_requeue() {
    std::string why;
    const std::optional<std::int64_t> step = newest_checkpoint(cfg(), why);
    restart_.reset();
    if (!step) {
        finish("spares_exhausted", kExitNoSpares, "spares exhausted, and the checkpoint for the requeue failed: " + why);
        return;
    }
    requeue_checkpoint_ = *step;
    log("checkpoint_for_requeue", {{"step", *step}, {"dir", cfg().checkpoint.dir}, {"attempt", attempt_.index}});
    finish("requeued", kExitRequeued,
           "no spare node left: checkpoint of step " + std::to_string(*step) + " written to " + cfg().checkpoint.dir +
               (plan_.allocation ? "; requeueing Slurm job " + plan_.allocation->job_id : std::string()));
}

void Supervisor::requeue() {
    if (!plan_.allocation) {
        say("not in a Slurm job: resubmit with --resume to go on from step " + std::to_string(*requeue_checkpoint_));
        return;
    }
    try {
        slurm::requeue_job(plan_.allocation->job_id);
        log("requeue", {{"job_id", plan_.allocation->job_id}, {"checkpoint_step", *requeue_checkpoint_}});
        say("requeued Slurm job " + plan_.allocation->job_id + ": it restarts from the top of its batch script and " +
            "--resume-if-checkpoint resumes from step " + std::to_string(*requeue_checkpoint_));
    } catch (const std::exception& e) {
        log("requeue_failed", {{"job_id", plan_.allocation->job_id}, {"error", e.what()}});
        say(std::string("could not requeue: ") + e.what() + "; resubmit with --resume to go on from step " +
            std::to_string(*requeue_checkpoint_));
        exit_code_ = kExitNoSpares;
    }
}

// ------------------------------------------------------------------------------------------
// control plane

KillOutcome Supervisor::kill_hung(const RankIncident& incident) {
    const pid_t pid = incident.pid;
    if (pid <= 1) return KillOutcome::refused;
    // Only a process of this job: a rank holding the token could name any pid in its HELLO.
    if (!is_descendant(pid, ::getpid())) return incident.hostname == local_host_ ? KillOutcome::refused
                                                                                 : KillOutcome::remote;
    if (::kill(pid, SIGKILL) != 0) return KillOutcome::gone;
    std::lock_guard lock(killed_mutex_);
    killed_pids_.insert(pid);
    return KillOutcome::killed;
}

void Supervisor::push(Message m) {
    {
        std::lock_guard lock(queue_mutex_);
        queue_.push_back(std::move(m));
    }
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
}

void Supervisor::drain_queue() {
    std::deque<Message> batch;
    {
        std::lock_guard lock(queue_mutex_);
        batch.swap(queue_);
    }
    for (auto& m : batch) {
        if (auto* h = std::get_if<HungMsg>(&m)) on_hung(*h);
        else if (auto* l = std::get_if<LostMsg>(&m)) on_lost(*l);
        else if (auto* e = std::get_if<EventMsg>(&m)) on_event(e->record);
    }
}

Incident& Supervisor::add_incident(Incident inc) {
    inc.id = static_cast<int>(incidents_.size()) + 1;
    inc.at = Clock::now();
    if (!inc.rule) inc.rule = &classify(inc.obs);
    log("failure", failure_record(inc, mpi_errors_));
    if (!first_failure_since_progress_) first_failure_since_progress_ = Clock::now();
    {
        std::lock_guard lock(metrics_state_.mutex);
        ++metrics_state_.failures;
    }
    incidents_.push_back(std::move(inc));
    return incidents_.back();
}

void Supervisor::on_hung(const HungMsg& pending) {
    const auto& inc = pending.incident;
    if (old_pids_.count(inc.pid) || tearing_down_ || interrupted_) return;
    if (pending.outcome == KillOutcome::pending) {
        // A rank that waited a long time behind a hung peer (in the all-reduce) looks stalled for
        // the moment between the others' first heartbeat after the repair and its own. Confirm
        // the stall over a few heartbeat periods before killing it.
        pending_stalls_.push_back({pending, Clock::now() + stall_confirm_});
        return;
    }
    on_confirmed_hang(pending);
}

void Supervisor::confirm_stalls() {
    const auto now = Clock::now();
    for (auto it = pending_stalls_.begin(); it != pending_stalls_.end();) {
        if (now < it->second && !attempt_.exited) {
            ++it;
            continue;
        }
        HungMsg m = it->first;
        it = pending_stalls_.erase(it);
        const auto& inc = m.incident;
        if (old_pids_.count(inc.pid) || attempt_.exited) continue;
        const auto info = controller_->rank(inc.role);
        if (!info || info->pid != inc.pid || !info->hung || info->status != RankStatus::active) {
            log("stall_cleared", {{"role", inc.role},
                                  {"pid", inc.pid},
                                  {"last_step_tag", inc.last_step_tag},
                                  {"step_tag_now", info ? json(info->step_tag) : json(nullptr)},
                                  {"confirm_ms", stall_confirm_.count()}});
            continue;
        }
        m.outcome = kill_hung(inc);
        m.decided = SysClock::now();
        on_confirmed_hang(m);
    }
}

void Supervisor::on_confirmed_hang(const HungMsg& m) {
    const auto& inc = m.incident;
    Incident i;
    i.attempt = attempt_.index;
    i.obs = {inc.reason == IncidentReason::stalled ? Observed::hang_stalled : Observed::hang_no_heartbeat, 0};
    i.role = inc.role;
    i.pid = inc.pid;
    i.node = nodes_.node_of_rank(layout_, inc.hostname, inc.role);
    if (i.node.empty() && is_spare_role(inc.role)) i.node = layout_.spare_node;
    i.hang = true;
    i.kill = m.outcome;
    const auto fired = faults_fired_.find(inc.pid);
    i.step = failure_step(fired != faults_fired_.end() ? std::optional(fired->second.step) : std::nullopt,
                          inc.last_step_tag, last_step_);
    i.detection_latency_ms = static_cast<double>(inc.detection_latency.count());
    if (auto f = faults_fired_.find(inc.pid); f != faults_fired_.end())
        i.since_injection_ms = static_cast<double>(unix_ms(m.decided) * 1000 - f->second.unix_us) / 1000.0;
    i.detail = std::string(to_string(inc.reason)) + ", last step tag " + std::to_string(inc.last_step_tag) + "; " +
               std::string(to_string(m.outcome));
    const Incident& recorded = add_incident(i);
    log("hang_kill", {{"incident", recorded.id},
                      {"role", inc.role},
                      {"pid", inc.pid},
                      {"hostname", inc.hostname},
                      {"result", to_string(m.outcome)},
                      {"signal", "SIGKILL"},
                      {"detection_latency_ms", inc.detection_latency.count()},
                      {"since_injection_ms", recorded.since_injection_ms >= 0 ? json(round3(recorded.since_injection_ms))
                                                                              : json(nullptr)}});
    say("FAILURE #" + std::to_string(recorded.id) + ": " + inc.role + " (pid " + std::to_string(inc.pid) + ") hung (" +
        std::string(to_string(inc.reason)) + " for " + human_ms(recorded.detection_latency_ms) +
        (recorded.since_injection_ms >= 0 ? ", " + human_ms(recorded.since_injection_ms) + " after the fault" : "") +
        ") -> " + (m.outcome == KillOutcome::killed ? "killed with SIGKILL" : "NOT killed: " + std::string(to_string(m.outcome))) +
        ", " + std::string(recorded.rule->classification) + " (tier " + std::to_string(recorded.rule->tier) + ")");

    // A whole node silent at once is a node failure, not a process failure.
    if (i.node.empty()) return;
    const auto now = Clock::now();
    const auto window = silent_nodes_.window();
    const int on_node = i.node == layout_.spare_node ? 0 : layout_.ranks_on_node(i.node);
    const bool all_silent = silent_nodes_.observe(i.node, inc.role, now, on_node);
    const bool remote = m.outcome == KillOutcome::remote;
    // A rank on another host cannot be killed from here: its node has to go, whatever the
    // other ranks there do.
    if ((remote && layout_.slurm) || all_silent) {
        Incident n;
        n.attempt = attempt_.index;
        n.obs = {remote ? Observed::node_silent_remote : Observed::node_silent_local, 0};
        n.role = "*";
        n.node = i.node;
        n.detail = "all " + std::to_string(on_node) + " ranks of " + i.node + " went silent within " +
                   human_ms(static_cast<double>(window.count()));
        const Incident& node_inc = add_incident(n);
        say("FAILURE #" + std::to_string(node_inc.id) + ": node " + i.node + " silent -> " +
            std::string(node_inc.rule->classification) + ", " + std::string(to_string(node_inc.rule->action)));
        silent_nodes_.clear(i.node);
        if (node_inc.rule->action == Action::replace_node && layout_.slurm) nodes_.mark_lost(i.node);
        if (node_inc.rule->action == Action::replace_node && !attempt_.exited) {
            forced_death_ = n.obs;
            forced_detail_ = n.detail;
            forced_first_evidence_ = first_failure_since_progress_.value_or(now);
            ::kill(-attempt_.child.pid(), SIGKILL);
        }
    }
}

void Supervisor::on_lost(const LostMsg& m) {
    const auto& inc = m.incident;
    if (old_pids_.count(inc.pid) || tearing_down_ || attempt_.exited) return;
    if (interrupted_) return;  // we asked the job to stop: its ranks leaving is no failure
    {
        std::lock_guard lock(killed_mutex_);
        if (killed_pids_.count(inc.pid)) {
            log("kill_confirmed", {{"role", inc.role}, {"pid", inc.pid}});
            return;
        }
    }
    if (is_spare_role(inc.role) && (attempt_.job_stats_seen || released_pids_.count(inc.pid))) {
        // A parked spare leaves without BYE when the job releases it at the end (the leader's
        // job_stats comes just before the release).
        log("spare_released", {{"role", inc.role}, {"pid", inc.pid}});
        return;
    }
    if (!first_failure_since_progress_) first_failure_since_progress_ = m.seen;
    pending_lost_.push_back(m);
}

void Supervisor::on_event(const json& record) {
    const std::string name = record.value("event", "");
    try {
        on_record(name, record);
    } catch (const ft::records::RecordError& e) {
        // The controller checks typed records before they reach here; a bad one is refused, not
        // acted on.
        log("event_rejected", {{"source", record.value("source", "")}, {"record", name}, {"what", e.what()}});
    }
}

void Supervisor::on_record(const std::string& name, const json& record) {
    namespace records = ft::records;
    if (name == records::Step::kEvent) {
        const auto s = records::Step::from_json(record);
        if (s.loss) last_loss_ = *s.loss;
        if (s.step > last_step_ || attempt_.progressed == false) {
            if (s.step >= 0) last_step_ = s.step;
            attempt_.progressed = true;
        }
        const auto now = Clock::now();
        rate_window_.emplace_back(now, s.step);
        while (rate_window_.size() > 2 && now - rate_window_.front().first > std::chrono::seconds(5))
            rate_window_.pop_front();
        last_progress_time_ = now;
        first_failure_since_progress_.reset();
        if (restart_ && !restart_->logged && restart_->resumed && !restart_->first_step_at)
            restart_->first_step_at = now;
        std::lock_guard lock(metrics_state_.mutex);
        metrics_state_.steps = steps_completed();
        metrics_state_.loss = last_loss_;
    } else if (name == records::EndingJob::kEvent) {
        // A rank ends the job on purpose and says with which exit code (the runtime's named
        // codes: 75 relaunch, 76 state lost in memory, 77 no spare); anything else counts as 1.
        const auto e = records::EndingJob::from_json(record);
        int code = e.exit_code;
        if (code != ft::kExitForRelaunch && code != ft::kExitStateLost && code != ft::kExitNoSpare) code = 1;
        if (e.pid > 0) exit_requests_[e.pid] = code;
    } else if (name == records::FaultInjected::kEvent) {
        // The real cause of the rank's end (a kill, an exit code, a stop) and the time it fired.
        auto f = records::FaultInjected::from_json(record);
        fired_texts_.insert(f.fault);
        faults_fired_[f.pid] = std::move(f);
    } else if (name == records::Recovery::kEvent) {
        on_recovery(records::Recovery::from_json(record), record);
    } else if (name == records::JobStats::kEvent) {
        job_stats_ = records::JobStats::from_json(record);
        attempt_.job_stats_seen = true;
    } else if (name == records::CheckpointPublished::kEvent) {
        const auto c = records::CheckpointPublished::from_json(record);
        checkpoints_.push_back(record);
        say("checkpoint: step " + std::to_string(c.step) + " published in " + c.path);
    } else if (name == records::MpiErrorSeen::kEvent) {
        ++mpi_errors_[records::MpiErrorSeen::from_json(record).error_class];
    } else if (name == records::SpareReleased::kEvent) {
        released_pids_.insert(records::SpareReleased::from_json(record).pid);
    } else if (name == "device_error" || name == "cuda_error" || name == "nccl_error") {
        Incident i;
        i.attempt = attempt_.index;
        i.obs = {Observed::device_error, 0};
        i.role = record.value("source", "?");
        i.detail = record.dump();
        add_incident(i);
    }
}

void Supervisor::on_recovery(const ft::records::Recovery& r, const json& record) {
    recoveries_.push_back(r);
    const int tier = r.tier;
    const std::string& kind = r.replacement;
    const double total = r.total_ms;
    const std::int64_t replayed = r.steps_replayed;
    std::string roles;
    const std::set<std::string> failed(r.failed_roles.begin(), r.failed_roles.end());
    for (const auto& role : r.failed_roles) roles += (roles.empty() ? "" : ",") + role;
    if (kind == "relaunch" || (restart_ && !restart_->rank_record && failed.empty())) {
        // The ranks' own record of a warm relaunch (tier 2) or a restart: joins the launcher's.
        if (restart_ && !restart_->rank_record) restart_->rank_record = record;
        return;
    }
    const std::string by = "in-job tier " + std::to_string(tier) + " (" + kind + ")";
    if (kind == "spawned" || kind == "hot+spawned") last_spawn_ = {attempt_.index, Clock::now()};
    // Under Slurm the node a rank died on is not used again (docs/slurm.md): drained now,
    // its other ranks moved off it at the next relaunch.
    // (The role may already run elsewhere: the node is the one its incident names. An incident
    // still to come, its connection not yet reported closed, does this itself.)
    for (const auto& inc : incidents_)
        if (layout_.slurm && inc.attempt == attempt_.index && failed.count(inc.role) && !inc.node.empty())
            node_failed(inc.node, inc.rule->classification);
    for (auto& inc : incidents_)
        if (!inc.recovered && inc.attempt == attempt_.index && failed.count(inc.role)) {
            inc.recovered = true;
            inc.recovered_by = by;
            inc.recovery_ms = total;
        }
    recovery_notes_.push_back({failed, Clock::now(), by, total});
    // A lost role that was not yet reported (its connection had not closed yet) is now known.
    last_recovery_text_ = "tier " + std::to_string(tier) + ": " + (roles.empty() ? "?" : roles) + " -> " + kind +
                          " in " + human_ms(total) + ", resumed at step " +
                          std::to_string(r.resume_step) + " (" +
                          std::to_string(replayed) + " step" + (replayed == 1 ? "" : "s") + " replayed)";
    say("RECOVERED " + last_recovery_text_);
    first_failure_since_progress_.reset();
    std::lock_guard lock(metrics_state_.mutex);
    ++metrics_state_.recoveries[tier];
    metrics_state_.last_recovery_seconds = total / 1000;
    metrics_state_.steps_replayed += replayed;
}

// ------------------------------------------------------------------------------------------
// periodic work

void Supervisor::check_attempt_progress(const std::vector<RankInfo>& ranks) {
    std::map<std::string, const RankInfo*> current;
    for (const auto& r : ranks)
        if (r.registered_at >= attempt_.start) current[r.role] = &r;
    if (!current.empty()) attempt_.ever_registered = true;
    follow_replacements(current);
    const auto now = Clock::now();
    bool all_registered = true, all_in_loop = true;
    for (const auto& role : layout_.active_roles) {
        const auto it = current.find(role);
        if (it == current.end()) {
            all_registered = all_in_loop = false;
            break;
        }
        const RankInfo& r = *it->second;
        const bool in_loop = in_step_loop(r.phase) || r.phase == ft::wire::Phase::recovery ||
                             (r.status != RankStatus::active && r.step_tag > 0);
        if (!in_loop) all_in_loop = false;
    }
    if (all_registered && !attempt_.all_registered) {
        attempt_.all_registered = true;
        attempt_.registered_at = now;
        if (restart_ && !restart_->logged) restart_->launch_ms = ms_between(attempt_.start, now);
    }
    if (all_registered && all_in_loop && !attempt_.in_loop) {
        attempt_.in_loop = true;
        attempt_.in_loop_at = now;
        log("job_running", {{"attempt", attempt_.index},
                            {"kind", attempt_.kind},
                            {"startup_ms", round3(ms_between(attempt_.start, now))},
                            {"registered_ms", round3(ms_between(attempt_.start, attempt_.registered_at))}});
        if (restart_ && !restart_->logged) {
            restart_->restore_ms = ms_between(attempt_.registered_at, now);
            restart_->resumed = true;
            restart_->resumed_at = now;
        }
    }
    if (restart_ && !restart_->logged && restart_->resumed &&
        ((restart_->rank_record && restart_->first_step_at) || now - restart_->resumed_at > kRecordWait))
        finalize_restart(false);

    if (all_registered) {
        std::int64_t least = -1;
        for (const auto& role : layout_.active_roles) {
            const std::int64_t tag = current[role]->step_tag;
            if (tag >= 0) least = least < 0 ? tag : std::min(least, tag);
        }
        if (least >= 0) tag_steps_ = least;
    }
    // Job-level stall: no active role's step tag moved for the stall limit. A stretch in which
    // the launcher itself did not run (as the controller, RankTracker::check) does not count.
    if (last_stall_check_ != Clock::time_point{} &&
        now - last_stall_check_ > milliseconds(cfg().detection.hang_timeout_ms / 2))
        last_progress_time_ = std::min(now, last_progress_time_ + (now - last_stall_check_));
    last_stall_check_ = now;
    for (const auto& role : layout_.active_roles)
        if (const auto it = current.find(role); it != current.end()) {
            auto& last = last_tags_[role];
            if (it->second->step_tag != last) {
                last = it->second->step_tag;
                last_progress_time_ = now;
            }
        }
    check_ranks_gone(ranks, now);
    const auto& rc = cfg().recovery;
    const auto stall_limit = milliseconds(std::max<std::int64_t>(
        2LL * cfg().detection.hang_timeout_ms, (rc.max_epochs * 6LL + 1) * rc.phase_deadline_ms));
    if (attempt_.in_loop && !attempt_.exited && !forced_death_ && now - last_progress_time_ > stall_limit) {
        forced_death_ = Observation{Observed::job_stalled, 0};
        forced_detail_ = "no role's step tag moved for " + human_ms(ms_between(last_progress_time_, now)) +
                         " (limit " + human_ms(static_cast<double>(stall_limit.count())) + ")";
        forced_first_evidence_ = last_progress_time_;
        say("the job is stalled: " + forced_detail_ + "; ending it");
        ::kill(-attempt_.child.pid(), SIGKILL);
    }
}

void Supervisor::check_ranks_gone(const std::vector<RankInfo>& ranks, Clock::time_point now) {
    // A bounded end (issue 15, case 10): every process of this attempt that ever registered has
    // left (BYE) or was lost, and the roles were all there once; mpirun gets kMpirunEndGrace.
    if (!attempt_.all_registered || attempt_.exited || attempt_.mpirun_ended_by_launcher) return;
    bool any = false, all_gone = true;
    for (const auto& r : ranks) {
        if (r.registered_at < attempt_.start) continue;
        any = true;
        if (r.status == RankStatus::active) all_gone = false;
        // A lost connection is not a dead process: where the process can be seen, it must be gone.
        if (r.status == RankStatus::lost && r.hostname == local_host_ && process_alive(r.pid)) all_gone = false;
    }
    if (!any || !all_gone) {
        attempt_.ranks_gone_since.reset();
        return;
    }
    if (!attempt_.ranks_gone_since) attempt_.ranks_gone_since = now;
    if (now - *attempt_.ranks_gone_since < kMpirunEndGrace) return;
    attempt_.mpirun_ended_by_launcher = true;
    log("mpirun_lingered", {{"attempt", attempt_.index},
                            {"pid", attempt_.child.pid()},
                            {"grace_ms", kMpirunEndGrace.count()},
                            {"since_last_rank_ms", round3(ms_between(*attempt_.ranks_gone_since, now))}});
    say("every rank has left, but mpirun (pid " + std::to_string(attempt_.child.pid()) + ") did not exit within " +
        human_ms(static_cast<double>(kMpirunEndGrace.count())) + "; ending it");
    ::kill(-attempt_.child.pid(), SIGKILL);
}

void Supervisor::update_metrics(const std::vector<RankInfo>& ranks) {
    int spares = 0, active = 0;
    for (const auto& r : ranks) {
        if (r.status != RankStatus::active) continue;
        if (is_spare_role(r.role)) ++spares;
        else ++active;
    }
    std::lock_guard lock(metrics_state_.mutex);
    if (attempt_.all_registered) metrics_state_.spares_left = spares;
    metrics_state_.ranks_active = active;
    metrics_state_.heartbeats = controller_->heartbeat_count();
    for (std::size_t i = 0; i < kDropReasonCount; ++i)
        metrics_state_.drops[i] = controller_->drop_count(static_cast<DropReason>(i));
    if (rate_window_.size() >= 2) {
        const double dt = ms_between(rate_window_.front().first, rate_window_.back().first) / 1000;
        const auto ds = rate_window_.back().second - rate_window_.front().second;
        if (dt >= 0.25 && ds > 0) metrics_state_.step_seconds = dt / static_cast<double>(ds);
    }
}

std::string Supervisor::render_metrics() {
    std::lock_guard lock(metrics_state_.mutex);
    const auto& m = metrics_state_;
    const std::string job = "{job=\"" + cfg().job.name + "\"";
    std::ostringstream out;
    auto metric = [&](const char* name, const char* type, const char* help, const std::string& labels, double value) {
        out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
            << name << labels << " " << value << "\n";
    };
    metric("flashrec_up", "gauge", "1 while flashrec-launch supervises the job", job + "}", 1);
    metric("flashrec_steps_completed", "counter", "Training steps completed (newest step reported + 1)", job + "}",
           static_cast<double>(m.steps));
    metric("flashrec_step_seconds", "gauge", "Mean wall time per step over the last few seconds", job + "}", m.step_seconds);
    if (!std::isnan(m.loss)) metric("flashrec_loss", "gauge", "Newest loss the trainer reported", job + "}", m.loss);
    metric("flashrec_failures_total", "counter", "Failure incidents seen (hangs, lost ranks, job deaths)", job + "}",
           static_cast<double>(m.failures));
    out << "# HELP flashrec_recoveries_total Recoveries completed, by tier (1 in-job, 2 warm relaunch, 3 HDF5)\n"
        << "# TYPE flashrec_recoveries_total counter\n";
    for (int tier : {1, 2, 3}) {
        const auto it = m.recoveries.find(tier);
        out << "flashrec_recoveries_total" << job << ",tier=\"" << tier << "\"} "
            << (it == m.recoveries.end() ? 0 : it->second) << "\n";
    }
    metric("flashrec_last_recovery_seconds", "gauge", "Duration of the newest recovery", job + "}", m.last_recovery_seconds);
    metric("flashrec_spares_left", "gauge", "Hot spares parked and registered", job + "}", m.spares_left);
    metric("flashrec_ranks_active", "gauge", "Active ranks connected to the control plane", job + "}", m.ranks_active);
    metric("flashrec_warm_relaunches_total", "counter", "Warm relaunches started (tier 2)", job + "}",
           static_cast<double>(m.warm_relaunches));
    metric("flashrec_cold_restarts_total", "counter", "Restarts from HDF5 started (tier 3)", job + "}",
           static_cast<double>(m.cold_restarts));
    metric("flashrec_steps_replayed_total", "counter", "Steps computed twice because of failures", job + "}",
           static_cast<double>(m.steps_replayed));
    metric("flashrec_heartbeats_total", "counter", "Heartbeats the controller accepted", job + "}",
           static_cast<double>(m.heartbeats));
    out << "# HELP flashrec_control_plane_drops_total Connections the controller dropped, by reason\n"
        << "# TYPE flashrec_control_plane_drops_total counter\n";
    for (std::size_t i = 0; i < kDropReasonCount; ++i)
        out << "flashrec_control_plane_drops_total" << job << ",reason=\""
            << to_string(static_cast<DropReason>(i)) << "\"} " << m.drops[i] << "\n";
    return out.str();
}

void Supervisor::print_progress(bool force) {
    if (!cfg().logging.progress && !force) return;
    if (force && last_step_ == last_printed_step_) return;
    const auto now = Clock::now();
    if (!force && (now - last_progress_print_ < kProgressEvery || last_step_ == last_printed_step_)) return;
    if (last_step_ < 0 && !force) return;
    last_progress_print_ = now;
    last_printed_step_ = last_step_;
    char line[512];
    // Step events arrive in batches: a rate needs a window of some length to mean anything.
    char rate[32] = "-";
    if (rate_window_.size() >= 2) {
        const double dt = ms_between(rate_window_.front().first, rate_window_.back().first) / 1000;
        const auto ds = rate_window_.back().second - rate_window_.front().second;
        if (dt >= 0.25 && ds > 0) std::snprintf(rate, sizeof rate, "%.1f", static_cast<double>(ds) / dt);
    }
    int spares = 0;
    {
        std::lock_guard lock(metrics_state_.mutex);
        spares = metrics_state_.spares_left;
    }
    char loss[32] = "-";
    if (!std::isnan(last_loss_)) std::snprintf(loss, sizeof loss, "%.6g", last_loss_);
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %s  %s steps/s  spares %d  last recovery: %s",
                  static_cast<long long>(steps_completed()), static_cast<long long>(cfg().job.steps), loss, rate,
                  spares, last_recovery_text_.c_str());
    say(line);
}

void Supervisor::tick() {
    const auto now = Clock::now();
    run_pending_drains();
    confirm_stalls();
    // Lost ranks, once their last words (exit lines) had a chance to arrive.
    for (auto it = pending_lost_.begin(); it != pending_lost_.end();) {
        const auto& inc = it->incident;
        // A rank whose connection was cut but whose process lives reconnects (HELLO again):
        // that is no failure (issue 15, case 4). Give a visibly live local process time for it.
        if (const auto now_info = controller_->rank(inc.role);
            now_info && now_info->pid == inc.pid && now_info->status == RankStatus::active) {
            log("rank_reconnected", {{"role", inc.role}, {"pid", inc.pid},
                                     {"after_ms", round3(ms_between(it->seen, now))}});
            it = pending_lost_.erase(it);
            continue;
        }
        const bool settling = now - it->seen < kLostSettle ||
                              (now - it->seen < kReconnectWait && inc.hostname == local_host_ && process_alive(inc.pid));
        if (settling && !attempt_.exited) {
            ++it;
            continue;
        }
        if (!interrupted_ && (!attempt_.exited || exit_requests_.empty())) {
            Incident i;
            i.attempt = attempt_.index;
            i.obs = {Observed::connection_lost, 0};
            if (auto e = exit_requests_.find(inc.pid); e != exit_requests_.end()) i.obs = {Observed::exit_code, e->second};
            if (auto f = faults_fired_.find(inc.pid); f != faults_fired_.end()) {
                // The fault's own record names the real cause.
                const auto& fault = f->second;
                if (fault.action == "kill") i.obs = {Observed::signal, SIGKILL};
                else if (fault.action == "exit") i.obs = {Observed::exit_code, fault.exit_code};
                i.since_injection_ms = static_cast<double>(unix_ms(it->when) * 1000 - fault.unix_us) / 1000.0;
                i.detail = "fault injected: " + fault.fault;
            }
            i.role = inc.role;
            i.pid = inc.pid;
            i.node = nodes_.node_of_rank(layout_, inc.hostname, inc.role);
            if (nodes_.is_lost(i.node)) {
                // Part of its node's loss, which is the failure on record.
                log("rank_lost_with_node", {{"role", inc.role}, {"pid", inc.pid}, {"node", i.node}});
                it = pending_lost_.erase(it);
                continue;
            }
            const auto fired = faults_fired_.find(inc.pid);
            i.step = failure_step(fired != faults_fired_.end() ? std::optional(fired->second.step) : std::nullopt,
                                  inc.last_step_tag, last_step_);
            i.detection_latency_ms = static_cast<double>(inc.detection_latency.count());
            // Its recovery may already be done: the record can beat the settle time.
            for (const auto& note : recovery_notes_)
                if (note.at >= it->seen && note.roles.count(inc.role)) {
                    i.recovered = true;
                    i.recovered_by = note.by;
                    i.recovery_ms = note.ms;
                }
            const Incident& recorded = add_incident(i);
            if (layout_.slurm && recorded.rule->tier == 1 && !recorded.node.empty())
                node_failed(recorded.node, recorded.rule->classification);
            say("FAILURE #" + std::to_string(recorded.id) + ": " + inc.role + " (pid " + std::to_string(inc.pid) +
                ") lost in step " + std::to_string(recorded.step) +
                (recorded.since_injection_ms >= 0 ? " (" + human_ms(recorded.since_injection_ms) + " after the fault)" : "") +
                " -> " + std::string(recorded.rule->classification) + ", " + std::string(to_string(recorded.rule->action)) +
                (recorded.rule->tier ? " (tier " + std::to_string(recorded.rule->tier) + ")" : ""));
        }
        it = pending_lost_.erase(it);
    }
    const auto poll_every = restart_ && !restart_->logged ? milliseconds(5) : milliseconds(50);
    if (now - last_ranks_poll_ >= poll_every) {
        last_ranks_poll_ = now;
        const auto ranks = controller_->ranks();
        if (!attempt_.exited) check_attempt_progress(ranks);
        update_metrics(ranks);
    }
    print_progress(false);
    if (interrupted_ && now > interrupt_deadline_ && !attempt_.exited) {
        say("the job did not stop within " + human_ms(static_cast<double>(kInterruptGrace.count())) + ": killing it");
        ::kill(-attempt_.child.pid(), SIGKILL);
        interrupt_deadline_ = now + std::chrono::hours(24);
    }
}

double Supervisor::median_step_ms() const {
    if (job_stats_) return job_stats_->median_step_ms;
    if (rate_window_.size() >= 2) {
        const double dt = ms_between(rate_window_.front().first, rate_window_.back().first);
        const auto ds = rate_window_.back().second - rate_window_.front().second;
        if (ds > 0) return dt / static_cast<double>(ds);
    }
    return 0;
}

void Supervisor::summary() {
    const double wall_ms = ms_between(job_start_, Clock::now());
    std::vector<RestartCost> restarts;
    for (const auto& r : restarts_done_)
        restarts.push_back({r.value("steps_replayed", std::int64_t{0}), r.value("total_ms", 0.0)});
    std::vector<HangSpan> hangs;
    for (const auto& i : incidents_)
        if (i.hang) {
            const double end = ms_between(job_start_, i.at);
            hangs.push_back({end - (i.since_injection_ms >= 0 ? i.since_injection_ms : i.detection_latency_ms), end});
        }
    const ReportTotals totals = report_totals(recoveries_, restarts, std::move(hangs), median_step_ms());
    const std::int64_t replayed = totals.steps_replayed;
    const double recovery_ms = totals.recovery_ms, hang_ms = totals.hang_ms, restart_ms = totals.restart_ms,
                 replay_ms = totals.replay_ms, lost_ms = totals.lost_ms();
    const int hot = totals.hot, spawned = totals.spawned, in_job = totals.in_job;
    {
        std::lock_guard lock(metrics_state_.mutex);
        metrics_state_.time_lost_seconds = lost_ms / 1000;
    }
    json incidents = json::array();
    for (const auto& i : incidents_)
        incidents.push_back({{"incident", i.id}, {"role", i.role}, {"classification", i.rule->classification},
                             {"recovered_by", i.recovered_by}});
    log("job_end", {{"outcome", outcome_},
                    {"exit_code", exit_code_},
                    {"message", end_message_},
                    {"wall_s", round3(wall_ms / 1000)},
                    {"steps_completed", steps_completed()},
                    {"steps", cfg().job.steps},
                    {"failures", incidents_.size()},
                    {"incidents", incidents},
                    {"replacements_in_job", in_job},
                    {"hot_spares_used", hot},
                    {"spawned", spawned},
                    {"warm_relaunches", warm_relaunches_},
                    {"cold_restarts", cold_restarts_},
                    {"steps_replayed", replayed},
                    {"time_lost_ms", {{"total", round3(lost_ms)},
                                      {"hang_detection", round3(hang_ms)},
                                      {"in_job_recovery", round3(recovery_ms)},
                                      {"relaunch", round3(restart_ms)},
                                      {"replayed_steps", round3(replay_ms)}}},
                    {"checkpoints", checkpoints_.size()}});

    say("------------------------------------------------------------------");
    say("job " + cfg().job.name + ": " + outcome_ + ", " + std::to_string(steps_completed()) + "/" +
        std::to_string(cfg().job.steps) + " steps in " + human_ms(wall_ms) + " (exit code " + std::to_string(exit_code_) + ")");
    if (!end_message_.empty()) say("  " + end_message_);
    say("failures        " + std::to_string(incidents_.size()));
    for (const auto& i : incidents_) {
        const std::string who = i.role != "*" ? i.role : !i.node.empty() ? "node " + i.node : std::string("the MPI job");
        std::string line = "  #" + std::to_string(i.id) + " " + who +
                           (i.pid > 0 ? " (pid " + std::to_string(i.pid) + ")" : "") +
                           (i.step >= 0 ? " at step " + std::to_string(i.step) : "") + ": " +
                           std::string(i.rule->classification) + " -> " + std::string(to_string(i.rule->action));
        if (i.hang)
            line += (i.kill == KillOutcome::killed ? ", killed after " : ", found after ") +
                    human_ms(i.since_injection_ms >= 0 ? i.since_injection_ms : i.detection_latency_ms) +
                    (i.kill == KillOutcome::killed ? "" : " (not killed: " + std::string(to_string(i.kill)) + ")");
        if (!i.recovered_by.empty())
            line += "; recovered by " + i.recovered_by + (i.recovery_ms >= 0 ? " in " + human_ms(i.recovery_ms) : "");
        say(line);
    }
    say("replacements    " + std::to_string(in_job) + " in-job (" + std::to_string(hot) + " hot spare, " +
        std::to_string(spawned) + " spawned); " + std::to_string(warm_relaunches_) + " warm relaunch(es); " +
        std::to_string(cold_restarts_) + " HDF5 restart(s)");
    say("time lost       " + human_ms(lost_ms) + " (hang detection " + human_ms(hang_ms) + ", in-job recovery " +
        human_ms(recovery_ms) + ", relaunch " + human_ms(restart_ms) + ", replayed steps " + human_ms(replay_ms) + ")");
    say("steps replayed  " + std::to_string(replayed));
    if (!checkpoints_.empty()) say("checkpoints     " + std::to_string(checkpoints_.size()));
    say("event log       " + plan_.events_path.string());
}

int Supervisor::run() {
    setup();
    LaunchKind first;
    first.resume = options_.resume;
    first.faults = plan_.faults;
    start_attempt("initial", first);

    while (!done_) {
        pollfd fds[4];
        nfds_t n = 0;
        fds[n++] = {signal_fd_, POLLIN, 0};
        fds[n++] = {wake_fd_, POLLIN, 0};
        const nfds_t out_index = n;
        if (attempt_.output_open(false)) fds[n++] = {attempt_.child.out.get(), POLLIN, 0};
        const nfds_t err_index = n;
        if (attempt_.output_open(true)) fds[n++] = {attempt_.child.err.get(), POLLIN, 0};
        const int timeout = restart_ && !restart_->logged ? 5 : 50;
        if (::poll(fds, n, timeout) < 0 && errno != EINTR) throw Error(std::string("poll: ") + std::strerror(errno));

        if (fds[0].revents & POLLIN) {
            signalfd_siginfo info{};
            while (::read(signal_fd_, &info, sizeof info) == sizeof info) {
                const int sig = static_cast<int>(info.ssi_signo);
                if (sig == SIGCHLD) continue;
                if (sig == SIGUSR1) {
                    // Slurm's warning before the time limit (sbatch --signal): the job goes on;
                    // a requeue resumes from the newest periodic checkpoint.
                    say("got SIGUSR1 (time limit near?): carrying on; the newest periodic checkpoint is what a "
                        "requeue resumes from");
                    log("signal", {{"signal", sig}, {"action", "ignored"}});
                    continue;
                }
                if (interrupted_ || attempt_.exited) {
                    say("second signal: killing the job now");
                    if (!attempt_.exited) ::kill(-attempt_.child.pid(), SIGKILL);
                    interrupted_ = interrupted_ ? interrupted_ : sig;
                    continue;
                }
                interrupted_ = sig;
                interrupt_deadline_ = Clock::now() + kInterruptGrace;
                say(std::string("got ") + ::strsignal(sig) + ": stopping the job (SIGTERM to mpirun)");
                log("interrupted", {{"signal", sig}});
                ::kill(-attempt_.child.pid(), SIGTERM);
            }
        }
        reap_children([this](pid_t pid, int status) {
            if (pid == attempt_.child.pid() && !attempt_.exited) attempt_.reaped(status);
        });
        if (fds[1].revents & POLLIN) {
            std::uint64_t count = 0;
            (void)!::read(wake_fd_, &count, sizeof count);
        }
        drain_queue();
        const auto sink = [this](const std::string& line, bool is_err) { handle_line(line, is_err); };
        if (attempt_.output_open(false) && (fds[out_index].revents & (POLLIN | POLLHUP | POLLERR))) attempt_.read_output(false, sink);
        if (attempt_.output_open(true) && (fds[err_index].revents & (POLLIN | POLLHUP | POLLERR))) attempt_.read_output(true, sink);
        tick();
        if (attempt_.exited) on_job_exit();
    }

    teardown("end of the job");
    const int removed = ft::remove_all(cfg().job.name);
    log("shm_cleanup", {{"job", cfg().job.name}, {"segments_removed", removed}});
    print_progress(true);
    run_pending_drains();
    summary();
    if (requeue_checkpoint_) requeue();
    controller_.reset();
    metrics_.reset();
    return exit_code_;
}

}  // namespace

int supervise(const Plan& plan, const SupervisorOptions& options) {
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
