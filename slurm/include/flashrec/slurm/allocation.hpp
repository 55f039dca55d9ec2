// flashrec's view of the Slurm allocation it runs in, and the few Slurm actions it takes:
// drain a failed node, requeue the job. See docs/slurm.md.
//
// Every Slurm client runs as a child process with a timeout (command.hpp) and only after
// require_slurm_config() found a configuration: without one, Slurm 22.05 clients ask DNS.
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "flashrec/slurm/command.hpp"

namespace flashrec::slurm {

inline constexpr std::chrono::milliseconds default_timeout{10000};

// True inside a Slurm job (batch script, salloc shell or job step): SLURM_JOB_ID and the
// job's node list are in the environment.
bool in_allocation();

// Expands a Slurm hostlist ("node[01-03,7],gpu2") with Slurm's own `scontrol show hostnames`,
// in Slurm's order. An empty list gives an empty vector (scontrol would read
// SLURM_JOB_NODELIST instead). Throws SlurmError: no Slurm config, scontrol missing, a list
// Slurm rejects, timeout.
std::vector<std::string> expand_nodelist(const std::string& list,
                                         std::chrono::milliseconds timeout = default_timeout);

struct Allocation {
    std::string job_id;               // SLURM_JOB_ID
    std::string job_name;             // SLURM_JOB_NAME ("" when unset)
    std::string nodelist;             // SLURM_JOB_NODELIST as Slurm wrote it (compressed)
    std::vector<std::string> nodes;   // every node of the job, expanded, in Slurm's order
    std::vector<std::string> active;  // the first `active_nodes` nodes: the ranks' layout
    std::vector<std::string> spare;   // all the others (at least `spare_nodes`): kept out of
                                      // the layout, but in the allocation so spawn can reach them
    std::string this_node;            // SLURMD_NODENAME: where this process runs ("" outside a job)
    int restart_count = 0;            // SLURM_RESTART_COUNT: > 0 once the job was requeued
};

// Splits `nodes` (Slurm's order) into active and spare. More nodes than asked for become
// extra spares. Throws SlurmError naming both numbers when there are too few.
Allocation split_nodes(std::vector<std::string> nodes, int active_nodes, int spare_nodes);

// The allocation this process runs in (SLURM_JOB_ID, SLURM_JOB_NODELIST, ...), split as above.
// Throws SlurmError outside an allocation or when it has fewer than active + spare nodes.
Allocation read_allocation(int active_nodes, int spare_nodes);

// The nodes a running job holds now, from the controller (`scontrol show job`). Unlike
// SLURM_JOB_NODELIST, which is fixed at start, this drops nodes a --no-kill job has lost.
std::vector<std::string> job_nodes(const std::string& job_id,
                                   std::chrono::milliseconds timeout = default_timeout);

// --- which nodes still run a process --------------------------------------------------------

// {"srun", "--jobid=<job>", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=<node>", "--quiet",
// "true"}: a step of the job on one node that starts a process there and ends. It fails (or never
// returns) when the node's slurmd is gone: what PRRTE cannot say when it loses every daemon of a
// launch at once (docs/ulfm-traps.md, "PRRTE and Slurm").
std::vector<std::string> probe_command(const std::string& job_id, const std::string& node);

// How many probes run at once: every node of a 1,000-node layout at once would be 1,000 sruns
// asking slurmctld for a step in the same second.
inline constexpr std::size_t kProbesAtOnce = 32;

// Runs probe_command on every node, at most `at_once` at a time (the next starts as one ends), and
// waits at most `timeout` for each: the nodes whose probe failed or did not end in time, in the
// order given. It takes at most ceil(nodes / at_once) x `timeout`, and about `timeout` when fewer
// than `at_once` nodes hang. Throws SlurmError when Slurm is not usable here (no config, no srun).
std::vector<std::string> unreachable_nodes(const std::string& job_id, const std::vector<std::string>& nodes,
                                           std::chrono::milliseconds timeout, std::size_t at_once = kProbesAtOnce);

// --- one process of the job on another node ----------------------------------------------

// {"srun", "--jobid=<job>", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=<node>", "--quiet",
// "/bin/sh", "-c", <script>, "flashrec-kill-task", "<pid>", "<job>"}: a step of the job on `node` that
// sends SIGKILL to `pid` there, but only when that process belongs to this Slurm job (its
// environment holds SLURM_JOB_ID=<job>): a rank names its own pid in its HELLO, and this must not
// become a way to kill anything else of the user's on that node. Exit codes: kTaskKilled,
// kTaskGone (no such process), kTaskNotOfJob (a process of something else: left alone).
std::vector<std::string> kill_task_command(const std::string& job_id, const std::string& node, int pid);
inline constexpr int kTaskKilled = 0;
inline constexpr int kTaskGone = 3;
inline constexpr int kTaskNotOfJob = 4;

enum class TaskKill { killed, gone, not_of_job, unreachable };
std::string_view to_string(TaskKill result);

// Runs kill_task_command: `unreachable` when srun failed or did not end within `timeout` (the
// node's slurmd is gone or frozen; Slurm refused the step). Throws SlurmError when Slurm is not
// usable here (no config, no srun).
TaskKill kill_task(const std::string& job_id, const std::string& node, int pid, std::chrono::milliseconds timeout);

// --- drain and requeue ---------------------------------------------------------------------

inline constexpr std::string_view default_reason_template = "flashrec: {classification} at step {step}";

// Fills "{name}" fields of a drain-reason template from `fields` ("{{" and "}}" are literal
// braces). A field the template names but `fields` lacks, or an unclosed brace, throws
// SlurmError. The result is made safe for Slurm: control characters become spaces, double
// quotes become single quotes (scontrol strips a leading quote), at most 200 bytes.
std::string format_reason(std::string_view tmpl, const std::map<std::string, std::string>& fields);

// format_reason(tmpl, ...) with the fields a drain reason may name: {classification} (the
// error class, e.g. node_lost), {step} (the step the job had reached), {node}, {job} (job id).
std::string drain_reason(std::string_view tmpl, const std::string& classification, long long step,
                         const std::string& node, const std::string& job_id);

// {"scontrol", "update", "nodename=<node>", "state=drain", "reason=<reason>"}. Validates the
// node name (one host, no list) and that the reason is not empty (Slurm requires one).
std::vector<std::string> drain_command(const std::string& node, const std::string& reason);

// Runs drain_command. Needs Slurm operator rights (root, SlurmUser or an admin account):
// a plain user gets SlurmError ("Access/permission denied"); the caller logs it and goes on.
void drain_node(const std::string& node, const std::string& reason,
                std::chrono::milliseconds timeout = default_timeout);

// {"scontrol", "update", "nodename=<node>", "state=resume"}: undo a drain (tests, operators).
std::vector<std::string> resume_command(const std::string& node);

// {"scontrol", "requeue", "<job_id>"}: the job goes back to pending and later restarts from
// the top of its batch script with SLURM_RESTART_COUNT incremented. A job's owner may
// requeue it; a job submitted with --no-requeue cannot be requeued.
std::vector<std::string> requeue_command(const std::string& job_id);

// Runs requeue_command; throws SlurmError with scontrol's message on failure.
void requeue_job(const std::string& job_id, std::chrono::milliseconds timeout = default_timeout);

}  // namespace flashrec::slurm
