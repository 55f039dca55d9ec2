// Process plumbing for flashrec-launch: find every process of the job (PRRTE puts each rank in a
// process group of its own, and ranks outlive a killed mpirun), and make sure they are all gone.
// Linux only (/proc). Starting mpirun is attempt.hpp's.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wait_status.hpp"

namespace flashrec::launcher {

// PR_SET_CHILD_SUBREAPER: orphans of the job (ranks whose mpirun died) become this process's
// children, so they can still be found, killed and reaped. false if the kernel refused.
bool become_subreaper();

// Reads an open file to its end (at most max_bytes): nullopt on any read error. /proc files of a
// process that exits during the read fail with ESRCH; that is "gone", never an exception.
std::optional<std::string> read_fd(int fd, std::size_t max_bytes = 1 << 20);
// read_fd of a file opened here: nullopt when it cannot be opened or read.
std::optional<std::string> read_proc_file(const std::string& path, std::size_t max_bytes = 1 << 20);

// Every live process whose parent chain leads to `root` (not `root` itself): from the
// /proc/<pid>/task/<tid>/children files where the kernel has them (only the tree is read),
// else from every process's parent pid in /proc/<pid>/stat.
std::vector<pid_t> descendants_of(pid_t root);
// Whether `ancestor` is on `pid`'s parent chain.
bool is_descendant(pid_t pid, pid_t ancestor);
// Processes (other than this one) whose environment holds exactly `key=value`. Reads every
// process's environ: the shell uses it only where it could not become a subreaper.
std::vector<pid_t> processes_with_env(std::string_view key, std::string_view value);
// Parent pid and state letter of `pid` from /proc/<pid>/stat; false if it is gone.
bool read_stat(pid_t pid, pid_t& ppid, char& state);

// The process exists and is neither a zombie nor dead.
bool process_alive(pid_t pid);
// A killed mpirun leaves its PRRTE session directory ${TMPDIR:-/tmp}/ompi.<pid> behind; a later
// mpirun given that pid refuses to start (tools/fr-mpirun). Called once mpirun is reaped.
void remove_session_dir(pid_t mpirun);

struct Teardown {
    int signalled = 0;          // processes sent SIGKILL
    bool complete = false;      // nothing of the job is left
    std::vector<pid_t> left;    // what was still there when the time limit ran out
    double ms = 0;
};

// SIGKILLs the process group `pgid` (if > 0), then every descendant of this process and every
// process carrying `tag_key=tag_value` in its environment, again and again, until none is left
// or `limit` has passed. Reaps this process's children on the way and reports each to `reaped`
// (pid, wait status).
Teardown kill_everything(pid_t pgid, std::string_view tag_key, std::string_view tag_value,
                         std::chrono::milliseconds limit, const std::function<void(pid_t, int)>& reaped);

// Reaps every exited child without blocking, reporting each to `reaped`.
void reap_children(const std::function<void(pid_t, int)>& reaped);

}  // namespace flashrec::launcher
