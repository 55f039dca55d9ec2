// How flashrec's own exits (end_job, the recovery watchdog) leave, so that MPI peers see them go.
// Over shared memory Open MPI learns that a rank exited with a code only from its in-band
// detector, a timeout later (1.8 s with flashrec's defaults; docs/ulfm-traps.md trap 1), while a
// rank that a signal ends is reported in milliseconds. So where the detector is on (mpi.transport
// shm), these exits end the process by SIGKILL: the exit code has already gone to the launcher as
// a typed record (ending_job). A trainer's own exit() or _exit() is left alone: with no record,
// the launcher reads its code from mpirun (a trainer's `return 2` after a ConfigError).
#pragma once

namespace flashrec::ft {

// On: leave_process ends by SIGKILL while MPI is up (the runtime: when the in-band detector is on).
void leave_by_signal(bool on);

// Ends this process: _exit(exit_code), or SIGKILL when leave_by_signal is on and MPI is
// initialized and not finalized.
[[noreturn]] void leave_process(int exit_code);

}  // namespace flashrec::ft
