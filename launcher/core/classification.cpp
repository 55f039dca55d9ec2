#include "classification.hpp"


#include <array>
#include <csignal>
#include <cstdio>

#include "flashrec/ft/contract.hpp"

namespace flashrec::launcher {

namespace {

// Indices into kRules, used by classify().
enum RuleId : std::size_t {
    r_hang_silent,
    r_hang_stalled,
    r_lost,
    r_node_local,
    r_node_remote,
    r_node_lost,
    r_exit_0,
    r_exit_2,
    r_exit_75,
    r_exit_76,
    r_exit_77,
    r_exit_78,
    r_exit_81,
    r_exit_other,
    r_sig_bus,
    r_sig_crash,
    r_sig_kill,
    r_sig_term,
    r_sig_other,
    r_mpi_failed,
    r_mpi_other,
    r_job_ended,
    r_job_stalled,
    r_startup_stuck,
    r_count,
};

// The default table. A process failure on a live node is tier 1 (in-job, ULFM); anything that
// takes the MPI job down as a whole, or makes a node untrustworthy, is tier 2 (warm relaunch from
// the node-local snapshots); lost in-memory state is tier 3 (HDF5).
constexpr std::array<Rule, r_count> kRules = {{
    {"hang: no heartbeat", "process_hang", Action::kill_and_replace, 1,
     "a rank went silent (SIGSTOP, stuck in the kernel, frozen): SIGKILL it, ULFM replaces it"},
    {"hang: step tag stalled", "process_hang", Action::kill_and_replace, 1,
     "heartbeats arrive but the step loop is stuck while other ranks moved on (livelock)"},
    {"connection lost", "process_crash", Action::replace_in_place, 1,
     "the process died (crash, kill, exit): in-job recovery replaces it"},
    {"node silent (this machine)", "node_hang", Action::kill_and_replace, 1,
     "every rank of one (virtual) node went silent, but the node is this machine: kill them all"},
    {"node silent (other host)", "node_unreachable", Action::replace_node, 2,
     "every rank of a remote node went silent: the node is lost or frozen (ULFM's shrink would hang)"},
    {"node lost (mpirun lost its daemon)", "node_lost", Action::replace_node, 2,
     "PRRTE lost the daemon of a node and ended the job: relaunch on a spare node, drain the lost one"},
    {"exit code 0", "clean_exit", Action::none, 0, "the process finished normally"},
    {"exit code 2", "config_error", Action::stop, 0,
     "the trainer refused its configuration or command line: retrying cannot help"},
    {"exit code 75", "relaunch_requested", Action::warm_relaunch, 2,
     "in-job recovery gave up (max_epochs, or a recovery phase missed its deadline)"},
    {"exit code 76", "state_lost", Action::hdf5_resume, 3,
     "some role's state survives nowhere in memory: restart from the newest HDF5 checkpoint"},
    {"exit code 77", "spares_exhausted", Action::hdf5_resume, 3,
     "no hot spare left and spawn failed or is off (slurm.when_spares_exhausted applies)"},
    {"exit code 78", "deterministic_error", Action::stop, 0,
     "a rank left by an error of the trainer's own call (UsageError, ConfigError): every relaunch "
     "would fail the same way"},
    {"exit code 81", "platform_mismatch", Action::stop, 0,
     "a restore found the role's state written on another platform and recovery.require_same_platform "
     "refuses it: a relaunch would not make the platforms equal"},
    {"exit code (other)", "process_exit", Action::replace_in_place, 1,
     "a rank exited on its own (a trainer error): in-job recovery replaces it"},
    {"signal SIGBUS", "memory_fault", Action::replace_node, 2,
     "a memory error (hardware, or /dev/shm exhausted): the node is suspect"},
    {"signal SIGSEGV/SIGABRT/SIGILL/SIGFPE", "process_crash", Action::replace_in_place, 1,
     "a software crash in one process: in-job recovery replaces it"},
    {"signal SIGKILL", "process_killed", Action::replace_in_place, 1,
     "killed (OOM killer, an operator, flashrec's own hang kill): in-job recovery replaces it"},
    {"signal SIGTERM/SIGINT/SIGHUP", "terminated", Action::stop, 0,
     "asked to stop by the scheduler or a person: do not fight it"},
    {"signal (other)", "process_crash", Action::replace_in_place, 1,
     "any other fatal signal: treated as a crash of that process"},
    {"MPI error PROC_FAILED/PENDING/REVOKED", "peer_failure", Action::replace_in_place, 1,
     "a survivor saw a peer die: the ULFM recovery path"},
    {"MPI error (other class)", "transient_comm", Action::replace_in_place, 1,
     "a communication error (e.g. MPI_ERR_OTHER after a peer died): local recovery first; if "
     "the job dies of it, the job_ended_early rule escalates"},
    {"MPI job ended early", "job_lost", Action::warm_relaunch, 2,
     "mpirun ended before every role finished (node loss, crash cascade, mpirun killed)"},
    {"job stalled", "job_stalled", Action::warm_relaunch, 2,
     "no role made progress for the stall limit: a hang in-job recovery cannot clear"},
    {"startup stuck", "startup_stuck", Action::warm_relaunch, 2,
     "the attempt's ranks did not all reach the control plane within detection.startup_timeout_ms: a node "
     "that cannot start its processes, an MPI_Init that waits for one"},
}};

bool is_failure_class(int error_class) {
    return error_class == kMpiErrProcFailed || error_class == kMpiErrProcFailedPending ||
           error_class == kMpiErrRevoked;
}

}  // namespace

// The table names its rows by number ("exit code 75"), as docs/launcher.md and the event log do.
static_assert(ft::kExitBadConfig == 2 && ft::kExitForRelaunch == 75 && ft::kExitStateLost == 76 &&
                  ft::kExitNoSpare == 77 && ft::kExitDeterministicError == 78 && ft::kExitPlatformMismatch == 81,
              "the rule table's labels must match ft/contract.hpp's exit codes");

std::string_view to_string(Action action) {
    switch (action) {
        case Action::none: return "none";
        case Action::replace_in_place: return "replace_in_place";
        case Action::kill_and_replace: return "kill_and_replace";
        case Action::replace_node: return "replace_node";
        case Action::warm_relaunch: return "warm_relaunch";
        case Action::hdf5_resume: return "hdf5_resume";
        case Action::stop: return "stop";
    }
    return "?";
}

std::string_view to_string(Observed observed) {
    switch (observed) {
        case Observed::hang_no_heartbeat: return "hang_no_heartbeat";
        case Observed::hang_stalled: return "hang_stalled";
        case Observed::connection_lost: return "connection_lost";
        case Observed::node_silent_local: return "node_silent_local";
        case Observed::node_silent_remote: return "node_silent_remote";
        case Observed::node_lost: return "node_lost";
        case Observed::exit_code: return "exit_code";
        case Observed::signal: return "signal";
        case Observed::mpi_error: return "mpi_error";
        case Observed::job_ended_early: return "job_ended_early";
        case Observed::job_stalled: return "job_stalled";
        case Observed::startup_stuck: return "startup_stuck";
    }
    return "?";
}

const Rule& classify(const Observation& o) {
    switch (o.what) {
        case Observed::hang_no_heartbeat: return kRules[r_hang_silent];
        case Observed::hang_stalled: return kRules[r_hang_stalled];
        case Observed::connection_lost: return kRules[r_lost];
        case Observed::node_silent_local: return kRules[r_node_local];
        case Observed::node_silent_remote: return kRules[r_node_remote];
        case Observed::node_lost: return kRules[r_node_lost];
        case Observed::exit_code:
            switch (o.value) {
                case 0: return kRules[r_exit_0];
                case ft::kExitBadConfig: return kRules[r_exit_2];
                case ft::kExitForRelaunch: return kRules[r_exit_75];
                case ft::kExitStateLost: return kRules[r_exit_76];
                case ft::kExitNoSpare: return kRules[r_exit_77];
                case ft::kExitDeterministicError: return kRules[r_exit_78];
                case ft::kExitPlatformMismatch: return kRules[r_exit_81];
                default:
                    // A shell reports "killed by signal n" as exit code 128 + n.
                    if (o.value > 128 && o.value < 128 + 65)
                        return classify({Observed::signal, o.value - 128});
                    return kRules[r_exit_other];
            }
        case Observed::signal:
            switch (o.value) {
                case SIGBUS: return kRules[r_sig_bus];
                case SIGSEGV:
                case SIGABRT:
                case SIGILL:
                case SIGFPE: return kRules[r_sig_crash];
                case SIGKILL: return kRules[r_sig_kill];
                case SIGTERM:
                case SIGINT:
                case SIGHUP: return kRules[r_sig_term];
                default: return kRules[r_sig_other];
            }
        case Observed::mpi_error: return is_failure_class(o.value) ? kRules[r_mpi_failed] : kRules[r_mpi_other];
        case Observed::job_ended_early: return kRules[r_job_ended];
        case Observed::job_stalled: return kRules[r_job_stalled];
        case Observed::startup_stuck: return kRules[r_startup_stuck];
    }
    return kRules[r_job_ended];
}

std::span<const Rule> rules() { return kRules; }

std::string format_table() {
    std::string out;
    char line[512];
    std::snprintf(line, sizeof line, "%-40s %-19s %-17s %-4s %s\n", "observed", "classification", "action",
                  "tier", "meaning");
    out += line;
    for (const Rule& r : kRules) {
        std::snprintf(line, sizeof line, "%-40.*s %-19.*s %-17.*s %-4s %.*s\n",
                      static_cast<int>(r.observed.size()), r.observed.data(),
                      static_cast<int>(r.classification.size()), r.classification.data(),
                      static_cast<int>(to_string(r.action).size()), to_string(r.action).data(),
                      r.tier ? std::to_string(r.tier).c_str() : "-", static_cast<int>(r.meaning.size()),
                      r.meaning.data());
        out += line;
    }
    return out;
}

}  // namespace flashrec::launcher
