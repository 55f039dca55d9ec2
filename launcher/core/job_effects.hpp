// What the launcher's core asks the shell to do: values, which the shell (supervisor.cpp) queues
// and carries out one at a time in the order decided (effect_queue.hpp states the rule). The core
// decides; the shell acts and reports results back as inputs (job_inputs.hpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "launcher_records.hpp"
#include "rank_view.hpp"
#include "launch_layout.hpp"

namespace flashrec::launcher {

// One record of the event log (docs/launcher.md, "Records the launcher writes"), typed
// (launcher_records.hpp); the shell writes event_of(record) and fields_of(record).
struct LogRecord {
    CoreRecord record;
};
// One line for people on stderr ("flashrec-launch: " is put in front).
struct Say {
    std::string line;
};
// Where a hung rank is killed from when it is no process of this launcher's tree: a step of the
// Slurm job on its node (slurm::kill_task), which kills it there if it is a process of the job.
struct KillOnNode {
    std::string job_id;
    std::string node;  // Slurm's name of the rank's node
};
// A hang decided (a silent rank, a stall confirmed, a superseded process still alive): SIGKILL
// the rank (if it is a process of this job), then hand in RankHung with the outcome.
struct KillRank {
    RankIncident incident;
    std::optional<KillOnNode> on_node;  // none: kill(2) from here, a process of this launcher's tree
};
// A signal to mpirun's process group.
struct SignalJob {
    int signo = 0;
};
// SIGKILL these processes of the job (ranks left alive after mpirun exited), so that their
// control connections close and the controller holds everything they sent.
struct KillLeftovers {
    std::vector<int> pids;
};
// Write the hostfile (under Slurm), start mpirun for `layout`, hand in AttemptStarted.
struct StartAttempt {
    LaunchKind launch;
    Layout layout;
};
// End every process of the attempt, log the teardown record, drain mpirun's output, check
// `check_nodes` (under Slurm: can srun start a process there?), hand in TeardownDone.
struct TeardownAttempt {
    std::string why;
    std::vector<std::string> check_nodes;
};
// Drain a Slurm node (from the main loop, after what follows has started).
struct Drain {
    std::string node;
    std::string reason;
};
// The job is over: the shell leaves its loop and cleans up; when a checkpoint for the requeue was
// written (its step) it requeues the Slurm job and hands in RequeueDone; then it asks for the
// summary (JobCore::summary) and exits with JobCore::outcome's code.
struct Finish {
    std::optional<std::int64_t> requeue_from;
};

using Effect = std::variant<LogRecord, Say, KillRank, SignalJob, KillLeftovers, StartAttempt, TeardownAttempt, Drain, Finish>;
using Effects = std::vector<Effect>;

template <class R>
void log(Effects& fx, R record) {
    fx.emplace_back(LogRecord{CoreRecord(std::move(record))});
}
inline void say(Effects& fx, std::string line) { fx.emplace_back(Say{std::move(line)}); }

}  // namespace flashrec::launcher
