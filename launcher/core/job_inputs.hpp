// What the launcher's core is told: the ranks' typed records (ft/records.hpp) as they arrive
// over the control plane, and what the shell saw — a rank hung or lost, mpirun exited, PRRTE
// lost a daemon, a signal, the periodic tick with the controller's view of the ranks, and the
// results of the effects the shell carried out (an attempt started, a teardown done). Each goes
// to JobCore::on(input, now) (job_core.hpp); nothing here does I/O.
#pragma once
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "rank_view.hpp"
#include "flashrec/ft/records.hpp"
#include "failure_record.hpp"
#include "job_time.hpp"

namespace flashrec::launcher {

// A hung rank. `outcome` is what became of the SIGKILL the shell sent at once (a silent rank), or
// `pending` for a stalled one, which the core confirms first (it then asks for the kill with
// KillRank and gets this input again with the outcome).
struct RankHung {
    RankIncident incident;
    KillOutcome outcome = KillOutcome::pending;
    WallTime decided{};
};
// A rank's control connection closed without BYE (now: when the shell saw it).
struct RankLost {
    RankIncident incident;
};
// The ranks' own record of an in-job recovery or of a relaunch, with its JSON (the launcher's
// warm_relaunch record embeds it as rank_record).
struct RecoveryRecord {
    ft::records::Recovery recovery;
    nlohmann::json raw;
};
struct MpirunExited {
    int status = 0;  // its wait status
};
// PRRTE said it lost its daemon on this host (mpirun's output).
struct DaemonLost {
    std::string host;
    std::string evidence;
};
struct SignalReceived {
    int signo = 0;
};
// The periodic input: the controller's view of the ranks (taken before the queued records were
// handed in, so that a connection seen closed here had its records handed in already), which of
// the pids the core asked about (JobCore::pids_to_watch) still live, and the control plane's counters.
struct Tick {
    std::vector<RankInfo> ranks;
    std::set<int> live_pids;
    std::uint64_t heartbeats = 0;
    std::array<std::uint64_t, kDropReasonCount> drops{};
};
// The shell started the attempt a StartAttempt effect asked for.
struct AttemptStarted {
    int pid = 0;
    std::vector<std::string> argv;
    SteadyTime started{};  // just before the spawn
};
// The shell tore the attempt down (Teardown effect); the newest HDF5 checkpoint it found then.
struct TeardownDone {
    std::optional<std::int64_t> checkpoint_step;
    std::string no_checkpoint_why;
    // Under Slurm: the nodes the job holds now (slurm::job_nodes); a --no-kill job loses a node
    // Slurm found dead. nullopt outside Slurm, or when the controller did not answer.
    std::optional<std::vector<std::string>> allocation_nodes;
    // Of TeardownAttempt::check_nodes, those where srun could not start a process; nullopt when
    // none were asked for or the check could not run.
    std::optional<std::vector<std::string>> unreachable_nodes;
};

using Input = std::variant<ft::records::Step, ft::records::FaultInjected, ft::records::CheckpointPublished,
                           ft::records::EndingJob, ft::records::RoleFinished, ft::records::MpiErrorSeen,
                           ft::records::SpareReleased, ft::records::JobStats, ft::records::ProtectionInterval, RecoveryRecord, RankHung,
                           RankLost, MpirunExited, DaemonLost, SignalReceived, Tick, AttemptStarted, TeardownDone>;

// A rank's record as an input: nullopt for records the launcher does not act on (a trainer's own
// events, checkpoint_resumed). Throws ft::records::RecordError for a typed record that is wrong.
std::optional<Input> record_input(const nlohmann::json& record);

}  // namespace flashrec::launcher
