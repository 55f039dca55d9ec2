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

// The control plane found a rank hung (no heartbeat, or stalled). The core decides what follows:
// a silent rank is killed at once (KillRank), a stalled one is confirmed first.
struct HangReported {
    RankIncident incident;
};
// Another process took a rank's role while its connection was open: the survivors declared it
// failed. `alive_here`: its process lives and is of this launcher's tree, the one fact the shell
// reads (from /proc) when it is reported; the core decides whether that is a hang or a loss.
struct RankSuperseded {
    RankIncident incident;
    bool alive_here = false;
};
// A hung rank and what became of its SIGKILL (the result of a KillRank), or `pending` for a stall
// the core has not confirmed yet.
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

// The Slurm requeue that a Finish with requeue_from asked for was carried out: `refused` says why
// Slurm refused it (nullopt: requeued, or no Slurm job to requeue). Handed in before the summary,
// so that the job_end record and the exit code say the same.
struct RequeueDone {
    std::optional<std::string> refused;
};

using Input = std::variant<ft::records::Step, ft::records::FaultInjected, ft::records::CheckpointPublished,
                           ft::records::EndingJob, ft::records::RoleFinished, ft::records::MpiErrorSeen,
                           ft::records::SpareReleased, ft::records::JobStats, ft::records::ProtectionInterval, RecoveryRecord, HangReported,
                           RankSuperseded, RankHung, RankLost, MpirunExited, DaemonLost, SignalReceived, Tick,
                           AttemptStarted, TeardownDone, RequeueDone>;

// A rank's record as an input: nullopt for records the launcher does not act on (a trainer's own
// events, checkpoint_resumed). Throws ft::records::RecordError for a typed record that is wrong.
std::optional<Input> record_input(const nlohmann::json& record);

}  // namespace flashrec::launcher
