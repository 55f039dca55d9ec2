#include "flashrec/ft/leaving.hpp"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace flashrec::ft {

namespace {

std::atomic<bool> by_signal{false};

bool mpi_is_up() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}

}  // namespace

void leave_by_signal(bool on) { by_signal.store(on); }

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
