// How flashrec's own exits (end_job, the recovery watchdog) leave, so that MPI peers see them go.
// Over shared memory Open MPI learns that a rank exited with a code only from its in-band
// detector, a timeout later (1.8 s with flashrec's defaults; docs/ulfm-traps.md trap 1), while a
// rank that a signal ends is reported in milliseconds. So where the detector is on (mpi.transport
// shm), these exits end the process by SIGKILL: the exit code has already gone to the launcher as
// a typed record (ending_job). A trainer's own exit() or _exit() is left alone outside the step
// loop: with no record, the launcher reads its code from mpirun (a trainer's `return 2` after a
// ConfigError). Inside the loop a trainer's exit(n), n != 0, is a rank's failure, and PRRTE counts
// such an exit 2 or 3 times toward its job's end where it counts a death by signal once, ending
// small jobs under their repaired survivors (docs/ulfm-traps.md, trap 14): there it ends by
// SIGKILL too (nonzero_exits_by_signal).
#pragma once

namespace flashrec::ft {

// On: leave_process ends by SIGKILL while MPI is up (the runtime: when the in-band detector is on).
void leave_by_signal(bool on);

// Ends this process: _exit(exit_code), or SIGKILL when leave_by_signal is on and MPI is
// initialized and not finalized.
[[noreturn]] void leave_process(int exit_code);

// On: an exit() with a non-zero status while MPI is up says so on stderr, flushes stdio and ends
// the process by SIGKILL, before any handler registered earlier runs (the runtime: inside the
// step loop). Off again at once by false. _exit() cannot be caught and keeps PRRTE's count.
void nonzero_exits_by_signal(bool on);

}  // namespace flashrec::ft
