// The launcher's /proc reads (issue 15, case 5): a process that exits while the supervisor reads
// its /proc files is "gone", never an exception, and descendants_of sees this process's own tree.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>

#include "processes.hpp"

namespace fl = flashrec::launcher;

namespace {
pid_t sleeper() {
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::pause();
        ::_exit(0);
    }
    REQUIRE(pid > 0);
    return pid;
}
void kill_and_reap(pid_t pid) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
}
}  // namespace

TEST_CASE("a /proc file of a process that exited after it was opened reads as gone, not as an exception") {
    const pid_t pid = sleeper();
    const std::string path = "/proc/" + std::to_string(pid) + "/environ";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    // The same race through the iostream the launcher used before: libstdc++ throws from underflow.
    std::ifstream stream(path, std::ios::binary);
    REQUIRE(stream);
    kill_and_reap(pid);
    // Linux fails the read with ESRCH; some kernels return nothing: either way, no exception.
    const auto after_exit = fl::read_fd(fd);
    CHECK((!after_exit || after_exit->empty()));
    ::close(fd);
    // A read that fails (here: a directory) is "nothing to read", not an exception.
    const int dir = ::open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(dir >= 0);
    CHECK_FALSE(fl::read_fd(dir).has_value());
    ::close(dir);
    bool threw = false;
    try {
        const std::string text((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
        (void)text;
    } catch (const std::exception&) {
        threw = true;
    }
    const std::string note = std::string("an ifstream read of the same file ") + (threw ? "threw" : "did not throw");
    MESSAGE(note);
    CHECK_FALSE(fl::read_proc_file(path).has_value());
    pid_t ppid = 0;
    char state = 0;
    CHECK_FALSE(fl::read_stat(pid, ppid, state));
}

TEST_CASE("descendants_of finds this process's children and nothing after they are gone") {
    const pid_t a = sleeper(), b = sleeper();
    auto mine = fl::descendants_of(::getpid());
    CHECK(std::find(mine.begin(), mine.end(), a) != mine.end());
    CHECK(std::find(mine.begin(), mine.end(), b) != mine.end());
    kill_and_reap(a);
    kill_and_reap(b);
    mine = fl::descendants_of(::getpid());
    CHECK(std::find(mine.begin(), mine.end(), a) == mine.end());
    CHECK(std::find(mine.begin(), mine.end(), b) == mine.end());
}

TEST_CASE("scanning every process while processes come and go never throws") {
    for (int round = 0; round < 50; ++round) {
        const pid_t pid = sleeper();
        CHECK_NOTHROW(fl::processes_with_env("FLASHREC_NO_SUCH_VARIABLE", "x"));
        CHECK_NOTHROW(fl::descendants_of(::getpid()));
        kill_and_reap(pid);
    }
}
