// Runs a Slurm client (scontrol, ...) as a child process with a hard timeout.
// fork/exec with an argv vector, never a shell: node names and drain reasons are passed as
// single arguments, so nothing in them can be interpreted.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "flashrec/errors.hpp"

namespace flashrec::slurm {

// A Slurm command failed, timed out, or Slurm is not usable here (no config, no binary).
class SlurmError : public flashrec::Error {
public:
    using flashrec::Error::Error;
};

// The command did not end within its timeout (and was killed).
class CommandTimedOut : public SlurmError {
public:
    using SlurmError::SlurmError;
};

struct CommandResult {
    int exit_code = -1;  // the child's exit status; 128+N when killed by signal N
    std::string out;     // everything it wrote to stdout
    std::string err;     // everything it wrote to stderr
};

// Runs argv[0] (looked up in PATH) with the given arguments and waits at most `timeout`.
// On timeout the child's whole process group is SIGKILLed and CommandTimedOut is thrown; a
// command that cannot be started (not installed) also throws. A non-zero exit is returned,
// not thrown: the caller knows what it means.
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

// "scontrol update 'nodename=x'": the argv joined for messages, quoted where needed.
std::string printable(const std::vector<std::string>& argv);

// Slurm clients look for their configuration in $SLURM_CONF, then /etc/slurm/slurm.conf,
// then a configless cache (/run/slurm/conf/slurm.conf), and last ask DNS (an SRV query that
// leaves the machine). Throws SlurmError, naming what was checked, before that last step
// could happen.
void require_slurm_config();

}  // namespace flashrec::slurm
