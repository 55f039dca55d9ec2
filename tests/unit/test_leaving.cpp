// How flashrec's own exits leave (ft/leaving.hpp): by SIGKILL where only Open MPI's in-band detector
// would see an exit code (docs/ulfm-traps.md trap 1), with the code otherwise; and a trainer's exit(n)
// in the step loop: by SIGKILL, which PRRTE counts once (trap 14). Each case runs in a forked child
// that starts MPI as a singleton (no mpirun) and ends one way; the parent reads how it ended.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "flashrec/ft/leaving.hpp"

namespace ft = flashrec::ft;

namespace {

// "exit 3" or "signal 9", from a child that runs `body` (which must end the process).
std::string ending_of(const std::function<void()>& body) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::alarm(60);  // never outlive a stuck MPI start: SIGALRM, which no case expects
        body();
        _exit(99);  // the body returned: not an ending any case expects
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "exit " + std::to_string(WEXITSTATUS(status));
}

void start_mpi() {
    // No shared-memory BTL: a singleton that dies unfinalized would leave its segment in /dev/shm.
    ::setenv("OMPI_MCA_btl", "self", 1);
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
}

}  // namespace

TEST_CASE("leave_process keeps the exit code unless signal exits are on and MPI is up") {
    CHECK(ending_of([] { ft::leave_process(76); }) == "exit 76");  // MPI never started
    CHECK(ending_of([] {
              start_mpi();
              ft::leave_by_signal(false);
              ft::leave_process(77);
          }) == "exit 77");
    CHECK(ending_of([] {
              start_mpi();
              ft::leave_by_signal(true);
              ft::leave_process(75);
          }) == "signal 9");
    CHECK(ending_of([] {
              start_mpi();
              ft::leave_by_signal(true);
              MPI_Finalize();
              ft::leave_process(78);
          }) == "exit 78");
}

TEST_CASE("nonzero_exits_by_signal turns exit(n) into SIGKILL only while on, MPI is up and n != 0") {
    CHECK(ending_of([] {
              ft::nonzero_exits_by_signal(true);
              std::exit(3);  // MPI never started
          }) == "exit 3");
    CHECK(ending_of([] {
              start_mpi();
              ft::nonzero_exits_by_signal(true);
              std::exit(3);
          }) == "signal 9");
    CHECK(ending_of([] {
              start_mpi();
              ft::nonzero_exits_by_signal(true);
              std::exit(0);  // not a failure: unfinalized, but with its code
          }) == "exit 0");
    CHECK(ending_of([] {
              start_mpi();
              ft::nonzero_exits_by_signal(true);
              ft::nonzero_exits_by_signal(false);  // the loop ended
              std::exit(2);
          }) == "exit 2");
    CHECK(ending_of([] {
              start_mpi();
              ft::nonzero_exits_by_signal(true);
              MPI_Finalize();
              std::exit(4);
          }) == "exit 4");
    CHECK(ending_of([] {
              start_mpi();
              ft::nonzero_exits_by_signal(true);
              _exit(5);  // no handler runs
          }) == "exit 5");
}
