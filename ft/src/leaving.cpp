#include "flashrec/ft/leaving.hpp"

#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>

namespace flashrec::ft {

namespace {

std::atomic<bool> by_signal{false};
std::atomic<bool> loop_exits_by_signal{false};

bool mpi_is_up() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}

// Registered with on_exit (glibc), which, unlike atexit, hands the handler the exit status.
void on_process_exit(int status, void*) {
    if (status == 0 || !loop_exits_by_signal.load() || !mpi_is_up()) return;
    std::fprintf(stderr,
                 "flashrec[pid %d]: exit(%d) inside the step loop: ending by SIGKILL instead, so that PRRTE counts "
                 "this rank's failure once (docs/ulfm-traps.md, trap 14)\n",
                 static_cast<int>(::getpid()), status);
    std::fflush(nullptr);
    ::kill(::getpid(), SIGKILL);
}

}  // namespace

void leave_by_signal(bool on) { by_signal.store(on); }

void nonzero_exits_by_signal(bool on) {
    static std::once_flag registered;
    if (on) std::call_once(registered, [] { ::on_exit(on_process_exit, nullptr); });
    loop_exits_by_signal.store(on);
}

void leave_process(int exit_code) {
    if (by_signal.load() && mpi_is_up()) {
        std::fprintf(stderr,
                     "flashrec[pid %d]: leaving by SIGKILL rather than with exit code %d, so that the peers see it "
                     "at once over shared memory (docs/ulfm-traps.md, trap 1)\n",
                     static_cast<int>(::getpid()), exit_code);
        ::kill(::getpid(), SIGKILL);
    }
    _exit(exit_code);
}

}  // namespace flashrec::ft
